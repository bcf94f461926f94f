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

import queue
import random
import socket
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterator, NamedTuple

from werkzeug.wrappers import Response

from ...calls.cancellation import Cancellation
from ...errors import ColabHiveError
from ...keys import ApiKey
from ...logs import log
from ...protocol import MODERN_VERSIONS, Session, envelope, jsonrpc
from ...protocol.jsonrpc import BatchFrame, Frame, Single
from ...protocol.plan import Plan
from ...protocol.server import Server
from ...settings.config import Config
from ...tenants.tenant import Tenant
from .admission import Admission
from .hangups import HangupWatch
from .incoming import HttpRequest, Post, header_mismatch, read_post, read_session_request
from .lease import Lease
from .outgoing import (JSON, MODERN_STATUS_BY_CODE, SSE, STATUS_BY_CODE, Answer, HttpError, failed, json_response,
                       not_allowed, status_of)
from .relay import CancelRelay
from .sessions import SessionCodec
from .sse import DISCONNECT_CHECK_S, Streams, stream
from .tenancy import Tenancy


@dataclass(frozen=True)
class Caller:
    """Who sent a POST: the key, its tenant, what the request holds while it is served (the tenant, a
    place: :class:`~.lease.Lease`), and the legacy session it names, when that is a live one. What a
    legacy session sends that needs no word from the gateway (a plan's ``light``) comes with its
    session and no tenant."""

    key: ApiKey
    tenant: Tenant | None
    lease: Lease
    session: Session | None = None


class Exchange(NamedTuple):
    """One POSTed request on its way to its answer: the POST as read, its frame and plan, who sent it,
    and the session it is served in."""

    post: Post
    frame: Single
    plan: Plan
    caller: Caller
    session: Session


@dataclass(frozen=True)
class Delivery:
    """How one answer goes out."""

    statuses: dict[int, int]  # the HTTP status of each JSON-RPC error code, in the request's era
    streamed: bool  # as SSE; else one JSON body
    resumable: bool = False  # its events kept for a GET with Last-Event-ID (2025-11-25 sessions, where offered)
    json_at_once: bool = False  # a stream that has only its answer within a moment goes as JSON (the client takes it)


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
        post = read_post(request, self.tenancy.credential)
        if isinstance(post.frame, HttpError):  # not JSON: said once the key is known to be good
            with self.tenancy.tenant(post.key, post.address):
                raise post.frame
        session = self._session_of(post, post.frame)
        plan = self.core.plan(post.frame, session)
        with Lease() as lease:  # the key is checked first: a rejected one is a 401 here
            if plan.light and session is not None:  # a live session of this key: no need to ask the gateway again
                self.tenancy.not_refused(post.key)
                caller = Caller(post.key, None, lease, session)
            else:
                caller = Caller(post.key, lease.take(self.tenancy.tenant(post.key, post.address)), lease, session)
            if plan.long:  # a place for as long as the answer takes (a streamed answer holds the lease too)
                self.admission.admit(lease, post.key, held=plan.held)
            try:
                if isinstance(post.frame, BatchFrame):  # a batch is never modern (plan.modern is False)
                    return self._batch(post, post.frame, caller)
                if plan.modern:
                    return self._modern(post, post.frame, plan, caller)
                return self._legacy(post, post.frame, plan, caller)
            except ColabHiveError:  # answered at the edge
                raise
            except Exception:  # answered as the core answers its own surprises: -32603 with the request's id
                answer = failed(post.frame)
                return Response(status=202) if answer is None else json_response(answer, 200)

    def _modern(self, post: Post, frame: Single, plan: Plan, caller: Caller) -> Answer:
        """2026-07-28: stateless, with the routing headers checked against the body."""
        mismatch = header_mismatch(post.headers, frame)
        if mismatch:
            raise HttpError(400, jsonrpc.HEADER_MISMATCH, mismatch)
        if plan.refusal is not None:  # a malformed request (the answer carries its id, as every edge answer)
            raise HttpError(400, plan.refusal.code, plan.refusal.message, data=plan.refusal.data)
        if not plan.request:
            return Response(status=202)
        if plan.listens and SSE not in post.wanted:
            raise HttpError(406, jsonrpc.INVALID_REQUEST, f"subscriptions/listen answers with {SSE}: Accept it")
        session = Session(id=f"modern:{random.getrandbits(64):016x}", transport="streamable-http")  # this process's own
        return self._answer(Exchange(post, frame, plan, caller, session), _delivery(plan, post.wanted, modern=True))

    def _legacy(self, post: Post, frame: Single, plan: Plan, caller: Caller) -> Answer:
        if plan.opens:
            session = self.sessions.new_session()
            response = self._answer(Exchange(post, frame, plan, caller, session), _delivery(plan, post.wanted))
            if session.version is not None:
                response.headers["Mcp-Session-Id"] = self.sessions.issue(session, caller.key)
                log.bind(session=session.id, tenant=caller.key.log_id, transport="streamable-http"
                         ).info("http.session.issued")
            return response
        session = self._legacy_session(post, caller)
        if not plan.request:
            answer = self.core.handle(frame, tenant=caller.tenant, session=session)
            if self.relay is not None and plan.cancels is not None:
                self.relay.publish(caller.key.log_id, session.id, *plan.cancels)  # the call may run in another worker
            return Response(status=202) if answer is None else json_response(answer, status_of(answer, STATUS_BY_CODE))
        resumable = self.streams.events is not None and plan.resumable
        return self._answer(Exchange(post, frame, plan, caller, session),
                            _delivery(plan, post.wanted, resumable=resumable))

    def _batch(self, post: Post, batch: BatchFrame, caller: Caller) -> Answer:
        """A legacy batch (its session's revision decides whether it may be one); never a 2026 one."""
        if post.version in MODERN_VERSIONS:
            raise HttpError(400, jsonrpc.INVALID_REQUEST, f"Invalid Request: a {post.version} POST body is one "
                            "JSON-RPC request or notification, not a batch")
        answer = self.core.handle_batch(batch, session=self._legacy_session(post, caller), tenant=caller.tenant,
                                        narrow=post.narrow, trace=post.headers)
        return Response(status=202) if answer is None else json_response(answer, 200)

    def _legacy_session(self, post: Post, caller: Caller) -> Session:
        """The handshake session a legacy request belongs to, once its version header holds."""
        _check_legacy_version(post.version)
        return caller.session or self.restore(post.session_token, caller.key)

    def remember(self, session: Session) -> None:
        """The core's hook: what a session's later requests must know, for any worker (its log level)."""
        if session.log_level and session.transport == "streamable-http":
            self.store.put(SESSIONS, session.id, {"log_level": session.log_level}, self.config.session_max_age)

    def _answer(self, exchange: Exchange, delivery: Delivery) -> Answer:
        """Serve one request as its delivery says: a JSON body, or an SSE stream (one refused at once
        is a JSON body too, where the client takes JSON)."""
        post, frame, plan, caller, session = exchange

        def run(notify: Callable[[dict[str, Any]], None], cancelled: Cancellation) -> Any:
            try:
                return self.core.handle(frame, tenant=caller.tenant, session=session, notify=notify,
                                        cancelled=cancelled, narrow=post.narrow, trace=post.headers)
            except Exception:
                return failed(frame)

        def plain(answer: Any) -> Answer:
            if answer is None:
                return Response(status=204)  # cancelled: the client is gone or asked us to stop
            return self.tenancy.step_up(json_response(answer, status_of(answer, delivery.statuses)), answer)

        if delivery.streamed:
            max_age = self.config.stream_max_age if plan.listens else None
            return self.streams.answer(run, caller.lease, session if delivery.resumable else None, max_age=max_age,
                                       plain=plain if delivery.json_at_once else None)
        with self.hangups.watching(post.sock if plan.calls else None) as hung_up:
            return plain(run(lambda _n: None, hung_up))

    # -- sessions, GET, DELETE ------------------------------------------------------------------

    def _session_of(self, post: Post, frame: Frame) -> Session | None:
        """The legacy session a legacy frame names, when it is a live one of its key; else ``None``."""
        if post.session_token is None or frame.modern:
            return None
        try:
            return self.restore(post.session_token, post.key)
        except HttpError:
            return None

    def restore(self, token: str | None, key: ApiKey) -> Session:
        """The legacy session ``token`` names, for ``key``: 400 without one, 404 when it is not (or no
        longer) a live session of this key."""
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
        get = read_session_request(request, self.tenancy.key, stream=True)
        session = self.restore(get.session_token, get.key)
        if get.last_event_id:
            with Lease() as lease:
                self.admission.admit(lease, get.key, held=False)  # the rest of an answer, as long as it takes
                resumed = self.streams.resume(get.last_event_id, session, lease)  # the stream holds the place
            if resumed is not None:
                return resumed
            log.bind(session=session.id).info("http.resume.unknown_event")  # replaying is a MAY, and a 404
        return self._changes(get.key, get.address)  # would end the session: the plain stream instead

    def _changes(self, key: ApiKey, address: str) -> Answer:
        """The stream that tells a session its tool list changed (for a key the gateway accepts)."""
        outbox: queue.Queue = queue.Queue()
        stop = threading.Event()

        def generate(sock: socket.socket | None) -> Iterator[bytes]:
            try:
                yield from self.streams.outbox(outbox, sock, stop)
            finally:
                stop.set()

        with Lease() as lease:
            tenant = lease.take(self.tenancy.tenant(key, address))
            self.admission.admit(lease, key, held=True)
            changed = lambda: outbox.put(jsonrpc.notification("notifications/tools/list_changed"))  # noqa: E731
            lease.run_on_thread(lambda: tenant.watch(stop, changed), "mcp-get-stream")  # held while it watches
        return stream(generate)

    def delete(self, request: HttpRequest) -> Answer:
        if "Mcp-Session-Id" not in request.headers:
            return not_allowed("POST")
        end = read_session_request(request, self.tenancy.key)
        session = self.restore(end.session_token, end.key)
        if not self.store.put(SESSIONS, session.id, ENDED, self.config.session_max_age):
            raise HttpError(503, jsonrpc.INTERNAL_ERROR, "The session could not be ended just now; try again",
                            {"Retry-After": "5"})
        return Response(status=204)


def _check_legacy_version(version: str | None) -> None:
    """Refuse a request whose ``MCP-Protocol-Version`` header is not a handshake revision."""
    refused = envelope.legacy_header_refusal(version)
    if refused is not None:
        raise HttpError(400, refused.code, refused.message, data=refused.data)


def _delivery(plan: Plan, wanted: set[str], *, modern: bool = False, resumable: bool = False) -> Delivery:
    """How a planned request's answer goes out, given what its client accepts (``wanted``): SSE when
    the client takes only SSE, for a listen, or when notifications come before the answer; for a
    legacy call that may outlive its connection (``resumable``) or ask the client something, SSE
    whenever the client takes it."""
    streamed = JSON not in wanted or plan.listens or (SSE in wanted and plan.notifies)
    if not modern and SSE in wanted and plan.calls and (resumable or plan.asks):
        streamed = True
    return Delivery(MODERN_STATUS_BY_CODE if modern else STATUS_BY_CODE, streamed, resumable, JSON in wanted)
