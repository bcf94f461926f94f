"""Resumable SSE streams (2025-11-25 "SSE polling"): each stream's events, kept in this process.

A POST answered with SSE writes its notifications and its answer into a :class:`StreamLog`.
The POST connection relays them live; when it ends early (the server hands the stream over,
or the client drops), a ``GET`` with ``Last-Event-ID: <stream>:<n>`` relays the rest. Event ids
are unique across streams and name the stream they belong to.
"""

from __future__ import annotations

import secrets
import threading
from typing import Any

from cachetools import TTLCache

RETENTION_S = 600.0


class StreamLog:
    """The messages of one response stream, in order, and whether the answer is in."""

    def __init__(self, stream_id: str, owner: str) -> None:
        self.id = stream_id
        self.owner = owner  # the session allowed to resume it
        self.messages: list[Any] = []
        self.done = False
        self._changed = threading.Condition()

    def append(self, message: Any) -> None:
        with self._changed:
            self.messages.append(message)
            self._changed.notify_all()

    def finish(self, answer: Any) -> None:
        """The request is over: ``answer`` (``None`` when there is none to send) is the last message."""
        with self._changed:
            if answer is not None:
                self.messages.append(answer)
            self.done = True
            self._changed.notify_all()

    def after(self, position: int, timeout: float) -> tuple[list[Any], bool]:
        """The messages after the first ``position``, waiting up to ``timeout`` for one; and ``done``."""
        with self._changed:
            self._changed.wait_for(lambda: len(self.messages) > position or self.done, timeout)
            return self.messages[position:], self.done

    def event_id(self, position: int) -> str:
        return f"{self.id}:{position}"


class EventStore:
    """This process's resumable streams, forgotten ``RETENTION_S`` after they were opened."""

    def __init__(self, retention: float = RETENTION_S, size: int = 10_000) -> None:
        self._streams: TTLCache = TTLCache(maxsize=size, ttl=retention)
        self._lock = threading.Lock()

    def open(self, owner: str) -> StreamLog:
        log = StreamLog(secrets.token_urlsafe(12), owner)
        with self._lock:
            self._streams[log.id] = log
        return log

    def find(self, last_event_id: str, owner: str) -> tuple[StreamLog, int] | None:
        """The stream a ``Last-Event-ID`` points into and the position after it, for its owner only."""
        stream_id, _, position = last_event_id.rpartition(":")
        with self._lock:
            log = self._streams.get(stream_id)
        if log is None or log.owner != owner or not position.isdigit():
            return None
        return log, int(position)
