"""The sandbox Builder Gateway as a Werkzeug WSGI application (routes of the gateway contract)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from werkzeug.exceptions import HTTPException, MethodNotAllowed
from werkzeug.routing import Map, Rule
from werkzeug.wrappers import Request, Response

from . import admin
from .actions import Action
from .contract import API_PREFIX, fingerprint
from .faults import DropConnection, Fault, drop_connection
from .invocations import TERMINAL, Invocation
from .registry import CursorError
from .responses import error_response, json_response
from .state import SandboxState, Settings
from .validation import problem

INVOKE_BODY = {
    "type": "object",
    "properties": {
        "input": {"type": "object"},
        "sync": {"type": "boolean"},
        "sync_timeout_s": {"type": "integer", "minimum": 1, "maximum": 300},
    },
}

_GATEWAY_RULES = [
    Rule(API_PREFIX + path, endpoint=route, methods=[method])
    for path, route, method in (
        ("/mcp/manifest", "manifest", "GET"),
        ("/mcp/manifest/<path:slug>", "manifest_entry", "GET"),  # slugs may contain "/" (sent as %2F)
        ("/actions/<path:slug>:invoke", "invoke", "POST"),
        ("/internal/mcp/actions/<path:slug>:invoke", "invoke", "POST"),
        ("/invocations/<inv_id>", "poll", "GET"),
        ("/invocations/<inv_id>:cancel", "cancel", "POST"),
    )
]
URL_MAP = Map(_GATEWAY_RULES + admin.ADMIN_RULES, strict_slashes=False, merge_slashes=False)  # shared, read-only


@dataclass
class _Call:
    """One gateway request and what the journal says about it."""

    route: str
    request: Request
    key: str  # "" when the request has none
    slug: str | None
    invocation_id: str | None


class SandboxApp:
    """The WSGI application; ``state`` holds everything, ``faults`` is ``state.faults``."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.state = SandboxState(settings)
        self.faults = self.state.faults
        self._routes: dict[str, Callable[..., Response]] = {  # (call, **URL values) -> response
            "manifest": self._manifest,
            "manifest_entry": self._manifest_entry,
            "invoke": self._invoke,
            "poll": self._poll,
            "cancel": self._cancel,
        }

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        request = Request(environ)
        try:
            endpoint, values = URL_MAP.bind_to_environ(environ).match()
        except HTTPException as exc:
            allow = {"Allow": ", ".join(exc.valid_methods or ())} if isinstance(exc, MethodNotAllowed) else None
            response = error_response(request, exc.code or 500, exc.name, allow)
        else:
            if endpoint.startswith("admin."):
                response = admin.handle(self.state, request, endpoint, values)
            else:
                response = self._gateway(request, endpoint, values)
        return response(environ, start_response)

    # --- the pipeline every gateway request goes through -----------------------------------------

    def _gateway(self, request: Request, route: str, values: Mapping[str, str]) -> Response:
        """Faults, authentication, the route itself, and a journal record (status 0: no answer)."""
        key = request.headers.get("X-API-Key", "")
        request.get_data()  # the whole body, read before any answer (a fault answers without looking at it):
        # Werkzeug's server drains an unread body after answering, and blocks there while the client,
        # still reading an answer cut short, keeps the connection open
        call = _Call(route, request, key, values.get("slug"), values.get("inv_id"))
        if call.invocation_id and key:
            invocation = self.state.invocations.get(key, call.invocation_id)
            call.slug = invocation.slug if invocation else None
        started = time.time()
        fault = self.state.faults.take(route, call.slug)
        response: Response | None
        try:
            response = self._serve(call, fault, values)
        except DropConnection:
            response = None
        self.state.journal.record({  # before anything reaches the client
            "t": started,
            "method": request.method,
            "route": route,
            "path": request.path,
            "slug": call.slug,
            "invocation_id": call.invocation_id,
            "key": fingerprint(key) if key else None,
            "status": response.status_code if response else 0,
            "idempotency_key": request.headers.get("Idempotency-Key"),
            "if_none_match": request.headers.get("If-None-Match"),
            "traceparent": request.headers.get("traceparent"),
            "tracestate": request.headers.get("tracestate"),
            "cursor": request.args.get("cursor"),
            "fault": fault.kind if fault else None,
        })
        if response is None:
            drop_connection(request.environ)
        return response

    def _serve(self, call: _Call, fault: Fault | None, values: Mapping[str, str]) -> Response:
        stopping = self.state.stopping
        if fault is not None and not fault.after:
            injected = fault.strike(stopping)
            if injected is not None:
                return injected
        if not call.key:
            return error_response(call.request, 401, "no API key: send it in the X-API-Key header")
        if call.key not in self.state.keys:
            # naming no header: colabhive-mcp passes this on to clients that sent a bearer token
            return error_response(call.request, 401, "unknown API key")
        response = self._routes[call.route](call, **values)
        if fault is not None and fault.after:
            return fault.strike(stopping) or response
        return response

    # --- routes ---------------------------------------------------------------------------------

    def _manifest(self, call: _Call) -> Response:
        request = call.request
        manifest = self.state.registry.manifest(call.key)
        cursor = request.args.get("cursor")
        if not cursor and request.if_none_match.contains_weak(manifest.version):
            return Response(status=304, headers={"ETag": manifest.etag})
        try:
            tools, next_cursor = manifest.page(cursor, self.settings.page_size)
        except CursorError as exc:
            return error_response(request, 400, str(exc))
        body = {"tools": tools, "nextCursor": next_cursor, "etag": manifest.etag}
        return json_response(request, body, headers={"ETag": manifest.etag})

    def _manifest_entry(self, call: _Call, slug: str) -> Response:
        action = self.state.registry.get(call.key, slug)
        return json_response(call.request, action.entry) if action else self._no_action(call, slug)

    def _invoke(self, call: _Call, slug: str) -> Response:
        request = call.request
        action = self.state.registry.get(call.key, slug)
        if action is None:
            return self._no_action(call, slug)
        try:
            body = json.loads(request.get_data() or b"{}")
        except ValueError:
            return error_response(request, 400, "the request body is not valid JSON")
        detail = problem(INVOKE_BODY, body, "body") or problem(
            action.entry.get("inputSchema", {}), body.get("input", {}), "input"
        )
        if detail:
            return error_response(request, 422, detail)
        args = action.with_defaults(body.get("input", {}))
        invocation, _ = self.state.invocations.create(
            call.key, request.headers.get("Idempotency-Key"), lambda: self._start(action, call.key, args)
        )
        call.invocation_id = invocation.id
        if body.get("sync"):
            self._hold(invocation, body.get("sync_timeout_s", self.settings.sync_timeout_s))
        return self._show(request, invocation, pending_status=202)

    def _poll(self, call: _Call, inv_id: str) -> Response:
        invocation = self.state.invocations.get(call.key, inv_id)
        return self._show(call.request, invocation) if invocation else self._no_invocation(call, inv_id)

    def _cancel(self, call: _Call, inv_id: str) -> Response:
        invocation = self.state.invocations.cancel(call.key, inv_id, time.time())
        return self._show(call.request, invocation) if invocation else self._no_invocation(call, inv_id)

    # --- helpers --------------------------------------------------------------------------------

    def _start(self, action: Action, key: str, args: dict[str, Any]) -> Invocation:
        now = time.time()
        if action.cold_start:
            timing = self.state.cold_starts.timing(key, action.slug, now)
        else:
            timing = action.timing_for(args)
        return Invocation.start(action, key, args, timing, now)

    def _hold(self, invocation: Invocation, timeout_s: float) -> None:
        """Wait (polling the store) until the invocation is terminal or ``timeout_s`` has passed."""
        deadline = time.monotonic() + timeout_s
        while not invocation.is_terminal(time.time()) and time.monotonic() < deadline:
            if self.state.stopping.wait(self.settings.sync_poll_s):
                return

    def _show(self, request: Request, invocation: Invocation, pending_status: int = 200) -> Response:
        """The invocation as it stands; unfinished ones get ``pending_status`` and Retry-After."""
        view = invocation.view(time.time())
        if view["status"] in TERMINAL:
            return json_response(request, view)
        retry_after = str(max(1, round(self.settings.poll_after_s)))
        return json_response(request, view, pending_status, {"Retry-After": retry_after})

    @staticmethod
    def _no_action(call: _Call, slug: str) -> Response:
        return error_response(call.request, 404, f"no action named {slug!r}")

    @staticmethod
    def _no_invocation(call: _Call, inv_id: str) -> Response:
        return error_response(call.request, 404, f"no invocation {inv_id!r}")


def create_app(**options: Any) -> SandboxApp:
    """The sandbox gateway as a WSGI app; ``options`` are ``Settings`` fields."""
    return SandboxApp(Settings(**options))
