"""The WSGI app: the edge every HTTP request crosses, and the routes behind it.

``create_app()`` is the gunicorn entry point. The edge refuses DNS rebinding (Host, Origin), adds
CORS for configured origins, caps bodies, and turns anything unexpected into a JSON-RPC answer
logged once. Behind it: ``/mcp`` (Streamable HTTP, both eras), ``/sse`` + ``/messages``
(2024-11-05), with ``public_url`` set the OAuth routes (metadata, ``/authorize``, ``/token``,
``/register``), and for operators ``/healthz``, ``/readyz``, ``/metrics`` and ``POST /refresh``.
The app keeps nothing between requests that another worker would need: a tenant comes from each
request's key, a legacy session id is a signed token any worker verifies, and what the workers
of an instance must agree on is in the instance store.
"""

from __future__ import annotations

import importlib
import os
from typing import Any, Callable
from urllib.parse import urlsplit

from werkzeug.exceptions import RequestEntityTooLarge
from werkzeug.wrappers import Response

from ... import metrics, tracing
from ...errors import ColabHiveError
from ...logs import configure, log
from ...loopback import LOOPBACK_NAMES, is_loopback
from ...protocol import Server, jsonrpc
from ...settings.config import Config, ConfigError
from ...settings.sources import load
from ...store.sqlite import open_store
from ...tenants.spend import Budget
from .events import EventStore
from .incoming import HttpRequest, bind_host, hostname, local_and_direct, request_id_of
from .legacy_sse import LegacySse
from .oauth_routes import OAuthRoutes
from .operations import SERVER_CARD_PATH, Operations
from .outgoing import Answer, HttpError, failed, http_answer, json_response, not_allowed
from .relay import RELAY_DIR, CancelRelay
from .sessions import SessionCodec
from .sse import Streams
from .streamable import Streamable
from .tenancy import Tenancy

EARLY_IMPORTS = ("requests", "jsonschema")  # what a tenant's first requests need (stdio imports them then)


class McpApp:
    """The WSGI application."""

    def __init__(self, config: Config) -> None:
        check_config(config)
        self.config = config
        for module in EARLY_IMPORTS:
            importlib.import_module(module)
        resumable = config.single_tenant if config.resumable_streams is None else config.resumable_streams
        store = open_store(config.runtime_dir, config.store_max_entries)  # what this instance's workers agree on
        lasting = config.state_dir and Budget.of(config).windows  # what keys spend outlives a stop there
        spent = open_store(config.state_dir, config.store_max_entries, mapped=False) if lasting else None
        self.core = Server(config, list_changed=resumable, store=store)  # announced on the GET stream (affinity)
        self.tenancy = Tenancy(config, store, spent)
        sessions = SessionCodec(self.core.context.secret, config.session_max_age)
        streams = Streams(config, EventStore() if resumable else None)
        relay = CancelRelay(os.path.join(config.runtime_dir, RELAY_DIR),
                            self.core.cancel_relayed, self.core.running) if config.runtime_dir else None
        admission = self.tenancy.admission
        self.streamable = Streamable(self.core, config, self.tenancy, admission, streams, sessions, relay)
        self.core.on_session_change(self.streamable.remember)
        self.legacy_sse = LegacySse(self.core, self.tenancy, admission, streams, sessions)
        self.operations = Operations(config, self.tenancy)
        self.oauth = OAuthRoutes(config, self.tenancy) if self.tenancy.grants is not None else None
        public = {hostname(urlsplit(config.public_url).netloc)} if config.public_url else set()
        self.hosts = (frozenset(h.lower() for h in config.allowed_hosts) | LOOPBACK_NAMES | {bind_host(config.bind)}
                      | public)
        self.origins = frozenset(o.rstrip("/") for o in config.allowed_origins)

    def close(self) -> None:
        """A shutdown begins: calls in flight may finish within the grace, but hand out no continuation."""
        log.info("http.closing")
        self.core.close()

    def drain(self) -> None:
        """Shutting down: stop every call in flight (upstream too) and answer it with an error."""
        log.info("http.draining")
        self.core.drain()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        request = HttpRequest(environ, self.config.max_message_bytes)
        admitted = False  # past the Host and Origin checks: only then is the body read (for its id)
        try:
            self._check_host_and_origin(request)
            admitted = True
            if self.config.single_tenant and not local_and_direct(request):
                raise HttpError(403, jsonrpc.INVALID_REQUEST, "This server serves its one configured key to callers "
                                "on its own machine, directly: not from elsewhere, not through a proxy")
            response = self._route(request)
        except ColabHiveError as exc:  # what it means to the client, said once (errors.py, outgoing.http_answer)
            metrics.ERRORS.labels(f"http_{exc.http_status}").inc()
            # a request refused for its Host or Origin gets an error with no id (the transport's pages say so)
            response = http_answer(exc, request_id_of(request) if admitted else None)
        except RequestEntityTooLarge:
            response = http_answer(HttpError(413, jsonrpc.INVALID_REQUEST,
                                             f"Request body larger than {self.config.max_message_bytes} bytes"))
        except Exception:  # the edge: whatever went wrong, a JSON answer and one scrubbed log record
            response = json_response(failed(None, http_method=request.method, path=request.path[:100]), 500)
        self._add_cors(request, response)
        return response(environ, start_response)

    def _route(self, request: HttpRequest) -> Answer:
        path, method = request.path.rstrip("/") or "/", request.method
        if self.oauth is not None:
            answer = self.oauth.route(request, path)
            if answer is not None:
                return answer
        if method == "OPTIONS":
            return self._preflight(request, public=path == SERVER_CARD_PATH)
        if path == "/mcp":
            handler = {"POST": self.streamable.post, "GET": self.streamable.get,
                       "DELETE": self.streamable.delete}.get(method)
            return handler(request) if handler is not None else not_allowed("GET, POST, DELETE")
        if path == "/sse" and method == "GET":
            return self.legacy_sse.open(request)
        if path == "/messages":
            return self.legacy_sse.message(request) if method == "POST" else not_allowed("POST")
        if path == "/healthz" and method == "GET":
            return self.operations.health()
        if path == "/readyz" and method == "GET":
            return self.operations.ready()
        if path == "/metrics" and method == "GET":
            return self.operations.metrics(request)
        if path == "/refresh":
            return self.operations.refresh(request) if method == "POST" else not_allowed("POST")
        if path == SERVER_CARD_PATH:
            return self.operations.server_card(request) if method in ("GET", "HEAD") else not_allowed("GET")
        return Response(b"not found\n", 404, mimetype="text/plain")

    def _check_host_and_origin(self, request: HttpRequest) -> None:
        """Refuse DNS rebinding: an unknown Host (421) or a foreign Origin (403)."""
        host = hostname(request.host)
        if "*" not in self.hosts and host not in self.hosts:
            raise HttpError(421, jsonrpc.INVALID_REQUEST, f"Host {host!r} is not served here: to serve it (say, behind "
                            "a proxy), add it to allowed_hosts (COLABHIVE_ALLOWED_HOSTS), or set public_url")
        origin = request.headers.get("Origin")
        path = request.path.rstrip("/")
        if path == SERVER_CARD_PATH or (self.oauth is not None and self.oauth.is_public(path)):
            return  # the server card, OAuth's metadata, token and registration: no ambient credential, any origin
        if origin and origin.rstrip("/") not in self.origins and _origin_host(origin) not in self.hosts:
            raise HttpError(403, jsonrpc.INVALID_REQUEST, "Origin not allowed")

    def _preflight(self, request: HttpRequest, public: bool = False) -> Answer:
        """CORS preflight: for the configured origins; for any origin on a ``public`` document (GET only)."""
        if public:
            return Response(status=204, headers={"Access-Control-Allow-Origin": "*", "Access-Control-Allow-Methods": "GET",
                                                 "Access-Control-Allow-Headers": "Content-Type",
                                                 "Access-Control-Max-Age": "600"})
        if request.headers.get("Origin", "").rstrip("/") not in self.origins:
            return Response(status=403)
        return Response(status=204, headers={
            "Access-Control-Allow-Methods": "GET, POST, DELETE, OPTIONS",
            "Access-Control-Allow-Headers": "Authorization, X-API-Key, Content-Type, Accept, Mcp-Session-Id, "
                                            "MCP-Protocol-Version, Mcp-Method, Mcp-Name, Last-Event-ID",
            "Access-Control-Max-Age": "600"})

    def _add_cors(self, request: HttpRequest, response: Answer) -> None:
        origin = request.headers.get("Origin", "").rstrip("/")
        if origin and origin in self.origins:
            response.headers["Access-Control-Allow-Origin"] = origin
            response.headers["Access-Control-Expose-Headers"] = "Mcp-Session-Id"
            response.headers["Vary"] = "Origin"


def check_config(config: Config) -> None:
    """Refuse the unsafe combinations before serving anyone (and say why)."""
    if not config.single_tenant and not config.session_secret:
        raise ConfigError("hosted mode signs session ids, task ids and confirmations with session_secret: set "
                          "COLABHIVE_SESSION_SECRET, the same on every instance (e.g. `openssl rand -hex 32`)")
    if config.oauth and not config.public_url:
        raise ConfigError("oauth needs public_url: the address hosts reach /mcp at, e.g. https://mcp.example.com/mcp")
    if config.oauth and config.single_tenant:
        raise ConfigError("oauth lets each user bring their own key: it needs hosted mode, not --single-tenant")
    if config.single_tenant and not config.api_key:
        raise ConfigError("single-tenant mode needs an API key (COLABHIVE_API_KEY)")
    if config.manifest_snapshot and not config.single_tenant:  # no manifest fetch: no key would ever be checked
        raise ConfigError("manifest_snapshot serves one file's tools without asking the gateway, so hosted mode "
                          "could not tell a real key from a made-up one: use it with stdio or --single-tenant")
    if config.single_tenant and not is_loopback(bind_host(config.bind)):
        raise ConfigError(f"single-tenant mode serves one key to every caller: bind it to loopback, not {config.bind}")
    if config.http_long_requests is not None and config.http_long_requests >= config.http_threads > 1:
        raise ConfigError(f"http_long_requests ({config.http_long_requests}) must be below http_threads "
                          f"({config.http_threads}): the threads left over answer health checks and short requests")


def warn_about(config: Config) -> None:
    """Say what in ``config`` is allowed but probably not meant (once, by the process that starts the
    server, not by each worker)."""
    if not config.single_tenant and config.api_key:
        log.bind(hint="hosted mode takes each request's own key; use --single-tenant for a local "
                      "single-key server").warning("http.api_key_ignored")


def create_app(config: Config | None = None) -> McpApp:
    """The WSGI app, configured from the environment (and ``$COLABHIVE_MCP_CONFIG``) by default. It
    imports the gateway client's HTTP stack and the argument checker as the worker starts (stdio
    leaves them to the first request that needs them): a new tenant's first request does not pay for them."""
    if config is None:
        config = load().config
        configure(config.log_level, config.log_format, file=config.log_file)
        tracing.configure()  # in each worker: an exporter's thread does not survive a fork
    return McpApp(config)


def _origin_host(origin: str) -> str | None:
    """The host an ``Origin`` header names; ``None`` when no URL parser would read one in it
    (``http://[::1``: not allowed, like any origin that is not served here)."""
    try:
        return hostname(urlsplit(origin).netloc)
    except ValueError:
        return None
