"""Who may hold a worker thread for long: tool calls, streams and waits, within budgets.

Each worker lets at most ``http_long_requests`` requests hold a thread for long (by default three
quarters of its threads), so health checks and short requests always find one; a key may hold at
most ``tenant_max_streams`` streams and waits open across the instance. Keys share a worker's
places fairly: a key may hold at most half of the places the other keys leave (:func:`share`), so
however greedy the first keys are, a newcomer finds one. A full budget is answered at once (503
for the server's, 429 for the key's, both with ``Retry-After``), never queued.
"""

from __future__ import annotations

import contextlib
import threading

from ... import metrics
from ...config import Config
from ...keys import ApiKey
from ...limits import BUSY_RETRY_S, LimitReached, Limits

def long_request_places(config: Config) -> int:
    """``http_long_requests``, or the worker's threads less a quarter (at least four kept free)."""
    threads = config.http_threads
    return config.http_long_requests or max(1, threads - max(4, threads // 4))


def share(places: int, held_by_others: int) -> int:
    """The most places of a worker's ``places`` one key may hold while other keys hold
    ``held_by_others``: half of what they leave (at least one), so it shrinks as the worker fills."""
    return max(1, (places - held_by_others) // 2)


class Admission:
    def __init__(self, config: Config, limits: Limits) -> None:
        self.limits = limits
        self.size = long_request_places(config)
        self.fair = not config.single_tenant  # one key has nobody to share with
        self._held: dict[str, int] = {}  # key digest -> the places it holds in this worker
        self._used = 0
        self._lock = threading.Lock()

    def admit(self, lease: contextlib.ExitStack, key: ApiKey, *, held: bool) -> None:
        """One of the key's stream places (``held``), then a long-request place of this worker, for as
        long as ``lease`` is held; raises :class:`LimitReached` (429 or 503) when none is free. The key's
        limit comes first, so a greedy key is refused without taking the worker's places meanwhile."""
        if held:
            try:
                lease.enter_context(self.limits.held(key.digest))
            except LimitReached:
                metrics.ERRORS.labels("tenant_limit").inc()
                raise
        self._take(key.digest)
        lease.callback(self._give_back, key.digest)

    def _take(self, digest: str) -> None:
        with self._lock:
            mine = self._held.get(digest, 0)
            if self._used >= self.size:
                metrics.ERRORS.labels("worker_busy").inc()
                raise LimitReached(f"This server is busy: all {self.size} places for long requests of this worker "
                                   "are taken; try again shortly.", BUSY_RETRY_S, 503)
            if self.fair and mine >= share(self.size, self._used - mine):
                metrics.ERRORS.labels("tenant_share").inc()
                raise LimitReached(f"This API key holds {mine} of this worker's {self.size} places for long "
                                   "requests, its share while other keys use the rest; try again when one of its "
                                   "calls ends.", BUSY_RETRY_S, 429)
            self._held[digest] = mine + 1
            self._used += 1

    def _give_back(self, digest: str) -> None:
        with self._lock:
            self._used -= 1
            mine = self._held.pop(digest) - 1
            if mine:
                self._held[digest] = mine
