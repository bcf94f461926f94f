"""The operator's endpoints: ``/healthz`` (the process answers), ``/readyz`` (the gateway answers),
``/metrics`` (Prometheus) and ``POST /refresh`` (revalidate the calling key's tool list now); and
the server card hosts and registries discover the server by (``/.well-known/mcp/server-card``)."""

from __future__ import annotations

import hmac
import threading
import time

from werkzeug.wrappers import Response

from ... import metrics
from ...gateway.client import reachable
from ...loopback import is_loopback
from ...protocol import jsonrpc
from ...protocol.lifecycle import server_card
from ...settings.config import Config
from ...tenants.refusals import Unreachable
from .incoming import HttpRequest, bind_host, client_address
from .outgoing import JSON, Answer, HttpError, JsonAnswer, json_response
from .tenancy import Tenancy

SERVER_CARD_PATH = "/.well-known/mcp/server-card"  # SEP-2127
READINESS_TTL_S = 5.0
READINESS_TIMEOUT_S = 2.0


class Operations:
    def __init__(self, config: Config, tenancy: Tenancy) -> None:
        self.config = config
        self.tenancy = tenancy
        self._readiness = (float("-inf"), False)  # (checked at, gateway reachable)
        self._asking = threading.Lock()  # held by the one request asking the gateway

    @staticmethod
    def health() -> Answer:
        return Response(b'{"status":"ok"}', mimetype=JSON)

    def ready(self) -> Answer:
        """Ready when the gateway answers at all (a 401 to a keyless request is an answer); asked at
        most every few seconds, by one request at a time (the others meanwhile answer what it said
        last: a gateway that does not answer holds one thread, not every probe's)."""
        if time.monotonic() - self._readiness[0] > READINESS_TTL_S and self._asking.acquire(blocking=False):
            try:
                self._readiness = (time.monotonic(), reachable(self.config.api_url, READINESS_TIMEOUT_S))
            finally:
                self._asking.release()
        ready = self._readiness[1]
        return json_response({"status": "ready" if ready else "unavailable"}, 200 if ready else 503)

    def server_card(self, request: HttpRequest) -> Answer:
        """The MCP Server Card: the same for everyone (no key needed, nothing of a tenant's in it), for
        any origin, cacheable for an hour. Its address is ``public_url``, else the one this request used."""
        scheme = request.environ.get("wsgi.url_scheme", "http")  # (behind the shipped nginx: its X-Forwarded-Proto)
        url = self.config.public_url or f"{scheme}://{request.host}/mcp"
        return JsonAnswer(jsonrpc.encode(server_card(url, self.config.oauth_on)), 200,
                          {"Access-Control-Allow-Origin": "*", "Cache-Control": "public, max-age=3600"})

    def metrics(self, request: HttpRequest) -> Answer:
        """The metrics, with the metrics token when one is set; on an address others can reach, only then.
        Without a token, tenants' tools are labelled by a digest of their slugs (see :mod:`colabhive_mcp.metrics`)."""
        token = self.config.metrics_token
        if not token and not is_loopback(bind_host(self.config.bind)):
            return Response(b"metrics need metrics_token on an address other machines can reach\n", 403)
        given = request.headers.get("Authorization", "").encode("utf-8", "surrogateescape")
        if token and not hmac.compare_digest(given, f"Bearer {token}".encode()):
            return Response(b"metrics need the metrics token\n", 401, headers={"WWW-Authenticate": "Bearer"})
        body, content_type = metrics.render()
        return Response(body, content_type=content_type)

    def refresh(self, request: HttpRequest) -> Answer:
        """Revalidate the calling key's manifest now (in this worker), e.g. after publishing an action."""
        with self.tenancy.tenant(self.tenancy.key(request), client_address(request)) as tenant:
            try:
                manifest = tenant.revalidate()
            except Unreachable as exc:
                raise HttpError(502, jsonrpc.INTERNAL_ERROR, f"Cannot load the tool manifest: {exc}") from None
        return json_response({"etag": manifest.etag, "actions": len(manifest.entries)}, 200)
