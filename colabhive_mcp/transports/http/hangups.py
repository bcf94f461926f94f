"""Noticing clients that hang up while their call runs: one watcher thread per process.

A call answered with a plain JSON body runs on its request thread; ``HangupWatch.watching``
registers the client's socket, and the watcher sets the call's ``cancelled`` event when that
socket closes, so the polling stops and the gateway is asked to stop the work. The watcher
thread exists only while there is something to watch.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
from typing import Iterator

from ...cancellation import Cancellation

READABLE = select.POLLIN | select.POLLPRI | select.POLLHUP | select.POLLERR


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
                if not event.is_set() and peer_closed(sock):
                    event.set()


def peer_closed(sock: socket.socket) -> bool:
    """Whether the client closed its end (readable with nothing to read); any fd number works."""
    try:
        poller = select.poll()
        poller.register(sock, READABLE)
        return bool(poller.poll(0)) and sock.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):
        return True
