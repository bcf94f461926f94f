"""The MCP protocol core: both eras, over tenants; no transport in sight.

:meth:`Server.handle` takes one decoded JSON-RPC message with a small context (the tenant, the
legacy :class:`Session`, a ``notify`` callback, a cancel event) and returns the response (or
``None``). Transports parse bytes and write answers; they never re-implement any of this. The
method table is here; each method is served by a module of this package. Serving a request may
wait (a tool call polls, a confirmation asks the user): the thread that calls ``handle`` waits.

Eras: a request whose ``params._meta`` carries ``io.modelcontextprotocol/protocolVersion`` is
served statelessly under 2026-07-28; anything else (and every ``initialize``) follows the legacy
handshake of 2024-11-05 … 2025-11-25, scoped to the session.
"""

from __future__ import annotations

import random
from typing import Any, Callable, Mapping

from .. import metrics, profiles, tracing
from ..cancellation import SHUTDOWN, USER, Cancellation, Reason, reason_of
from ..config import Config
from ..errors import ColabHiveError
from ..keys import KeyRejected
from .. import logs
from ..logs import log
from ..policy import Policy
from ..state import InstanceStore
from ..memory_store import MemoryStore
from ..tenant import Tenant
from . import calling, jsonrpc, lifecycle, listing, tasks
from .context import Context
from ..revisions import BATCH_VERSIONS, revision
from .eras import (META_CAPABILITIES, META_CLIENT_INFO, META_LOG_LEVEL, META_SERVER_INFO, META_VERSION,
                   envelope_error)
from .jsonrpc import INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, JsonRpcError
from .plan import Plan, plan
from .request import Narrowing, Request, Session

Handler = Callable[[Context, Request], dict[str, Any]]
LEGACY_METHODS: dict[str, Handler] = {
    "logging/setLevel": lifecycle.set_level,
    "tools/list": lambda context, request: listing.tools_list(request, context.config),
    "tools/call": calling.tools_call,
    "tasks/get": tasks.get, "tasks/result": tasks.result, "tasks/cancel": tasks.cancel}
MODERN_METHODS: dict[str, Handler] = {
    "server/discover": lambda context, request: lifecycle.discover(request),
    "tools/list": LEGACY_METHODS["tools/list"], "tools/call": calling.tools_call,
    "subscriptions/listen": lambda context, request: lifecycle.listen(request),
    "tasks/get": tasks.get, "tasks/cancel": tasks.cancel, "tasks/update": tasks.update}
class Server:
    """The MCP method table over tenants; thread-safe, one instance per process."""

    def __init__(self, config: Config, list_changed: bool = False, store: InstanceStore | None = None) -> None:
        """``list_changed``: the transport tells sessions when the tool list changes (stdio does);
        ``store``: the instance's (what its processes must agree on), else this process's memory."""
        self.config = config
        self.context = Context(config, list_changed, store=store or MemoryStore())

    def on_session_change(self, hook: Callable[[Session], None]) -> None:
        """Let a transport keep what a legacy session set (its log level) where its other workers see it."""
        self.context.session_changed = hook

    def plan(self, message: Any, session: Session | None = None) -> Plan:
        """What a transport must know of ``message`` before serving it (see :mod:`.plan`)."""
        return plan(message, session, self.config.confirm_side_effects)

    # -- entry points -----------------------------------------------------------------------

    def handle(self, message: Any, *, tenant: Tenant | None, session: Session,
               notify: Callable[[dict[str, Any]], None] = lambda _m: None,
               cancelled: Cancellation | None = None, narrow: Narrowing | None = None,
               trace: Mapping[str, str] | None = None) -> dict[str, Any] | None:
        """Serve one decoded message; returns the response, or ``None`` when none is due.

        ``tenant`` may be ``None`` only for what needs none: notifications, answers to our requests
        and a legacy ``ping``. ``narrow`` is a request's own narrowing of the tool set (hosted mode):
        it can only hide tools.
        ``trace`` is the transport's W3C trace context (HTTP headers), for a request whose
        ``_meta`` carries none.
        """
        try:
            jsonrpc.check_envelope(message)
        except JsonRpcError as exc:
            if isinstance(message, dict) and "method" in message and "id" not in message:
                return None  # a malformed notification: there is nobody to answer
            return jsonrpc.error(jsonrpc.request_id(message), exc)
        if "method" not in message:
            self.context.inflight.answered(session.id, message)  # the client's answer to a request of ours
            return None
        if not jsonrpc.is_request(message):
            self._notification(message, session)
            return None
        cancelled = cancelled or Cancellation()
        key = (session.id, message["id"])
        self.context.inflight.track(key, cancelled)
        if self.context.stopping.is_set():  # it came as the server stops: ended before it starts
            cancelled.cancel(SHUTDOWN)
        if self.config.log_frames:
            notify = _logging_frames(notify)
            log.bind(direction="in", frame=_frame(message)).info("mcp.frame")
        carried = tracing.carried(jsonrpc.meta_of(message)) or tracing.carried(trace if trace is not None else {})
        fields = {"trace_id": tracing.trace_id(carried)} if carried else {}
        try:  # every record of this request carries its id, the key's hash and the caller's trace
            with logs.context(request_id=f"{random.getrandbits(48):012x}", tenant=tenant and tenant.key_id, **fields), \
                    tracing.span(*_span_of(message, session), carried) as span:
                response = self._respond(message, tenant, session, notify, cancelled, narrow)
                _settle(span, response)
        finally:
            self.context.inflight.untrack(key)
        answer = None if cancelled.is_set() and not cancelled.by_server else response  # a client's cancel: silence
        if self.config.log_frames and answer is not None:
            log.bind(direction="out", frame=_frame(answer)).info("mcp.frame")
        return answer

    def _respond(self, message: dict[str, Any], tenant: Tenant | None, session: Session,
                 notify: Callable[[dict[str, Any]], None], cancelled: Cancellation,
                 narrow: Narrowing | None) -> dict[str, Any]:
        """The response to a request: its result, or the JSON-RPC error it comes to."""
        try:
            return jsonrpc.result(message["id"], self._dispatch(
                message, tenant, session, notify, cancelled, narrow.policy() if narrow else None))
        except ColabHiveError as exc:  # what it means to the client, said once (errors.py)
            metrics.ERRORS.labels("key_rejected" if isinstance(exc, KeyRejected) else f"jsonrpc_{-exc.code}").inc()
            return jsonrpc.error(message["id"], jsonrpc.as_error(exc))
        except Exception:
            metrics.ERRORS.labels("internal").inc()
            log.bind(method=message["method"]).exception("mcp.internal_error")
            return jsonrpc.internal(message["id"])

    def handle_batch(self, messages: list[Any], session: Session, **context: Any) -> list[dict[str, Any]] | dict[str, Any] | None:
        """A JSON-RPC batch: only a 2025-03-26 session may send one."""
        if session.version is None or not revision(session.version).batches:
            return jsonrpc.error(None, JsonRpcError(INVALID_REQUEST, "Invalid Request: batches are only allowed "
                                                    f"under protocol {' and '.join(BATCH_VERSIONS)}"))
        if not messages:
            return jsonrpc.error(None, JsonRpcError(INVALID_REQUEST, "Invalid Request: empty batch"))
        if any(jsonrpc.method_of(m) == "initialize" for m in messages):
            return jsonrpc.error(None, JsonRpcError(
                INVALID_REQUEST, "Invalid Request: initialize must not be part of a batch"))
        answers = [self.handle(m, session=session, **context) for m in messages]
        return [a for a in answers if a is not None] or None

    def cancel(self, session: Session, request_id: Any, reason: Reason | None = USER) -> None:
        """Cancel an in-flight request, saying why (a cancellation that arrives first is remembered)."""
        self.context.inflight.cancel((session.id, request_id), reason)

    def running(self, session_id: str, request_id: Any) -> bool:
        """Whether the request runs in this process (a cancellation of it needs no relay)."""
        return self.context.inflight.running((session_id, request_id))

    def cancel_relayed(self, session_id: str, digest: str, reason: Reason | None) -> None:
        """:meth:`cancel`, relayed by another worker that names the request by its id's digest."""
        self.context.inflight.cancel_digest(session_id, digest, reason)

    def cancel_session(self, session: Session) -> None:
        """Cancel the requests in flight of one session (its connection is gone: no reason given)."""
        self.context.inflight.cancel_session(session.id)

    def cancel_all(self) -> None:
        """Cancel every in-flight request, and stop its work upstream (process shutdown)."""
        self.context.inflight.cancel_all()

    def drain(self) -> None:
        """Shutting down: cancel everything in flight, but answer each tool call (with an error)."""
        self.context.stopping.set()
        self.cancel_all()

    # -- plumbing ---------------------------------------------------------------------------

    def _notification(self, message: dict[str, Any], session: Session) -> None:
        method, params = message["method"], message.get("params") or {}
        if method == "notifications/cancelled" and jsonrpc.is_valid_id(params.get("requestId")):
            self.cancel(session, params["requestId"], reason_of(params.get("reason")))

    def _dispatch(self, message: dict[str, Any], tenant: Tenant | None, session: Session,
                  notify: Callable[[dict[str, Any]], None], cancelled: Cancellation,
                  narrow: Policy | None) -> dict[str, Any]:
        method, params = message["method"], message.get("params") or {}
        meta = jsonrpc.meta_of(message)
        if method == "ping" and META_VERSION not in meta:
            return {}
        assert tenant is not None, "a transport serves everything but notifications, answers and ping with a tenant"
        if method != "initialize" and META_VERSION in meta:
            request = self._modern_request(message["id"], method, params, meta, tenant, notify, cancelled)
            request.narrow, request.meta = narrow, meta
            handler = MODERN_METHODS.get(method)
            if handler is None:
                raise JsonRpcError(METHOD_NOT_FOUND, f"Method not found: {method}")
            result = handler(self.context, request)
            result["resultType"] = result.get("resultType", "complete")
            result.setdefault("_meta", {})[META_SERVER_INFO] = lifecycle.server_info(request.version)
            return result
        if method == "initialize":
            return lifecycle.initialize(params, session, self.config, self.context.list_changed)
        handler = LEGACY_METHODS.get(method)
        if handler is None:
            raise JsonRpcError(METHOD_NOT_FOUND, f"Method not found: {method}")
        if session.version is None:
            raise JsonRpcError(INVALID_PARAMS, "Session not initialized: send initialize first "
                                               "(or use protocol 2026-07-28 with per-request _meta)")
        request = Request(message["id"], method, params, session.version, False, tenant, notify, cancelled,
                          session.log_level, session, session.capabilities,
                          profiles.for_client(session.client_info, self.config), narrow, meta)
        return handler(self.context, request)

    def _modern_request(self, id_: Any, method: str, params: dict[str, Any], meta: dict[str, Any],
                        tenant: Tenant, notify: Callable[[dict[str, Any]], None],
                        cancelled: Cancellation) -> Request:
        """The 2026 request, once its per-request envelope holds."""
        error = envelope_error(meta)
        if error is not None:
            raise error
        return Request(id_, method, params, meta[META_VERSION], True, tenant, notify, cancelled,
                       meta.get(META_LOG_LEVEL), capabilities=meta[META_CAPABILITIES],
                       profile=profiles.for_client(meta.get(META_CLIENT_INFO), self.config))


def _span_of(message: dict[str, Any], session: Session) -> tuple[str, dict[str, Any]]:
    """A request's span name and attributes (OpenTelemetry's conventions for MCP)."""
    method, params, meta = message["method"], jsonrpc.params_of(message), jsonrpc.meta_of(message)
    tool = params.get("name") if method == "tools/call" and isinstance(params.get("name"), str) else None
    modern = meta.get(META_VERSION) if isinstance(meta.get(META_VERSION), str) else None
    attributes = {"mcp.method.name": method, "jsonrpc.request.id": str(message["id"]),
                  "mcp.protocol.version": modern or session.version,
                  "mcp.session.id": None if modern or session.version is None else session.id,
                  "gen_ai.tool.name": tool, "gen_ai.operation.name": "execute_tool" if tool else None}
    return (f"{method} {tool}" if tool else method), attributes


def _settle(span: tracing.Span, response: dict[str, Any]) -> None:
    """Mark a request's span failed when its answer is an error (or a tool's error result)."""
    if "error" in response:
        span.fail(str(response["error"].get("code")))
    elif isinstance(response.get("result"), dict) and response["result"].get("isError") is True:
        span.fail("tool_error")


def _logging_frames(notify: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def logged(message: dict[str, Any]) -> None:
        log.bind(direction="out", frame=_frame(message)).info("mcp.frame")
        notify(message)

    return logged


def _frame(message: Any, limit: int = 4000) -> str:
    """A JSON-RPC frame as logged (redacted by the log pipeline), cut at ``limit`` characters."""
    text = jsonrpc.encode(message).decode("utf-8", "replace")
    return text if len(text) <= limit else text[:limit] + "…"
