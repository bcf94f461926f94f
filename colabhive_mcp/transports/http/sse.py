"""Server-sent events: an answer streamed with its notifications, a session's outbox, keep-alives,
and noticing the client leave.

A plain stream whose client goes away cancels its request; a resumable one (2025-11-25 sessions,
where offered) keeps running and its events wait for a ``GET`` with ``Last-Event-ID``. A stream
that would stay open for as long as its client likes (a notification stream, a listen) ends after
``stream_max_age`` seconds: its client reconnects. A listen ends with its completion result (the
server ended it; a dropped connection would say nothing).
"""

from __future__ import annotations

import queue
import socket
import threading
import time
from typing import Any, Callable, Generator, Iterator

from werkzeug.wrappers import Response

from ... import metrics
from ...calls.cancellation import ENDED, Cancellation
from ...logs import log
from ...protocol import Session
from ...settings.config import Config
from .events import EventStore, StreamLog
from .hangups import peer_closed
from .incoming import socket_of
from .lease import Lease, Share
from .outgoing import SSE, SSE_HEADERS, Answer, sse_event

DISCONNECT_CHECK_S = 0.5
RETRY_MS = 1000  # how long a client waits before it reconnects to a handed-over stream
FIRST_WORD_S = 2.0  # how long an SSE answer's status line waits for its first message
GOODBYE_WAIT_S = 5.0  # how long a request ended at max_age has to give its last answer
Run = Callable[[Callable[[dict[str, Any]], None], Cancellation], Any]


class Streams:
    def __init__(self, config: Config, events: EventStore | None) -> None:
        """``events``: where resumable streams keep their events (``None``: streams are not resumable)."""
        self.config = config
        self.events = events

    def answer(self, run: Run, lease: Lease, resumable_for: Session | None = None, max_age: float | None = None,
               plain: Callable[[Any], Answer] | None = None) -> Answer:
        """Run the request on its own thread, which holds ``lease`` until the request is done
        (``run(notify, cancelled)`` returns its answer), and stream its notifications, then its
        answer (or end after ``max_age`` seconds, cancelling it).

        A request answered within ``FIRST_WORD_S`` before it said anything else (one refused at
        once, say) gets ``plain(answer)`` instead: a JSON answer, whose status can still say what
        the error is (a 2026 ``-32021`` is a 400 once a stream has not begun with a 200)."""
        cancelled = Cancellation()
        events = self.events
        resumable = resumable_for is not None and events is not None
        stream_log = events.open(resumable_for.id) if resumable_for is not None and events is not None \
            else StreamLog("", "")

        def work() -> None:
            answer = None
            try:
                answer = run(stream_log.append, cancelled)
            finally:
                stream_log.finish(answer)

        lease.run_on_thread(work, "mcp-stream")
        if plain is not None and not resumable:
            messages, done = stream_log.after(0, FIRST_WORD_S)
            if done and len(messages) <= 1:
                return plain(messages[0] if messages else None)
        return stream(lambda sock: self.relay(stream_log, 0, sock, cancelled, resumable, prime=resumable, max_age=max_age))

    def resume(self, last_event_id: str, session: Session, lease: Lease) -> Response | None:
        """A stream picked up where ``last_event_id`` left it (holding ``lease`` until it ends);
        ``None`` when it is gone."""
        found = self.events.find(last_event_id, session.id) if self.events is not None else None
        if found is None:
            return None
        stream_log, position = found
        return stream(lambda sock: self.relay(stream_log, position, sock, Cancellation(), True), lease)

    def relay(self, stream_log: StreamLog, position: int, sock: socket.socket | None, cancelled: Cancellation,
              resumable: bool, prime: bool = False, max_age: float | None = None) -> Iterator[bytes]:
        """The SSE bytes of ``stream_log`` from ``position`` on, live, with keep-alive comments.

        A resumable POST stream (``prime``) starts with a priming event and is handed over after
        ``sse_poll_after`` seconds: a ``retry`` field, then the connection ends and the client
        reconnects with ``GET`` + ``Last-Event-ID``, whose stream then runs to the answer.
        """
        finished = False
        started = last = time.monotonic()
        try:
            # the first bytes go out at once, so the client has its headers before any event
            yield f"id: {stream_log.event_id(0)}\nretry: {RETRY_MS}\ndata: \n\n".encode() if prime else b": open\n\n"
            while True:
                messages, done = stream_log.after(position, DISCONNECT_CHECK_S)
                for message in messages:
                    position += 1
                    yield sse_event(message, stream_log.event_id(position) if resumable else None)
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
                if max_age is not None and now - started >= max_age:
                    if now - started >= max_age + GOODBYE_WAIT_S:
                        return
                    cancelled.cancel(ENDED)  # its answer, then the end (next rounds)
        finally:
            if not finished and not resumable:
                cancelled.set()  # the client left without a word

    def outbox(self, events: queue.Queue, sock: socket.socket | None, closed: threading.Event,
               first: bytes = b": open\n\n") -> Iterator[bytes]:
        """``first``, then the messages put in ``events`` as SSE, with keep-alive comments while
        nothing happens, until the client leaves or ``stream_max_age`` passes (then ``closed`` is set)."""
        yield first
        last = opened = time.monotonic()
        while True:
            try:
                item = events.get(timeout=DISCONNECT_CHECK_S)
                last = time.monotonic()
                yield item if isinstance(item, bytes) else sse_event(item)
            except queue.Empty:
                if (sock is not None and peer_closed(sock)) or time.monotonic() - opened >= self.config.stream_max_age:
                    closed.set()
                    return
                if time.monotonic() - last >= self.config.sse_keepalive:
                    last = time.monotonic()
                    yield b": keep-alive\n\n"


def stream(generate: Callable[[socket.socket | None], Iterator[bytes]], lease: Lease | None = None) -> Response:
    """An SSE response whose bytes ``generate(client socket)`` makes; it holds a share of ``lease`` until
    the server closes it (sent to the end, or its client gone)."""
    return _StreamResponse(generate, lease.share() if lease is not None else None, mimetype=SSE, headers=SSE_HEADERS)


class _StreamResponse(Response):
    """A streamed response whose generator gets the client's socket (to notice it leaving)."""

    def __init__(self, generate: Callable[[socket.socket | None], Iterator[bytes]], share: Share | None,
                 **kwargs: Any) -> None:
        super().__init__(None, **kwargs)
        self._generate = generate
        self._share = share

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        sock = socket_of(environ)
        self.response = _Closing(_guarded(self._generate(sock)), self._share)
        self.direct_passthrough = True
        return super().__call__(environ, start_response)


class _Closing:
    """The body of a streamed response: when the server closes it (whether or not it was read), its
    generator is closed and its share of the lease let go."""

    def __init__(self, chunks: Generator[bytes, None, None], share: Share | None) -> None:
        self._chunks, self._share = chunks, share

    def __iter__(self) -> Iterator[bytes]:
        return self._chunks

    def close(self) -> None:
        try:
            self._chunks.close()
        finally:
            if self._share is not None:
                self._share.let_go()


def _guarded(chunks: Iterator[bytes]) -> Generator[bytes, None, None]:
    """A stream that ends (logged once, scrubbed) instead of raising into the server mid-response."""
    try:
        yield from chunks
    except Exception:
        metrics.ERRORS.labels("internal").inc()
        log.exception("http.stream_failed")
