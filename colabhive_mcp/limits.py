"""Limits that hold across an instance: per API key (calls running, calls started in the last minute,
streams and waits held open) and per instance (keys checked with the gateway per minute).

They are counted in the instance store, so a tenant's eviction does not reset them and every worker
of the instance sees the same counts (stdio and a single process count in memory). Each refusal
says which limit it hit and when to try again.

A place a call gives back stays with its process for a moment (``SPARE_S``) for the key's next
call, so a steady stream of calls costs the store nothing: a place is taken from the store only
when the process has no spare one, and given back when it has been spare that long. The count
stays exact (a spare place is still held); another worker may see a key full for that moment more.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Callable, Iterator

from .config import Config
from .store import MemoryStore, SqliteStore

CALLS, STARTED, HELD, COLD = "calls", "started", "held", "cold"
PLACE_TTL_S = 86_400.0  # a place not given back (its thread hung) frees itself after a day at most
BUSY_RETRY_S = 5.0  # what to tell a caller refused for a place that frees when some work ends
SPARE_S = 1.0  # how long a process keeps a place given back for the key's next call


class LimitReached(Exception):
    """A limit is full: the message names it, ``retry_after`` says when a place may be free."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = max(1.0, retry_after)


class Limits:
    def __init__(self, config: Config, store: MemoryStore | SqliteStore | None = None) -> None:
        self.config = config
        self.store = store or MemoryStore()
        self.places = SparePlaces(self.store)

    @contextlib.contextmanager
    def call(self, digest: str) -> Iterator[None]:
        """A tool call of the key with this digest, within ``tenant_max_concurrent`` and
        ``tenant_calls_per_minute``; raises :class:`LimitReached`."""
        limit, per_minute = self.config.tenant_max_concurrent, self.config.tenant_calls_per_minute
        with self._place(CALLS, digest, limit, LimitReached(
                f"This API key already has {limit} ColabHive calls running (the limit is {limit}); try again "
                "when one finishes.", BUSY_RETRY_S)):
            if per_minute and self.store.take(STARTED, digest, per_minute, 60.0) is None:
                wait = self.store.next_free(STARTED, digest)
                raise LimitReached(f"This API key started {per_minute} ColabHive calls in the last minute (the "
                                   f"limit); try again in {wait:.0f} s.", wait)
            yield

    def held(self, digest: str) -> contextlib.AbstractContextManager[None]:
        """A stream or a wait the key holds open, within ``tenant_max_streams``; raises :class:`LimitReached`."""
        limit = self.config.tenant_max_streams
        return self._place(HELD, digest, limit, LimitReached(
            f"This API key already holds {limit} streams and waits open (the limit is {limit}); close one, "
            "or try again later.", BUSY_RETRY_S * 6))

    def cold_fetch(self) -> None:
        """One more key checked with the gateway (a manifest fetched for a key not in the pool), within
        ``cold_fetches_per_minute`` for the instance; raises :class:`LimitReached`."""
        per_minute = self.config.cold_fetches_per_minute
        if per_minute and self.store.take(COLD, "instance", per_minute, 60.0) is None:
            raise LimitReached("This server is checking too many new API keys right now; try again shortly.",
                               self.store.next_free(COLD, "instance"))

    @contextlib.contextmanager
    def _place(self, space: str, digest: str, limit: int, refusal: LimitReached) -> Iterator[None]:
        if not limit:
            yield
            return
        place = self.places.take(space, digest, limit)
        if place is None:
            raise refusal
        try:
            yield
        finally:
            self.places.give_back(space, digest, place)


class SparePlaces:
    """The store's places as this process takes them: one given back is kept ``SPARE_S`` seconds
    for the same key's next call, then returned to the store by a helper thread."""

    def __init__(self, store: MemoryStore | SqliteStore, clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.clock = clock
        self._taken: dict[str, float] = {}  # place in use -> when the store gave it
        self._spare: dict[tuple[str, str], list[tuple[str, float, float]]] = {}  # (place, taken, spare since)
        self._lock = threading.Lock()
        self._returner: threading.Thread | None = None

    def take(self, space: str, key: str, limit: int) -> str | None:
        """A place of the key (a spare one, else one from the store); ``None`` when the key is full."""
        now = self.clock()
        with self._lock:
            spare = self._spare.get((space, key))
            if spare and now - spare[-1][1] < PLACE_TTL_S / 2:  # the store counts it for a while yet
                place, taken, _ = spare.pop()
                self._taken[place] = taken
                return place
        place = self.store.take(space, key, limit, PLACE_TTL_S)
        if place is not None:
            with self._lock:
                self._taken[place] = now
        return place

    def give_back(self, space: str, key: str, place: str) -> None:
        now = self.clock()
        with self._lock:
            taken = self._taken.pop(place, now)
            self._spare.setdefault((space, key), []).append((place, taken, now))
            if self._returner is None:
                self._returner = threading.Thread(target=self._return_spares, name="mcp-places", daemon=True)
                self._returner.start()

    def _return_spares(self) -> None:
        """Every ``SPARE_S``, return the places spare that long (or too old to reuse); end when none is left."""
        while True:
            time.sleep(SPARE_S)
            now, due = self.clock(), []
            with self._lock:
                for (space, key), places in list(self._spare.items()):
                    keep = [entry for entry in places if now - entry[2] < SPARE_S and now - entry[1] < PLACE_TTL_S / 2]
                    due += [(space, key, entry[0]) for entry in places if entry not in keep]
                    if keep:
                        self._spare[space, key] = keep
                    else:
                        del self._spare[space, key]
                done = not self._spare
                if done:
                    self._returner = None
            for space, key, place in due:
                self.store.give_back(space, key, place)
            if done:
                return
