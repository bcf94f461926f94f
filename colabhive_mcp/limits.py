"""Limits that hold across an instance: per API key (calls running, calls started in the last minute,
streams and waits held open) and per instance (keys checked with the gateway per minute).

They are counted in the instance store (what is held, in its shared counts), so a tenant's eviction
does not reset them and every worker of the instance sees the same counts (stdio and a single
process count in memory). Each refusal says which limit it hit and when to try again.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

from .config import Config
from .store import MemoryStore, SqliteStore

CALLS, STARTED, HELD, COLD = "calls", "started", "held", "cold"
BUSY_RETRY_S = 5.0  # what to tell a caller refused for a place that frees when some work ends


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
        if not self.store.counts.take(space, digest, limit):
            raise refusal
        try:
            yield
        finally:
            self.store.counts.give_back(space, digest)
