"""Streamable HTTP (both eras) and the 2024-11-05 HTTP+SSE transport, as one WSGI app.

``create_app()`` is the gunicorn entry point. The app is stateless across requests: the
tenant comes from each request's key (or the configured key in single-tenant mode), and a
legacy session id is a signed token any worker can verify (:mod:`colabhive_mcp.transports.http.sessions`).

Routes: ``/mcp`` (POST, GET, DELETE), ``/sse`` + ``/messages`` (2024-11-05), and for operators
``/healthz``, ``/readyz``, ``/metrics`` and ``POST /refresh``.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hmac
import os
import queue
import secrets
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator
from urllib.parse import urlsplit

import requests
from cachetools import TTLCache
from werkzeug.exceptions import RequestEntityTooLarge
from werkzeug.wrappers import Request, Response

from ... import __version__, jsonrpc, metrics
from ...cancellation import Cancellation, reason_of
from ...config import Config, ConfigError, load
from ...detached import DetachedCalls
from ...keys import ApiKey, KeyRejected
from ...jsonrpc import JsonRpcError
from ...logs import configure, log
from ...manifest import ManifestError
from ...policy import Policy
from ...pool import TenantPool
from ...protocol import LEGACY_VERSIONS, META_VERSION, Server, Session, key_rejected
from ...store import open_store
from ...tenant import Tenant
from .hosting import RELAY_DIR
from .sessions import SessionCodec
from .events import EventStore, StreamLog
from .hangups import HangupWatch, peer_closed
from .relay import CancelRelay

JSON = "application/json"
SSE = "text/event-stream"
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
DISCONNECT_CHECK_S = 0.5
READINESS_TTL_S = 5.0
READINESS_TIMEOUT_S = 2.0
RETRY_MS = 1000  # how long a client waits before it reconnects to a handed-over stream
# 2026: the body field each method's Mcp-Name header mirrors
NAME_PARAMS = {"tools/call": "name", "tasks/get": "taskId", "tasks/update": "taskId", "tasks/cancel": "taskId"}
STATUS_BY_CODE = {jsonrpc.PARSE_ERROR: 400, jsonrpc.INVALID_REQUEST: 400, jsonrpc.KEY_REJECTED: 401}
INVALID_TOKEN = {"WWW-Authenticate": 'Bearer error="invalid_token"'}
MODERN_STATUS_BY_CODE = {**STATUS_BY_CODE, jsonrpc.INVALID_PARAMS: 400, jsonrpc.METHOD_NOT_FOUND: 404,
                         jsonrpc.HEADER_MISMATCH: 400, jsonrpc.MISSING_REQUIRED_CLIENT_CAPABILITY: 400,
                         jsonrpc.UNSUPPORTED_PROTOCOL_VERSION: 400}


class HttpError(Exception):
    """An answer decided before the protocol core: an HTTP status with a JSON-RPC error body."""

    def __init__(self, status: int, code: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers or {}

    def response(self, request_id: Any = None) -> Response:
        body = jsonrpc.error(request_id, JsonRpcError(self.code, self.message))
        return Response(jsonrpc.encode(body), self.status, headers=self.headers, mimetype=JSON)


class McpApp:
    """The WSGI application."""

    def __init__(self, config: Config) -> None:
        check_config(config)
        self.config = config
        resumable = config.single_tenant if config.resumable_streams is None else config.resumable_streams
        self.core = Server(config, list_changed=resumable)  # announced on the GET stream, which needs affinity
        self.store = open_store(config.runtime_dir)  # shared by the workers of this instance
        self.calls = DetachedCalls(self.store, config.host_timeout_grace)
        self.single = Tenant(config, ApiKey.of(config.api_key), self.calls) \
            if config.single_tenant and config.api_key else None
        self.single_key = ApiKey.of(config.api_key or "")
        self.pool = None if config.single_tenant else TenantPool(
            config, factory=lambda c, api_key: Tenant(c, api_key, self.calls), store=self.store)
        self.sessions = SessionCodec(config.session_secret or secrets.token_hex(32), config.session_max_age)
        self.events = EventStore() if resumable else None
        self.hosts = frozenset(h.lower() for h in config.allowed_hosts) | LOOPBACK_HOSTS | {_bind_host(config.bind)}
        self.origins = frozenset(o.rstrip("/") for o in config.allowed_origins)
        self._log_levels: TTLCache = TTLCache(maxsize=10_000, ttl=config.session_max_age)
        self._ended: TTLCache = TTLCache(maxsize=100_000, ttl=config.session_max_age)
        self._sse_sessions: dict[str, _LegacySseSession] = {}
        self._lock = threading.Lock()
        self._readiness = (float("-inf"), False)  # (checked at, gateway reachable)
        self.hangups = HangupWatch(DISCONNECT_CHECK_S)
        self.relay = CancelRelay(os.path.join(config.runtime_dir, RELAY_DIR), lambda session_id, request_id, reason:
                                 self.core.cancel(Session(id=session_id), request_id, reason)) \
            if config.runtime_dir else None

    def drain(self) -> None:
        """Shutting down: stop every call in flight (upstream too) and answer it with an error."""
        log.info("http.draining")
        self.core.drain()

    # -- WSGI ---------------------------------------------------------------------------------

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        request = Request(environ)
        request.max_content_length = self.config.max_message_bytes
        try:
            self._check_host_and_origin(request)
            response = self._route(request)
        except HttpError as exc:
            metrics.ERRORS.labels(f"http_{exc.status}").inc()
            response = exc.response()
        except RequestEntityTooLarge:
            response = HttpError(413, jsonrpc.INVALID_REQUEST,
                                 f"Request body larger than {self.config.max_message_bytes} bytes").response()
        except Exception:  # the edge: whatever went wrong, a JSON answer and one scrubbed log record
            response = _json(_failed(None, http_method=request.method, path=request.path[:100]), 500)
        self._add_cors(request, response)
        return response(environ, start_response)

    def _route(self, request: Request) -> Response:
        path, method = request.path.rstrip("/") or "/", request.method
        if method == "OPTIONS":
            return self._preflight(request)
        if path == "/mcp":
            handler = {"POST": self._post, "GET": self._get, "DELETE": self._delete}.get(method)
            if handler is None:
                return _not_allowed("GET, POST, DELETE")
            return handler(request)
        if path == "/sse" and method == "GET":
            return self._sse_open(request)
        if path == "/messages":
            return self._sse_message(request) if method == "POST" else _not_allowed("POST")
        if path == "/healthz" and method == "GET":
            return Response(b'{"status":"ok"}', mimetype=JSON)
        if path == "/readyz" and method == "GET":
            return self._ready()
        if path == "/metrics" and method == "GET":
            return self._metrics(request)
        if path == "/refresh":
            return self._refresh(request) if method == "POST" else _not_allowed("POST")
        return Response(b"not found\n", 404, mimetype="text/plain")

    # -- operations ---------------------------------------------------------------------------

    def _ready(self) -> Response:
        """Ready when the gateway answers at all (a 401 to a keyless request is an answer)."""
        now = time.monotonic()
        if now - self._readiness[0] > READINESS_TTL_S:
            try:
                requests.get(self.config.api_url + "/mcp/manifest", timeout=READINESS_TIMEOUT_S)
                reachable = True
            except requests.RequestException:
                reachable = False
            self._readiness = (now, reachable)
        reachable = self._readiness[1]
        body = {"status": "ready" if reachable else "unavailable", "gateway": "reachable" if reachable else "unreachable",
                "pool_size": len(self.pool) if self.pool is not None else 1, "version": __version__}
        return _json(body, 200 if reachable else 503)

    def _metrics(self, request: Request) -> Response:
        token = self.config.metrics_token
        if token and not hmac.compare_digest(request.headers.get("Authorization", ""), f"Bearer {token}"):
            return Response(b"metrics need the metrics token\n", 401, headers={"WWW-Authenticate": "Bearer"})
        body, content_type = metrics.render()
        return Response(body, content_type=content_type)

    def _refresh(self, request: Request) -> Response:
        """Revalidate the calling key's manifest now (in this worker), e.g. after publishing an action."""
        with self._tenant(self._api_key(request)) as tenant:
            tenant.manifest.invalidate()
            try:
                manifest = tenant.manifest.get()
            except ManifestError as exc:
                raise HttpError(502, jsonrpc.INTERNAL_ERROR, f"Cannot load the tool manifest: {exc}") from None
            except KeyRejected as exc:
                raise HttpError(401, jsonrpc.KEY_REJECTED, key_rejected(exc).message, INVALID_TOKEN) from None
        return _json({"etag": manifest.etag, "actions": len(manifest.entries)}, 200)

    # -- edge checks --------------------------------------------------------------------------

    def _check_host_and_origin(self, request: Request) -> None:
        """Refuse DNS rebinding: an unknown Host (421) or a foreign Origin (403)."""
        host = _hostname(request.host)
        if "*" not in self.hosts and host not in self.hosts:
            raise HttpError(421, jsonrpc.INVALID_REQUEST, f"Host {host!r} is not served here")
        origin = request.headers.get("Origin")
        if origin and origin.rstrip("/") not in self.origins and _hostname(urlsplit(origin).netloc) not in self.hosts:
            raise HttpError(403, jsonrpc.INVALID_REQUEST, "Origin not allowed")

    def _preflight(self, request: Request) -> Response:
        if request.headers.get("Origin", "").rstrip("/") not in self.origins:
            return Response(status=403)
        return Response(status=204, headers={
            "Access-Control-Allow-Methods": "GET, POST, DELETE, OPTIONS",
            "Access-Control-Allow-Headers": "Authorization, X-API-Key, Content-Type, Accept, Mcp-Session-Id, "
                                            "MCP-Protocol-Version, Mcp-Method, Mcp-Name, Last-Event-ID",
            "Access-Control-Max-Age": "600"})

    def _add_cors(self, request: Request, response: Response) -> None:
        origin = request.headers.get("Origin", "").rstrip("/")
        if origin and origin in self.origins:
            response.headers["Access-Control-Allow-Origin"] = origin
            response.headers["Access-Control-Expose-Headers"] = "Mcp-Session-Id"
            response.headers["Vary"] = "Origin"

    def _api_key(self, request: Request) -> ApiKey:
        """The tenant's key: the configured one in single-tenant mode, else the request's."""
        if self.single is not None:
            return self.single_key
        auth = request.headers.get("Authorization", "")
        key = auth[7:].strip() if auth[:7].lower() == "bearer " else request.headers.get("X-API-Key", "").strip()
        if not key:
            raise HttpError(401, jsonrpc.INVALID_REQUEST, "Authentication required: send your ColabHive API key "
                            "as 'Authorization: Bearer <key>' or 'X-API-Key'", {"WWW-Authenticate": "Bearer"})
        return ApiKey.of(key)  # made once, here: the secret and what is derived from it

    @contextlib.contextmanager
    def _tenant(self, api_key: ApiKey) -> Iterator[Tenant]:
        """The key's tenant, once the gateway has accepted the key: a rejected one is a 401 here."""
        try:
            if self.single is not None:
                self.single.verify()
                yield self.single
            else:
                assert self.pool is not None
                with self.pool.tenant(api_key) as tenant:
                    yield tenant
        except KeyRejected as exc:
            raise HttpError(401, jsonrpc.KEY_REJECTED, key_rejected(exc).message, INVALID_TOKEN) from None

    # -- POST /mcp ----------------------------------------------------------------------------

    def _post(self, request: Request) -> Response:
        accepts = _accepts(request)
        if not accepts:
            raise HttpError(406, jsonrpc.INVALID_REQUEST, f"Accept must allow {JSON} or {SSE}")
        if request.mimetype != JSON:
            raise HttpError(415, jsonrpc.INVALID_REQUEST, f"Content-Type must be {JSON}")
        api_key = self._api_key(request)
        with contextlib.ExitStack() as lease:  # the key is checked first: a rejected one is a 401 here
            caller = _Caller(api_key, lease.enter_context(self._tenant(api_key)), lease)
            try:
                message = jsonrpc.decode(_body(request))
            except JsonRpcError as exc:
                return _json(jsonrpc.error(None, exc), 400)
            try:
                if _is_modern(message):
                    return self._modern_post(request, message, caller, accepts)
                return self._legacy_post(request, message, caller, accepts)
            except HttpError:
                raise
            except Exception:  # answered as the core answers its own surprises: -32603 with the request's id
                answer = _failed(message)
                return Response(status=202) if answer is None else _json(answer, 200)

    def _modern_post(self, request: Request, message: dict[str, Any], caller: _Caller, accepts: set[str]) -> Response:
        """2026-07-28: stateless, with the routing headers checked against the body."""
        mismatch = _header_mismatch(request, message)
        if mismatch:
            error = JsonRpcError(jsonrpc.HEADER_MISMATCH, mismatch)
            return _json(jsonrpc.error(jsonrpc.request_id(message), error), 400)
        if "id" not in message:
            return Response(status=202)
        if message.get("method") == "subscriptions/listen" and SSE not in accepts:
            raise HttpError(406, jsonrpc.INVALID_REQUEST, f"subscriptions/listen answers with {SSE}: Accept it")
        session = Session(id="modern:" + secrets.token_urlsafe(8), transport="streamable-http")
        return self._answer(message, caller, session, request, MODERN_STATUS_BY_CODE,
                            stream=_wants_stream(message, accepts))

    def _legacy_post(self, request: Request, message: Any, caller: _Caller, accepts: set[str]) -> Response:
        if jsonrpc.method_of(message) == "initialize" and "id" in message:
            session = self.sessions.new_session()
            response = self._answer(message, caller, session, request, STATUS_BY_CODE, stream=JSON not in accepts)
            if session.version is not None:
                response.headers["Mcp-Session-Id"] = self.sessions.issue(session, caller.key)
                log.bind(session=session.id, tenant=caller.tenant.key_id, transport="streamable-http"
                         ).info("http.session.issued")
            return response
        session = self._restore_session(request, caller.key)
        version = request.headers.get("MCP-Protocol-Version")
        if version is not None and version not in LEGACY_VERSIONS:
            raise HttpError(400, jsonrpc.INVALID_REQUEST, f"Unsupported MCP-Protocol-Version: {version}")
        session.log_level = self._log_levels.get(session.id)
        if isinstance(message, list):
            answer = self.core.handle_batch(message, session=session, tenant=caller.tenant, narrow=_narrowing(request))
            return Response(status=202) if answer is None else _json(answer, 200)
        if not (isinstance(message, dict) and "id" in message and "method" in message):
            answer = self.core.handle(message, tenant=caller.tenant, session=session)
            cancelled = _cancelled_request(message)
            if self.relay is not None and cancelled is not None:
                self.relay.publish(session.id, *cancelled)  # the call may run in another worker
            return Response(status=202) if answer is None else _json(answer, _status(answer, STATUS_BY_CODE))
        resumable = self.events is not None and session.version >= "2025-11-25"
        stream = _wants_stream(message, accepts, session.log_level) or (
            SSE in accepts and message.get("method") == "tools/call" and (resumable or self._may_ask(session)))
        response = self._answer(message, caller, session, request, STATUS_BY_CODE, stream=stream, resumable=resumable)
        if message.get("method") == "logging/setLevel" and session.log_level:
            self._log_levels[session.id] = session.log_level
        return response

    def _may_ask(self, session: Session) -> bool:
        """Whether a tool call may send the client a request (confirmation): it needs an SSE answer."""
        return self.config.confirm_side_effects != "off" and "elicitation" in session.capabilities

    def _restore_session(self, request: Request, api_key: ApiKey) -> Session:
        token = request.headers.get("Mcp-Session-Id")
        if not token:
            raise HttpError(400, jsonrpc.INVALID_REQUEST, "Missing Mcp-Session-Id: send initialize first")
        session = self.sessions.restore(token, api_key)
        if session is None or session.id in self._ended:
            raise HttpError(404, jsonrpc.INVALID_REQUEST, "Unknown or expired session: initialize again")
        return session

    def _answer(self, message: dict[str, Any], caller: _Caller, session: Session, http_request: Request,
                statuses: dict[int, int], *, stream: bool, resumable: bool = False) -> Response:
        """Serve one request as a JSON body, or as an SSE stream when it will send notifications."""
        narrow = _narrowing(http_request)
        held = caller.lease.pop_all()  # the tenant stays held until the answer is complete, on whichever thread

        def run(notify: Callable[[dict[str, Any]], None], cancelled: threading.Event) -> Any:
            with held:
                try:
                    return self.core.handle(message, tenant=caller.tenant, session=session, notify=notify,
                                            cancelled=cancelled, narrow=narrow)
                except Exception:
                    return _failed(message)

        if stream:
            return self._stream(run, session if resumable else None)
        sock = _socket(http_request) if message.get("method") == "tools/call" else None
        with self.hangups.watching(sock) as hung_up:
            answer = run(lambda _n: None, hung_up)
        if answer is None:
            return Response(status=204)  # cancelled: the client is gone or asked us to stop
        return _json(answer, _status(answer, statuses))

    # -- SSE ------------------------------------------------------------------------------------

    def _stream(self, run: Callable[[Callable[[dict[str, Any]], None], threading.Event], Any],
                resumable_for: Session | None = None) -> Response:
        """Run the request on its own thread and stream its notifications, then its answer.

        A plain stream whose client goes away (a failed write, or its socket closing while we
        wait) cancels the request: its polling stops and the gateway is asked to stop the work.
        A resumable one (``resumable_for`` a session) starts with a priming event and keeps
        running: its events stay in the store for a ``GET`` with ``Last-Event-ID``.
        """
        cancelled = Cancellation()
        resumable = resumable_for is not None and self.events is not None
        log = self.events.open(resumable_for.id) if resumable else StreamLog("", "")

        def work() -> None:
            answer = None
            try:
                answer = run(log.append, cancelled)
            finally:
                log.finish(answer)

        threading.Thread(target=work, name="mcp-stream", daemon=True).start()
        return _StreamResponse(lambda sock: self._relay(log, 0, sock, cancelled, resumable, prime=resumable),
                               mimetype=SSE, headers=SSE_HEADERS)

    def _relay(self, log: StreamLog, position: int, sock: socket.socket | None, cancelled: threading.Event,
               resumable: bool, prime: bool = False) -> Iterator[bytes]:
        """The SSE bytes of ``log`` from ``position`` on, live, with keep-alive comments.

        A resumable POST stream (``prime``) starts with a priming event and is handed over after
        ``sse_poll_after`` seconds: a ``retry`` field, then the connection ends and the client
        reconnects with ``GET`` + ``Last-Event-ID``, whose stream then runs to the answer.
        """
        finished = False
        started = last = time.monotonic()
        try:
            # the first bytes go out at once, so the client has its headers before any event
            yield f"id: {log.event_id(0)}\nretry: {RETRY_MS}\ndata: \n\n".encode() if prime else b": open\n\n"
            while True:
                messages, done = log.after(position, DISCONNECT_CHECK_S)
                for message in messages:
                    position += 1
                    yield _sse_event(message, log.event_id(position) if resumable else None)
                if done:
                    finished = True
                    return
                now = time.monotonic()
                if messages:
                    last = now
                elif sock is not None and peer_closed(sock):
                    return
                elif now - last >= self.config.sse_keepalive:
                    last = now
                    yield b": keep-alive\n\n"
                if prime and self.config.sse_poll_after and now - started >= self.config.sse_poll_after:
                    yield f"retry: {RETRY_MS}\n\n".encode()
                    return
        finally:
            if not finished and not resumable:
                cancelled.set()

    def _drain(self, events: queue.Queue, sock: socket.socket | None, cancelled: threading.Event) -> Iterator[Any]:
        """Items from ``events``, with keep-alive comments while nothing happens."""
        last = time.monotonic()
        while True:
            try:
                yield events.get(timeout=DISCONNECT_CHECK_S)
                last = time.monotonic()
            except queue.Empty:
                if sock is not None and peer_closed(sock):
                    cancelled.set()
                    return
                if time.monotonic() - last >= self.config.sse_keepalive:
                    last = time.monotonic()
                    yield b": keep-alive\n\n"

    # -- GET / DELETE /mcp ----------------------------------------------------------------------

    def _get(self, request: Request) -> Response:
        """The legacy GET stream: a resumption (``Last-Event-ID``) or the notification stream."""
        if "Mcp-Session-Id" not in request.headers or self.events is None:
            return _not_allowed("POST" if self.events is None else "POST, DELETE")
        if SSE not in _accepts(request):
            raise HttpError(406, jsonrpc.INVALID_REQUEST, f"Accept must allow {SSE}")
        api_key = self._api_key(request)
        session = self._restore_session(request, api_key)
        last_event_id = request.headers.get("Last-Event-ID")
        if last_event_id:
            found = self.events.find(last_event_id, session.id)
            if found is None:
                raise HttpError(404, jsonrpc.INVALID_REQUEST, "Unknown Last-Event-ID: that stream is gone")
            log, position = found
            return _StreamResponse(lambda sock: self._relay(log, position, sock, threading.Event(), True),
                                   mimetype=SSE, headers=SSE_HEADERS)
        outbox: queue.Queue = queue.Queue()
        stop = threading.Event()
        lease = contextlib.ExitStack()
        tenant = lease.enter_context(self._tenant(api_key))  # a stream opens only for a key the gateway accepts

        def watch() -> None:
            with lease:
                self.core.watch_tools(tenant, stop, lambda: outbox.put(
                    {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}))

        def generate(sock: socket.socket | None) -> Iterator[bytes]:
            try:
                yield b": open\n\n"
                for item in self._drain(outbox, sock, stop):
                    yield item if isinstance(item, bytes) else _sse_event(item)
            finally:
                stop.set()

        threading.Thread(target=watch, name="mcp-get-stream", daemon=True).start()
        return _StreamResponse(generate, mimetype=SSE, headers=SSE_HEADERS)

    def _delete(self, request: Request) -> Response:
        if "Mcp-Session-Id" not in request.headers:
            return _not_allowed("POST")
        session = self._restore_session(request, self._api_key(request))
        self._ended[session.id] = True
        return Response(status=204)

    # -- 2024-11-05 HTTP+SSE --------------------------------------------------------------------

    def _sse_open(self, request: Request) -> Response:
        """The old transport's stream: an ``endpoint`` event, then every answer of the session."""
        api_key = self._api_key(request)
        with self._tenant(api_key):
            pass  # a stream opens only for a key the gateway accepts
        sse_session = _LegacySseSession(self.sessions.new_session("sse"), api_key.binding)
        with self._lock:
            self._sse_sessions[sse_session.session.id] = sse_session
        log.bind(session=sse_session.session.id, tenant=api_key.log_id, transport="sse").info("http.session.issued")

        def generate(sock: socket.socket | None) -> Iterator[bytes]:
            try:
                yield f"event: endpoint\ndata: /messages?session_id={sse_session.session.id}\n\n".encode()
                for item in self._drain(sse_session.outbox, sock, sse_session.closed):
                    yield item if isinstance(item, bytes) else _sse_event(item)
            finally:
                sse_session.closed.set()
                with self._lock:
                    self._sse_sessions.pop(sse_session.session.id, None)
                self.core.cancel_session(sse_session.session)

        return _StreamResponse(generate, mimetype=SSE, headers=SSE_HEADERS)

    def _sse_message(self, request: Request) -> Response:
        api_key = self._api_key(request)
        session_id = request.args.get("session_id", "")
        if not session_id:
            raise HttpError(400, jsonrpc.INVALID_REQUEST, "Missing session_id")
        with self._lock:
            sse_session = self._sse_sessions.get(session_id)
        if sse_session is None or sse_session.key != api_key.binding:
            raise HttpError(404, jsonrpc.INVALID_REQUEST, "Unknown session (it may live on another worker)")
        try:
            message = jsonrpc.decode(_body(request))
        except JsonRpcError as exc:
            return _json(jsonrpc.error(None, exc), 400)

        def work() -> None:
            try:
                with self._tenant(api_key) as tenant:
                    answer = self.core.handle(message, tenant=tenant, session=sse_session.session,
                                              notify=sse_session.outbox.put)
            except Exception:
                answer = _failed(message)
            if answer is not None:
                sse_session.outbox.put(answer)

        threading.Thread(target=work, name="mcp-sse-message", daemon=True).start()
        return Response(b"Accepted", 202, mimetype="text/plain")


@dataclass
class _Caller:
    """Who sent a POST: the key, its tenant, and the hold on that tenant (released when the request
    is answered; an SSE answer takes the hold over with ``lease.pop_all()``)."""

    key: ApiKey
    tenant: Tenant
    lease: contextlib.ExitStack


@dataclass
class _LegacySseSession:
    """A 2024-11-05 session: its messages come by POST, every answer leaves on its stream."""

    session: Session
    key: str
    outbox: queue.Queue = field(default_factory=queue.Queue)
    closed: threading.Event = field(default_factory=threading.Event)


class _StreamResponse(Response):
    """A streamed response whose generator gets the client's socket (to notice it leaving)."""

    def __init__(self, generate: Callable[[socket.socket | None], Iterator[bytes]], **kwargs: Any) -> None:
        super().__init__(None, **kwargs)
        self._generate = generate

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        self.response = _guarded(self._generate(environ.get("gunicorn.socket") or environ.get("werkzeug.socket")))
        self.direct_passthrough = True
        return super().__call__(environ, start_response)


def _guarded(stream: Iterator[bytes]) -> Iterator[bytes]:
    """A stream that ends (logged once, scrubbed) instead of raising into the server mid-response."""
    try:
        yield from stream
    except Exception:
        metrics.ERRORS.labels("internal").inc()
        log.exception("http.stream_failed")


# -- helpers -----------------------------------------------------------------------------------

def _accepts(request: Request) -> set[str]:
    """Which of JSON and SSE the client takes (a missing Accept, or */*, takes both)."""
    header = request.headers.get("Accept", "")
    if not header.strip():
        return {JSON, SSE}
    offered = {part.split(";")[0].strip().lower() for part in header.split(",")}
    if offered & {"*/*", "application/*"}:
        return {JSON, SSE} if "*/*" in offered else {JSON} | (offered & {SSE})
    return offered & {JSON, SSE} | ({SSE} if "text/*" in offered else set())


def _narrowing(request: Request) -> Policy | None:
    """A per-request narrowing of the tool set (``X-ColabHive-Tools: glob,glob``,
    ``X-ColabHive-Read-Only: true``, or the ``tools``/``read_only`` query parameters): it can hide
    tools, never show one the server's own policy hides."""
    tools = request.headers.get("X-ColabHive-Tools") or request.args.get("tools") or ""
    read_only = (request.headers.get("X-ColabHive-Read-Only") or request.args.get("read_only") or "").lower()
    globs = tuple(p.strip() for p in tools.split(",") if p.strip())
    if not globs and read_only not in ("1", "true", "yes", "on"):
        return None
    return Policy(allow=globs or ("*",), read_only=read_only in ("1", "true", "yes", "on"))


def _cancelled_request(message: Any) -> tuple[Any, str] | None:
    """The request id a ``notifications/cancelled`` names and the kind of its reason, if it is one."""
    if jsonrpc.method_of(message) == "notifications/cancelled":
        params = jsonrpc.params_of(message)
        if jsonrpc.is_valid_id(params.get("requestId")):
            return params["requestId"], reason_of(params.get("reason"))
    return None


def _is_modern(message: Any) -> bool:
    return jsonrpc.method_of(message) != "initialize" and META_VERSION in jsonrpc.meta_of(message)


def _wants_stream(message: dict[str, Any], accepts: set[str], log_level: str | None = None) -> bool:
    """SSE when the client takes only SSE, or when this request will send notifications."""
    method = jsonrpc.method_of(message)
    if JSON not in accepts or method == "subscriptions/listen":
        return True
    if SSE not in accepts or method != "tools/call":
        return False
    meta = jsonrpc.meta_of(message)
    return "progressToken" in meta or "io.modelcontextprotocol/logLevel" in meta or log_level is not None


def _header_mismatch(request: Request, message: dict[str, Any]) -> str | None:
    """Why the 2026 routing headers disagree with the body, or ``None``."""
    params, method = jsonrpc.params_of(message), jsonrpc.method_of(message)
    if request.headers.get("MCP-Protocol-Version") != jsonrpc.meta_of(message).get(META_VERSION):
        return "MCP-Protocol-Version header does not match params._meta protocolVersion"
    if method is None or request.headers.get("Mcp-Method") != method:
        return "Mcp-Method header does not match the request's method"
    name_key = NAME_PARAMS.get(method)
    if name_key and isinstance(params.get(name_key), str):
        if _decode_header(request.headers.get("Mcp-Name")) != params[name_key]:
            return f"Mcp-Name header does not match params.{name_key}"
    return None


def _decode_header(value: str | None) -> str | None:
    """Undo the ``=?base64?…?=`` wrapping clients use for values unsafe in a header."""
    if value and value.startswith("=?base64?") and value.endswith("?="):
        try:
            return base64.b64decode(value[9:-2], validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
    return value


def _failed(message: Any, **fields: Any) -> dict[str, Any] | None:
    """Log an unexpected exception once (scrubbed, with a request id) and give the JSON-RPC answer
    the message gets instead: ``-32603`` for a request, nothing for a notification."""
    metrics.ERRORS.labels("internal").inc()
    log.bind(request_id=secrets.token_hex(6), rpc_method=jsonrpc.method_of(message), **fields
             ).exception("http.internal_error")
    return jsonrpc.internal_error(message)


def _status(answer: Any, statuses: dict[int, int]) -> int:
    if isinstance(answer, dict) and "error" in answer:
        return statuses.get(answer["error"]["code"], 200)
    return 200


def _json(answer: Any, status: int) -> Response:
    return Response(jsonrpc.encode(answer), status, headers=INVALID_TOKEN if status == 401 else None, mimetype=JSON)


def _sse_event(message: Any, event_id: str | None = None) -> bytes:
    head = f"id: {event_id}\n".encode() if event_id else b""
    return head + b"event: message\ndata: " + jsonrpc.encode(message) + b"\n\n"


def _not_allowed(allow: str) -> Response:
    return Response(b"", 405, headers={"Allow": allow})


def _hostname(netloc: str) -> str:
    host = netloc.lower()
    if host.startswith("["):
        return host[: host.find("]") + 1]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _bind_host(bind: str) -> str:
    return bind.rpartition(":")[0].lower()


def _body(request: Request) -> bytes:
    """The whole body, or 413: for a body of unknown length (chunked), Werkzeug's ``get_data()``
    silently stops at ``max_content_length`` and returns what it read so far."""
    data = request.get_data(cache=False)
    limit = request.max_content_length
    if request.content_length is None and limit is not None and len(data) >= limit:
        raise RequestEntityTooLarge()
    return data


def _socket(request: Request) -> socket.socket | None:
    """The client's socket, where the server exposes it (gunicorn, Werkzeug)."""
    return request.environ.get("gunicorn.socket") or request.environ.get("werkzeug.socket")


def check_config(config: Config) -> None:
    """Refuse the unsafe combinations before serving anyone (and say why)."""
    if config.single_tenant and not config.api_key:
        raise ConfigError("single-tenant mode needs an API key (COLABHIVE_API_KEY)")
    if config.single_tenant and _bind_host(config.bind) not in LOOPBACK_HOSTS:
        raise ConfigError(f"single-tenant mode serves one key to every caller: bind it to loopback, not {config.bind}")
    if not config.single_tenant and config.api_key:
        log.bind(hint="hosted mode takes each request's own key; use --single-tenant for a local "
                      "single-key server").warning("http.api_key_ignored")


def create_app(config: Config | None = None) -> McpApp:
    """The WSGI app, configured from the environment (and ``$COLABHIVE_MCP_CONFIG``) by default."""
    if config is None:
        config = load().config
        configure(config.log_level, config.log_format, file=config.log_file)
    return McpApp(config)
