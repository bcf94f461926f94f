"""The 2024-11-05 HTTP+SSE transport: ``GET /sse`` opens a session's stream, whose first event names
where to POST its messages (``/messages?session_id=…``); every answer leaves on that stream.

The stream lives in one process: run this transport with one worker, or route a session's
requests to the process that holds its stream.
"""

from __future__ import annotations

import queue
import socket
import threading
from dataclasses import dataclass, field
from typing import Iterator

from werkzeug.wrappers import Request, Response

from ...logs import log
from ...protocol import Server, Session, jsonrpc
from ...protocol.jsonrpc import JsonRpcError
from .sessions import SessionCodec
from .sse import Streams, stream
from .tenancy import Tenancy
from .wire import HttpError, body, failed, json_response


@dataclass
class _Stream:
    """A 2024-11-05 session: its messages come by POST, every answer leaves on its stream."""

    session: Session
    binding: str  # the key's: only that key may post to it
    outbox: queue.Queue = field(default_factory=queue.Queue)
    closed: threading.Event = field(default_factory=threading.Event)


class LegacySse:
    def __init__(self, core: Server, tenancy: Tenancy, streams: Streams, sessions: SessionCodec) -> None:
        self.core, self.tenancy, self.streams, self.sessions = core, tenancy, streams, sessions
        self._open: dict[str, _Stream] = {}
        self._lock = threading.Lock()

    def open(self, request: Request) -> Response:
        """The session's stream: an ``endpoint`` event, then every answer of the session."""
        key = self.tenancy.key(request)
        self.tenancy.check(key)  # a stream opens only for a key the gateway accepts
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

        return stream(generate)

    def message(self, request: Request) -> Response:
        """One message of a session: accepted at once, served on a thread, answered on the stream."""
        key = self.tenancy.key(request)
        session_id = request.args.get("session_id", "")
        if not session_id:
            raise HttpError(400, jsonrpc.INVALID_REQUEST, "Missing session_id")
        with self._lock:
            opened = self._open.get(session_id)
        if opened is None or opened.binding != key.binding:
            raise HttpError(404, jsonrpc.INVALID_REQUEST, "Unknown session (it may live on another worker)")
        try:
            message = jsonrpc.decode(body(request))
        except JsonRpcError as exc:
            return json_response(jsonrpc.error(None, exc), 400)

        def work() -> None:
            try:
                with self.tenancy.tenant(key) as tenant:
                    answer = self.core.handle(message, tenant=tenant, session=opened.session, notify=opened.outbox.put)
            except Exception:
                answer = failed(message)
            if answer is not None:
                opened.outbox.put(answer)

        threading.Thread(target=work, name="mcp-sse-message", daemon=True).start()
        return Response(b"Accepted", 202, mimetype="text/plain")
