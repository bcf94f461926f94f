"""Noticing clients that hang up while their call runs: one watcher thread per process.

A call answered with a plain JSON body runs on its request thread; ``HangupWatch.watching``
registers the client's socket, and the watcher sets the call's ``cancelled`` event when that
socket closes, so the polling stops and the gateway is asked to stop the work. The watcher
thread exists only while there is something to watch.

Only a definite sign counts as a hang-up (the peer closed or reset the connection, or the socket
was closed under us); an error that may pass (EAGAIN, ENOMEM...) means "look again next time",
for a false hang-up stops a call whose client is still waiting, and its work upstream.
"""

from __future__ import annotations

import contextlib
import errno
import select
import socket
import threading
import time
from typing import Iterator

from ...calls.cancellation import Cancellation

READABLE = select.POLLIN | select.POLLPRI | select.POLLHUP | select.POLLERR
BROKEN = select.POLLHUP | select.POLLERR | select.POLLNVAL  # closed both ways, reset, or no longer open
GONE = {errno.ECONNRESET, errno.ECONNABORTED, errno.ENOTCONN, errno.ETIMEDOUT, errno.EBADF}


class HangupWatch:
    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._watched: dict[Cancellation, socket.socket] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @contextlib.contextmanager
    def watching(self, sock: socket.socket | None) -> Iterator[Cancellation]:
        """An event set when the client behind ``sock`` hangs up (never, for ``None``)."""
        hung_up = Cancellation()  # no reason: a closed connection
        if sock is None:
            yield hung_up
            return
        with self._lock:
            self._watched[hung_up] = sock
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="mcp-hangup-watch", daemon=True)
                self._thread.start()
        try:
            yield hung_up
        finally:
            with self._lock:
                del self._watched[hung_up]

    def _run(self) -> None:
        while True:
            time.sleep(self.interval)
            with self._lock:
                if not self._watched:
                    self._thread = None
                    return
                watched = list(self._watched.items())
            for event, sock in watched:
                if not event.is_set() and self._hung_up(event, sock):
                    event.set()

    def _hung_up(self, event: Cancellation, sock: socket.socket) -> bool:
        """Whether the client behind a socket still watched hung up. Under the lock: once a call
        has ended, the server may close its socket and give the fd number to another client."""
        with self._lock:
            return event in self._watched and peer_closed(sock)


def peer_closed(sock: socket.socket) -> bool:
    """Whether the client is certainly gone: it closed its end (readable with nothing to read), the
    connection broke, or the socket was closed. Never blocks; any fd number works (poll, not select)."""
    fd = sock.fileno()
    if fd < 0:
        return True  # closed by the server: no answer can reach the client
    try:
        poller = select.poll()
        poller.register(fd, READABLE)
        ready = poller.poll(0)
        if not ready:
            return False
        if ready[0][1] & BROKEN:
            return True
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""  # (urgent data alone: EAGAIN)
    except OSError as exc:
        return exc.errno in GONE  # else transient (EAGAIN, EINTR, ENOMEM...): look again next time
