"""The 2024-11-05 HTTP+SSE transport: ``GET /sse`` opens a session's stream, whose first event names
where to POST its messages (``/messages?session_id=…``); every answer leaves on that stream.

The stream lives in one process: run this transport with one worker, or route a session's
requests to the process that holds its stream. A session's messages run on its own few threads,
with a bounded backlog: past it, a POST is answered 429 at once.
"""

from __future__ import annotations

import queue
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Iterator

from werkzeug.wrappers import Response

from ...errors import ColabHiveError
from ...keys import ApiKey
from ...logs import log
from ...protocol import Server, Session, jsonrpc
from ...protocol.jsonrpc import JsonRpcError
from .admission import Admission
from .incoming import HttpRequest, read_session_message, read_session_request
from .lease import Lease
from .outgoing import Answer, HttpError, failed, json_response
from .sessions import SessionCodec
from .sse import Streams, stream
from .tenancy import Tenancy

MESSAGE_THREADS = 4  # a session's messages served at once
MESSAGE_BACKLOG = 16  # a session's messages accepted and not yet answered


@dataclass
class _Stream:
    """A 2024-11-05 session: its messages come by POST, every answer leaves on its stream."""

    session: Session
    binding: str  # the key's: only that key may post to it
    outbox: queue.Queue = field(default_factory=queue.Queue)
    closed: threading.Event = field(default_factory=threading.Event)
    work: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(
        MESSAGE_THREADS, thread_name_prefix="mcp-sse-message"))
    backlog: threading.BoundedSemaphore = field(default_factory=lambda: threading.BoundedSemaphore(MESSAGE_BACKLOG))


class LegacySse:
    def __init__(self, core: Server, tenancy: Tenancy, admission: Admission, streams: Streams,
                 sessions: SessionCodec) -> None:
        self.core, self.tenancy, self.admission, self.streams, self.sessions = core, tenancy, admission, streams, sessions
        self._open: dict[str, _Stream] = {}
        self._lock = threading.Lock()

    def open(self, request: HttpRequest) -> Answer:
        """The session's stream: an ``endpoint`` event, then every answer of the session."""
        opening = read_session_request(request, self.tenancy.key)
        self.tenancy.check(opening.key, opening.address)  # a stream opens only for a key the gateway accepts
        with Lease() as lease:  # a place, held by the stream until it ends
            self.admission.admit(lease, opening.key, held=True)
            return self._stream(opening.key, lease)

    def _stream(self, key: ApiKey, lease: Lease) -> Answer:
        opened = _Stream(self.sessions.new_session("sse"), key.binding)
        with self._lock:
            self._open[opened.session.id] = opened
        log.bind(session=opened.session.id, tenant=key.log_id, transport="sse").info("http.session.issued")

        def generate(sock: socket.socket | None) -> Iterator[bytes]:
            endpoint = f"event: endpoint\ndata: /messages?session_id={opened.session.id}\n\n".encode()
            try:
                yield from self.streams.outbox(opened.outbox, sock, opened.closed, first=endpoint)
            finally:
                opened.closed.set()
                with self._lock:
                    self._open.pop(opened.session.id, None)
                self.core.cancel_session(opened.session)
                opened.work.shutdown(wait=False, cancel_futures=True)

        return stream(generate, lease)

    def message(self, request: HttpRequest) -> Answer:
        """One message of a session: accepted at once, served on one of the session's threads, answered
        on the stream; 429 when the session already has :data:`MESSAGE_BACKLOG` waiting."""
        message = read_session_message(request, self.tenancy.credential)
        key, frame = message.key, message.frame
        with self._lock:
            opened = self._open.get(message.session_id)
        if opened is None or opened.binding != key.binding:
            raise HttpError(404, jsonrpc.INVALID_REQUEST, "Unknown session (it may live on another worker: this "
                            "transport needs one, serve --http-workers 1, or sticky routing by session_id)")
        if isinstance(frame, JsonRpcError):
            return json_response(jsonrpc.error(None, frame), 400)
        if self.core.plan(frame, opened.session).light:  # a ping, a notification, an answer to us: served now,
            self.tenancy.not_refused(key)  # asking the gateway nothing, never queued behind the session's calls
            self._answer(opened, self.core.serve(frame, tenant=None, session=opened.session, notify=opened.outbox.put))
            return _accepted()

        if not opened.backlog.acquire(blocking=False):
            raise HttpError(429, jsonrpc.INVALID_REQUEST, f"This session already has {MESSAGE_BACKLOG} messages "
                            "waiting for their answers: send more once some are answered", {"Retry-After": "1"})

        def work() -> None:
            try:
                with self.tenancy.tenant(key, message.address) as tenant:
                    answer = self.core.serve(frame, tenant=tenant, session=opened.session, notify=opened.outbox.put,
                                             trace=message.trace, narrow=message.narrow)
            except ColabHiveError as exc:  # the key was rejected meanwhile, or its limits are reached: said on the stream
                answer = jsonrpc.errors_for(frame, jsonrpc.as_error(exc))  # each request of a batch too
            except Exception:
                answer = failed(frame)
            finally:
                opened.backlog.release()
            self._answer(opened, answer)

        try:
            opened.work.submit(work)
        except RuntimeError:  # the stream closed meanwhile
            opened.backlog.release()
            raise HttpError(404, jsonrpc.INVALID_REQUEST, "Unknown session (its stream has closed)") from None
        return _accepted()

    @staticmethod
    def _answer(opened: _Stream, answer: dict[str, Any] | list[dict[str, Any]] | None) -> None:
        if answer is not None:
            opened.outbox.put(answer)


def _accepted() -> Response:
    """A message taken: its answer, if any, leaves on the session's stream (a new object each time:
    the edge adds its own headers)."""
    return Response(b"Accepted", 202, mimetype="text/plain")
