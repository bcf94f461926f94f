"""The instance store of one process (stdio, a single process, tests): the same operations as the
SQLite store (:class:`colabhive_mcp.store.interface.InstanceStore`), in a dict under one lock."""

from __future__ import annotations

import secrets
import threading
import time
from typing import Any, Callable

from .counts import MemoryCounts
from .interface import Marked


class MemoryStore:
    """The store of one process."""

    shared = False

    def __init__(self, max_entries: int = 100_000, clock: Callable[[], float] = time.time) -> None:
        self.max_entries = max_entries
        self.clock = clock
        self._entries: dict[tuple[str, str], tuple[Any, float]] = {}
        self._places: dict[tuple[str, str], dict[str, float]] = {}  # place id -> when it expires
        self._marks: dict[tuple[str, str], tuple[int, float]] = {}  # -> the generation used, when it expires
        self._lock = threading.Lock()
        self._counts = MemoryCounts()

    def get(self, space: str, key: str, failed: Any = None) -> Any:
        """The live value under ``key``, else ``None`` (memory never fails: ``failed`` is not used)."""
        with self._lock:
            found = self._entries.get((space, key))
            return found[0] if found is not None and found[1] > self.clock() else None

    def put(self, space: str, key: str, value: Any, ttl: float) -> bool:
        """Store ``value`` under ``key`` for ``ttl`` seconds; whether it was stored."""
        with self._lock:
            self._make_room()
            self._entries[(space, key)] = (value, self.clock() + ttl)
            return True

    def add(self, space: str, key: str, value: Any, ttl: float) -> bool:
        """Store ``value`` unless the key holds an unexpired one; whether it was stored."""
        with self._lock:
            found = self._entries.get((space, key))
            if found is not None and found[1] > self.clock():
                return False
            self._make_room()
            self._entries[(space, key)] = (value, self.clock() + ttl)
            return True

    def delete(self, space: str, key: str) -> None:
        with self._lock:
            self._entries.pop((space, key), None)

    def mark(self, space: str, key: str, ttl: float, generation: int = 0) -> Marked:
        """:meth:`colabhive_mcp.store.interface.InstanceStore.mark`: at most ``max_entries`` keys are marked at
        once, and none is let go before it expires."""
        now = self.clock()
        with self._lock:
            used, expires = self._marks.get((space, key), (-1, now))
            if expires > now and used >= generation:
                return Marked.AGAIN
            if expires <= now and len(self._marks) >= self.max_entries:
                self._marks = {mark: kept for mark, kept in self._marks.items() if kept[1] > now}
                if len(self._marks) >= self.max_entries:
                    return Marked.FULL
            self._marks[(space, key)] = (generation, now + ttl)
            return Marked.FIRST

    def reserve(self, space: str, key: str, limit: int, ttl: float, lasting: bool = False) -> str | None:
        """One of at most ``limit`` places under ``key``, held until unreserved or ``ttl`` seconds
        pass: its id, or ``None`` when every place is held (``lasting`` changes nothing in one process)."""
        now = self.clock()
        with self._lock:
            held = {place: expires for place, expires in self._places.get((space, key), {}).items() if expires > now}
            if len(held) >= limit:
                self._places[(space, key)] = held
                return None
            place = secrets.token_hex(8)
            held[place] = now + ttl
            self._places[(space, key)] = held
            return place

    def unreserve(self, space: str, key: str, reservation: str) -> None:
        with self._lock:
            held = self._places.get((space, key))
            if held is not None:
                held.pop(reservation, None)
                if not held:
                    del self._places[(space, key)]

    def held(self, space: str, key: str) -> int:
        now = self.clock()
        with self._lock:
            return sum(expires > now for expires in self._places.get((space, key), {}).values())

    def next_free(self, space: str, key: str, count: int = 1) -> float:
        """Seconds until ``count`` of the places held under ``key`` have expired (0: now)."""
        now = self.clock()
        with self._lock:
            ends = sorted(end for end in self._places.get((space, key), {}).values() if end > now)
        return ends[min(max(1, count), len(ends)) - 1] - now if ends else 0.0

    def acquire(self, space: str, key: str, limit: int) -> bool:
        return self._counts.acquire(space, key, limit)

    def release(self, space: str, key: str) -> None:
        self._counts.release(space, key)

    def _make_room(self) -> None:
        if len(self._entries) < self.max_entries:
            return
        now = self.clock()
        for item in [k for k, (_, expires) in self._entries.items() if expires <= now]:
            del self._entries[item]
        while len(self._entries) >= self.max_entries:  # still full: the soonest to expire go first
            del self._entries[min(self._entries, key=lambda k: self._entries[k][1])]

    def close(self) -> None:
        pass
