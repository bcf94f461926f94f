"""The Streamable HTTP endpoint ``/mcp``, both eras.

POST: a 2026-07-28 request is stateless (its routing headers checked against its body); any other
follows the legacy handshake, whose ``Mcp-Session-Id`` is a signed token any worker can verify.
Answers are JSON, or SSE when the request will send notifications first. GET is the legacy
notification stream or a resumption (where resumable streams are offered; an event it no longer
has gets the notification stream, not a 404 that would end the session); DELETE ends a session.
What a session's later requests must know (it ended; its log level) is in the instance store, so
any worker serving them knows it.
"""

from __future__ import annotations

import contextlib
import queue
import random
import socket
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from werkzeug.wrappers import Response

from ...cancellation import Cancellation
from ...config import Config
from ...keys import ApiKey
from ...errors import ColabHiveError
from ...logs import log
from ...protocol import LEGACY_VERSIONS, MODERN_VERSIONS, SUPPORTED_VERSIONS, Server, Session, jsonrpc
from ...protocol.eras import META_VERSION, envelope_error
from ...protocol.plan import Plan
from ...protocol.jsonrpc import JsonRpcError
from ...revisions import revision
from ...tenant import Tenant
from .admission import Admission
from .hangups import HangupWatch
from .incoming import HttpRequest
from .relay import CancelRelay
from .sessions import SessionCodec
from .sse import DISCONNECT_CHECK_S, Streams, stream
from .tenancy import Tenancy
from .wire import (JSON, MODERN_STATUS_BY_CODE, SSE, STATUS_BY_CODE, Answer, HttpError, accepts, body,
                   cancelled_request, client_address, failed, header_mismatch, json_response, narrowing, not_allowed,
                   socket_of, status_of)


@dataclass
class Caller:
    """Who sent a POST: the key, its tenant, and the hold on that tenant (released when the request
    is answered; an SSE answer takes the hold over with ``lease.pop_all()``). What a legacy session
    sends that needs no word from the gateway (see :func:`light`) comes with its ``session`` and
    no tenant."""

    key: ApiKey
    tenant: Tenant | None
    lease: contextlib.ExitStack
    session: Session | None = None


SESSIONS = "session"  # session id -> {"ended": true} or {"log_level": ...}
ENDED = {"ended": True}


class Streamable:
    def __init__(self, core: Server, config: Config, tenancy: Tenancy, admission: Admission, streams: Streams,
                 sessions: SessionCodec, relay: CancelRelay | None) -> None:
        self.core, self.config, self.tenancy, self.admission, self.streams = core, config, tenancy, admission, streams
        self.sessions, self.relay = sessions, relay
        self.hangups = HangupWatch(DISCONNECT_CHECK_S)
        self.store = tenancy.instance.store

    # -- POST -----------------------------------------------------------------------------------

    def post(self, request: HttpRequest) -> Answer:
        wanted = accepts(request)
        if not wanted:
            raise HttpError(406, jsonrpc.INVALID_REQUEST, f"Accept must allow {JSON} or {SSE}")
        if request.mimetype != JSON:
            raise HttpError(415, jsonrpc.INVALID_REQUEST, f"Content-Type must be {JSON}")
        key, address = self.tenancy.key(request), client_address(request)
        try:
            message: Any = jsonrpc.decode(body(request))
        except JsonRpcError as exc:
            message = exc
        plan = self.core.plan(message)
        with contextlib.ExitStack() as lease:  # the key is checked first: a rejected one is a 401 here
            session = self._session_of(request, key) if plan.light else None
            if session is None:
                caller = Caller(key, lease.enter_context(self.tenancy.tenant(key, address)), lease)
            else:  # a session of a key the gateway accepted: no need to ask it again (it may hang)
                self.tenancy.not_refused(key)
                caller = Caller(key, None, lease, session)
            if isinstance(message, JsonRpcError):
                return json_response(jsonrpc.error(None, message), 400)
            if plan.long:  # a place for as long as the answer takes (an SSE answer takes the lease along)
                self.admission.admit(lease, key, held=plan.held)
            try:
                if plan.modern:
                    return self._modern(request, message, plan, caller, wanted)
                return self._legacy(request, message, plan, caller, wanted)
            except ColabHiveError:  # answered at the edge
                raise
            except Exception:  # answered as the core answers its own surprises: -32603 with the request's id
                answer = failed(message)
                return Response(status=202) if answer is None else json_response(answer, 200)

    def _modern(self, request: HttpRequest, message: dict[str, Any], plan: Plan, caller: Caller,
                wanted: set[str]) -> Answer:
        """2026-07-28: stateless, with the routing headers checked against the body."""
        mismatch = header_mismatch(request, message)
        error = JsonRpcError(jsonrpc.HEADER_MISMATCH, mismatch) if mismatch else envelope_error(jsonrpc.meta_of(message))
        if error is not None:
            return json_response(jsonrpc.error(jsonrpc.request_id(message), error), 400)
        if not plan.request:
            return Response(status=202)
        if plan.listens and SSE not in wanted:
            raise HttpError(406, jsonrpc.INVALID_REQUEST, f"subscriptions/listen answers with {SSE}: Accept it")
        session = Session(id=f"modern:{random.getrandbits(64):016x}", transport="streamable-http")  # this process's own
        return self._answer(message, plan, caller, session, request, MODERN_STATUS_BY_CODE,
                            stream=_streamed(plan, wanted), takes_json=JSON in wanted)

    def _legacy(self, request: HttpRequest, message: Any, plan: Plan, caller: Caller, wanted: set[str]) -> Answer:
        if plan.opens:
            session = self.sessions.new_session()
            response = self._answer(message, plan, caller, session, request, STATUS_BY_CODE, stream=JSON not in wanted)
            if session.version is not None:
                response.headers["Mcp-Session-Id"] = self.sessions.issue(session, caller.key)
                log.bind(session=session.id, tenant=caller.key.log_id, transport="streamable-http"
                         ).info("http.session.issued")
            return response
        _check_legacy_version(request.headers.get("MCP-Protocol-Version"))
        session = caller.session or self.restore(request, caller.key)
        if isinstance(message, list):
            answer = self.core.handle_batch(message, session=session, tenant=caller.tenant, narrow=narrowing(request),
                                            trace=request.headers)
            return Response(status=202) if answer is None else json_response(answer, 200)
        if not plan.request:
            answer = self.core.handle(message, tenant=caller.tenant, session=session)
            cancelled = cancelled_request(message)
            if self.relay is not None and cancelled is not None:
                self.relay.publish(session.id, *cancelled)  # the call may run in another worker
            return Response(status=202) if answer is None else json_response(answer, status_of(answer, STATUS_BY_CODE))
        plan = plan.within(session, self.config.confirm_side_effects)  # its session's log level, capabilities
        resumable = self.streams.events is not None and session.version is not None and revision(
            session.version).resumable
        stream = _streamed(plan, wanted) or (SSE in wanted and plan.calls and (resumable or plan.asks))
        return self._answer(message, plan, caller, session, request, STATUS_BY_CODE, stream=stream,
                            resumable=resumable, takes_json=JSON in wanted)

    def remember(self, session: Session) -> None:
        """The core's hook: what a session's later requests must know, for any worker (its log level)."""
        if session.log_level and session.transport == "streamable-http":
            self.store.put(SESSIONS, session.id, {"log_level": session.log_level}, self.config.session_max_age)

    def _answer(self, message: dict[str, Any], plan: Plan, caller: Caller, session: Session, http_request: HttpRequest,
                statuses: dict[int, int], *, stream: bool, resumable: bool = False, takes_json: bool = False) -> Answer:
        """Serve one request as a JSON body, or as an SSE stream when it will send notifications (a
        stream refused at once is a JSON body too, for a client that ``takes_json``)."""
        narrow = narrowing(http_request)
        held = caller.lease.pop_all()  # the tenant stays held until the answer is complete, on whichever thread

        def run(notify: Callable[[dict[str, Any]], None], cancelled: Cancellation) -> Any:
            with held:
                try:
                    return self.core.handle(message, tenant=caller.tenant, session=session, notify=notify,
                                            cancelled=cancelled, narrow=narrow, trace=http_request.headers)
                except Exception:
                    return failed(message)

        def plain(answer: Any) -> Answer:
            if answer is None:
                return Response(status=204)  # cancelled: the client is gone or asked us to stop
            return json_response(answer, status_of(answer, statuses))

        if stream:
            max_age = self.config.stream_max_age if plan.listens else None
            return self.streams.answer(run, session if resumable else None, max_age=max_age,
                                       plain=plain if takes_json else None)
        sock = socket_of(http_request.environ) if plan.calls else None
        with self.hangups.watching(sock) as hung_up:
            return plain(run(lambda _n: None, hung_up))

    # -- sessions, GET, DELETE ------------------------------------------------------------------

    def _session_of(self, request: HttpRequest, key: ApiKey) -> Session | None:
        """The request's legacy session, when it names a live one of this key; else ``None``."""
        try:
            return self.restore(request, key) if "Mcp-Session-Id" in request.headers else None
        except HttpError:
            return None

    def restore(self, request: HttpRequest, key: ApiKey) -> Session:
        token = request.headers.get("Mcp-Session-Id")
        if not token:
            raise HttpError(400, jsonrpc.INVALID_REQUEST, "Missing Mcp-Session-Id: send initialize first")
        session = self.sessions.restore(token, key)
        known = (self.store.get(SESSIONS, session.id, failed=ENDED) if session is not None else None) or {}
        if session is None or known.get("ended"):
            raise HttpError(404, jsonrpc.INVALID_REQUEST, "Unknown or expired session: initialize again")
        session.log_level = known.get("log_level")
        return session

    def get(self, request: HttpRequest) -> Answer:
        """The legacy GET stream: a resumption (``Last-Event-ID``) or the notification stream."""
        if "Mcp-Session-Id" not in request.headers or self.streams.events is None:
            return not_allowed("POST" if self.streams.events is None else "POST, DELETE")
        if SSE not in accepts(request):
            raise HttpError(406, jsonrpc.INVALID_REQUEST, f"Accept must allow {SSE}")
        key = self.tenancy.key(request)
        session = self.restore(request, key)
        last_event_id = request.headers.get("Last-Event-ID")
        if last_event_id:
            with contextlib.ExitStack() as opening:
                self.admission.admit(opening, key, held=False)  # the rest of an answer, as long as it takes
                lease = opening.pop_all()
            resumed = self.streams.resume(last_event_id, session, lease)  # the stream lets the place go
            if resumed is not None:
                return resumed
            lease.close()  # replaying is a MAY, and a 404 would end the session: the plain stream instead
            log.bind(session=session.id).info("http.resume.unknown_event")
        return self._changes(key, client_address(request))

    def _changes(self, key: ApiKey, address: str) -> Answer:
        """The stream that tells a session its tool list changed (for a key the gateway accepts)."""
        outbox: queue.Queue = queue.Queue()
        stop = threading.Event()
        with contextlib.ExitStack() as opening:
            tenant = opening.enter_context(self.tenancy.tenant(key, address))
            self.admission.admit(opening, key, held=True)
            lease = opening.pop_all()  # held by the watch thread from here on

        def watch() -> None:
            with lease:
                tenant.watch(stop, lambda: outbox.put(jsonrpc.notification("notifications/tools/list_changed")))

        def generate(sock: socket.socket | None) -> Iterator[bytes]:
            try:
                yield from self.streams.outbox(outbox, sock, stop)
            finally:
                stop.set()

        threading.Thread(target=watch, name="mcp-get-stream", daemon=True).start()
        return stream(generate)

    def delete(self, request: HttpRequest) -> Answer:
        if "Mcp-Session-Id" not in request.headers:
            return not_allowed("POST")
        session = self.restore(request, self.tenancy.key(request))
        if not self.store.put(SESSIONS, session.id, ENDED, self.config.session_max_age):
            raise HttpError(503, jsonrpc.INTERNAL_ERROR, "The session could not be ended just now; try again",
                            {"Retry-After": "5"})
        return Response(status=204)


def _check_legacy_version(version: str | None) -> None:
    """Refuse a request whose ``MCP-Protocol-Version`` header is not a handshake revision: a 2026 one
    whose body lacks its ``_meta`` (-32020, so a dual-era client does not take this server for a
    legacy one), or one not served at all (-32022)."""
    if version is None or version in LEGACY_VERSIONS:
        return
    if version in MODERN_VERSIONS:
        raise HttpError(400, jsonrpc.HEADER_MISMATCH, f"MCP-Protocol-Version is {version} but params._meta has no "
                        f"{META_VERSION!r}: a {version} request carries its version and the client's capabilities "
                        "in params._meta")
    raise HttpError(400, jsonrpc.UNSUPPORTED_PROTOCOL_VERSION, f"Unsupported protocol version: {version}",
                    data={"supported": list(SUPPORTED_VERSIONS), "requested": version})


def _streamed(plan: Plan, wanted: set[str]) -> bool:
    """SSE when the client takes only SSE, for a listen, or when notifications come before the answer."""
    return JSON not in wanted or plan.listens or (SSE in wanted and plan.notifies)
