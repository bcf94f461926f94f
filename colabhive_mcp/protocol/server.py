"""The MCP protocol core: both eras, over tenants; no transport in sight.

:meth:`Server.handle` takes one parsed frame (:mod:`.jsonrpc`) with a small context (the tenant, the
legacy :class:`Session`, a ``notify`` callback, a cancel event) and returns the response (or
``None``). Transports parse bytes and write answers; they never re-implement any of this. The
methods are the rows of :mod:`.methods`; their handlers are here, each served by a module of this
package. Serving a request may
wait (a tool call polls, a confirmation asks the user): the thread that calls ``handle`` waits.

Eras: a request whose ``params._meta`` carries ``io.modelcontextprotocol/protocolVersion`` is
served statelessly under 2026-07-28; anything else (and every ``initialize``) follows the legacy
handshake of 2024-11-05 … 2025-11-25, scoped to the session.
"""

from __future__ import annotations

import random
from typing import Any, Callable, Mapping

from .. import logs, metrics, tracing
from ..calls.cancellation import SHUTDOWN, USER, Cancellation, Reason
from ..catalog import profiles
from ..catalog.policy import Policy
from ..errors import ColabHiveError
from ..keys import KeyRejected
from ..logs import log
from ..revisions import BATCH_VERSIONS, revision
from ..settings.config import Config
from ..store.interface import InstanceStore
from ..store.memory import MemoryStore
from ..tenants.tenant import Tenant
from . import calling, jsonrpc, lifecycle, listing, methods, tasks
from .context import Context
from .envelope import META_SERVER_INFO
from .jsonrpc import INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, JsonRpcError
from .plan import Plan, cancelled_by, plan
from .request import Narrowing, Request, Session

Handler = Callable[[Context, Request], dict[str, Any]]
# the handler of each method of the table (:mod:`.methods`), in whichever era its row serves it; the
# handshake (``initialize``) and a legacy ``ping`` are answered before a request is made
HANDLERS: dict[str, Handler] = {
    "logging/setLevel": lifecycle.set_level,
    "server/discover": lambda context, request: lifecycle.discover(request),
    "tools/list": lambda context, request: listing.tools_list(request, context.config),
    methods.CALL: calling.tools_call,
    "tasks/get": tasks.get, "tasks/result": tasks.result, "tasks/cancel": tasks.cancel, "tasks/update": tasks.update,
    methods.LISTEN: lambda context, request: lifecycle.listen(request)}


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

    def plan(self, frame: jsonrpc.Frame, session: Session | None = None) -> Plan:
        """What a transport must know of ``frame`` before serving it, within its legacy ``session`` if
        it has one (see :mod:`.plan`)."""
        return plan(frame, session, self.context.confirms)

    # -- entry points -----------------------------------------------------------------------

    def handle(self, frame: jsonrpc.Single, *, tenant: Tenant | None, session: Session,
               notify: Callable[[dict[str, Any]], None] = lambda _m: None,
               cancelled: Cancellation | None = None, narrow: Narrowing | None = None,
               trace: Mapping[str, str] | None = None) -> dict[str, Any] | None:
        """Serve one frame (not a batch: :meth:`handle_batch`); returns the response, or ``None``
        when none is due.

        ``tenant`` may be ``None`` only for what needs none: notifications, answers to our requests,
        invalid frames and a legacy ``ping``. ``narrow`` is a request's own narrowing of the tool set
        (hosted mode): it can only hide tools. ``trace`` is the transport's W3C trace context (HTTP
        headers), for a request whose ``_meta`` carries none.
        """
        if isinstance(frame, jsonrpc.InvalidFrame):
            return jsonrpc.error(frame.id, frame.error) if frame.answered else None
        if isinstance(frame, jsonrpc.ResponseFrame):
            self.context.inflight.answered(session.id, frame)  # the client's answer to a request of ours
            return None
        if isinstance(frame, jsonrpc.NotificationFrame):
            self._notification(frame, session)
            return None
        cancelled = cancelled or Cancellation()
        key = (session.id, frame.id)
        self.context.inflight.track(key, cancelled)
        if self.context.stopping.is_set():  # it came as the server stops: ended before it starts
            cancelled.cancel(SHUTDOWN)
        if self.config.log_frames:
            notify = _logging_frames(notify)
            log.bind(direction="in", frame=_frame(frame.raw)).info("mcp.frame")
        carried = tracing.carried(frame.meta) or tracing.carried(trace if trace is not None else {})
        fields = {"trace_id": tracing.trace_id(carried)} if carried else {}
        try:  # every record of this request carries its id, the key's hash and the caller's trace
            with (logs.context(request_id=f"{random.getrandbits(48):012x}", tenant=tenant and tenant.key_id, **fields),
                  tracing.span(*_span_of(frame, session), carried) as span):
                response = self._respond(frame, tenant, session, notify, cancelled, narrow)
                _settle(span, response)
        finally:
            self.context.inflight.untrack(key, cancelled)
        answer = None if cancelled.is_set() and not cancelled.by_server else response  # a client's cancel: silence
        if self.config.log_frames and answer is not None:
            log.bind(direction="out", frame=_frame(answer)).info("mcp.frame")
        return answer

    def _respond(self, frame: jsonrpc.RequestFrame, tenant: Tenant | None, session: Session,
                 notify: Callable[[dict[str, Any]], None], cancelled: Cancellation,
                 narrow: Narrowing | None) -> dict[str, Any]:
        """The response to a request: its result, or the JSON-RPC error it comes to."""
        try:
            policy = narrow.policy(self.config.billable_tools) if narrow else None
            return jsonrpc.result(frame.id, self._dispatch(frame, tenant, session, notify, cancelled, policy))
        except ColabHiveError as exc:  # what it means to the client, said once (errors.py)
            metrics.ERRORS.labels("key_rejected" if isinstance(exc, KeyRejected) else f"jsonrpc_{-exc.code}").inc()
            return jsonrpc.error(frame.id, jsonrpc.as_error(exc))
        except Exception:
            metrics.ERRORS.labels("internal").inc()
            log.bind(method=frame.method).exception("mcp.internal_error")
            return jsonrpc.internal(frame.id)

    def handle_batch(self, batch: jsonrpc.BatchFrame, session: Session,
                     **context: Any) -> list[dict[str, Any]] | dict[str, Any] | None:
        """A JSON-RPC batch: only a 2025-03-26 session may send one."""
        if session.version is None or not revision(session.version).batches:
            return jsonrpc.error(None, JsonRpcError(INVALID_REQUEST, "Invalid Request: batches are only allowed "
                                                    f"under protocol {' and '.join(BATCH_VERSIONS)}"))
        if not batch.frames:
            return jsonrpc.error(None, JsonRpcError(INVALID_REQUEST, "Invalid Request: empty batch"))
        if any(methods.of(member.method or "").opens for member in batch.frames):
            return jsonrpc.error(None, JsonRpcError(
                INVALID_REQUEST, "Invalid Request: initialize must not be part of a batch"))
        answers = [self.handle(member, session=session, **context) for member in batch.frames]
        return [a for a in answers if a is not None] or None

    def serve(self, frame: jsonrpc.Frame, **context: Any) -> list[dict[str, Any]] | dict[str, Any] | None:
        """:meth:`handle` or :meth:`handle_batch`, as ``frame`` is one message or a batch."""
        if isinstance(frame, jsonrpc.BatchFrame):
            return self.handle_batch(frame, **context)
        return self.handle(frame, **context)

    def cancel(self, session: Session, request_id: jsonrpc.RequestId, reason: Reason | None = USER) -> None:
        """Cancel an in-flight request, saying why (a cancellation that arrives first is remembered)."""
        self.context.inflight.cancel((session.id, request_id), reason)

    def running(self, session_id: str, request_id: jsonrpc.RequestId) -> bool:
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

    def close(self) -> None:
        """A shutdown begins: calls in flight may still finish, but one that would hand its host a
        continuation (naming this server) is cancelled and answered with an error instead."""
        self.context.closing.set()

    def drain(self) -> None:
        """Shutting down: cancel everything in flight, but answer each tool call (with an error)."""
        self.context.stopping.set()
        self.cancel_all()

    # -- plumbing ---------------------------------------------------------------------------

    def _notification(self, frame: jsonrpc.NotificationFrame, session: Session) -> None:
        cancels = cancelled_by(frame)
        if cancels is not None:
            self.cancel(session, *cancels)

    def _dispatch(self, frame: jsonrpc.RequestFrame, tenant: Tenant | None, session: Session,
                  notify: Callable[[dict[str, Any]], None], cancelled: Cancellation,
                  narrow: Policy | None) -> dict[str, Any]:
        row = methods.of(frame.method)
        if row.light and not frame.modern:
            return {}
        assert tenant is not None, "a transport serves everything but notifications, answers and ping with a tenant"
        envelope = frame.envelope
        if envelope is not None:
            if envelope.refusal is not None:
                raise envelope.refusal
            return self._modern(Request(frame, envelope.version, tenant, notify, cancelled,
                                        capabilities=envelope.capabilities, narrow=narrow,
                                        profile=profiles.for_client(envelope.client_info, self.config),
                                        log_level=envelope.log_level))
        if row.opens:
            answer = lifecycle.initialize(frame.params, session, self.config, self.context.list_changed)
            tenant.list_ahead(profiles.for_client(session.client_info, self.config), answer["protocolVersion"])
            return answer
        if not row.legacy:
            raise JsonRpcError(METHOD_NOT_FOUND, f"Method not found: {frame.method}")
        if session.version is None:
            raise JsonRpcError(INVALID_PARAMS, "Session not initialized: send initialize first "
                                               "(or use protocol 2026-07-28 with per-request _meta)")
        return HANDLERS[row.name](self.context, Request(
            frame, session.version, tenant, notify, cancelled, capabilities=session.capabilities, narrow=narrow,
            profile=profiles.for_client(session.client_info, self.config), log_level=session.log_level,
            session=session))

    def _modern(self, request: Request) -> dict[str, Any]:
        """A 2026 request: its method's result, said to be complete unless it says otherwise, with our serverInfo."""
        if not methods.of(request.method).modern:
            raise JsonRpcError(METHOD_NOT_FOUND, f"Method not found: {request.method}")
        result = HANDLERS[request.method](self.context, request)
        result["resultType"] = result.get("resultType", "complete")
        result.setdefault("_meta", {})[META_SERVER_INFO] = lifecycle.server_info(request.version)
        return result


def _span_of(frame: jsonrpc.RequestFrame, session: Session) -> tuple[str, dict[str, Any]]:
    """A request's span name and attributes (OpenTelemetry's conventions for MCP)."""
    tool = frame.name if frame.method == methods.CALL else None
    version = frame.envelope.version if frame.envelope is not None else session.version
    attributes = {"mcp.method.name": frame.method, "jsonrpc.request.id": str(frame.id),
                  "mcp.protocol.version": version if isinstance(version, str) else None,
                  "mcp.session.id": None if frame.modern or session.version is None else session.id,
                  "gen_ai.tool.name": tool, "gen_ai.operation.name": "execute_tool" if tool else None}
    return (f"{frame.method} {tool}" if tool else frame.method), attributes


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
