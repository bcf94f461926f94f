"""Who may hold a worker thread for long: tool calls, streams and waits, and waits for the gateway's
word on a key, within budgets.

Each worker lets at most ``http_long_requests`` requests hold a thread for long (by default three
quarters of its threads), so health checks and short requests always find one; a key may hold at
most ``tenant_max_streams`` streams and waits open across the instance. Keys share a worker's
places fairly: a key may hold at most half of the places the other keys leave (:func:`share`), so
however greedy the first keys are, a newcomer finds one. A request whose key the worker does not
hold yet waits for the gateway's word on it (asking, or waiting for the request that asks), which
takes as long as the gateway takes: it holds a place too, shared the same way, by client address
(an IPv6 client's /48) for a key the instance has never accepted, and by key for one it accepted
before. However slowly the gateway answers, a flood of new keys cannot take the threads of health
checks and short requests, nor more than its share of the others. A full budget is answered at once (503 for the server's, 429 for the key's or
the address's, both with ``Retry-After``), never queued.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator

from ... import metrics
from ...errors import BUSY_RETRY_S
from ...keys import ApiKey
from ...settings.config import Config
from ...tenants.limits import LimitReached, Limits, site_of
from .lease import Lease


def long_request_places(config: Config) -> int:
    """``http_long_requests``, or the worker's threads less a quarter (at least four kept free)."""
    threads = config.http_threads
    return config.http_long_requests or max(1, threads - max(4, threads // 4))


def share(places: int, held_by_others: int) -> int:
    """The most places of a worker's ``places`` one holder may have while others hold
    ``held_by_others``: half of what they leave (at least one), so it shrinks as the worker fills."""
    return max(1, (places - held_by_others) // 2)


class Admission:
    def __init__(self, config: Config, limits: Limits) -> None:
        self.limits = limits
        self.size = long_request_places(config)
        self.fair = not config.single_tenant  # one key has nobody to share with
        self._held: dict[str, int] = {}  # key digest, or "address <address>" -> the places it holds in this worker
        self.used = 0  # places taken
        self._lock = threading.Lock()

    def admit(self, lease: Lease, key: ApiKey, *, held: bool) -> None:
        """One of the key's stream places (``held``), then a long-request place of this worker, for as
        long as ``lease`` is held; raises :class:`LimitReached` (429 or 503) when none is free. The key's
        limit comes first, so a greedy key is refused without taking the worker's places meanwhile."""
        if held:
            try:
                lease.take(self.limits.held(key.digest))
            except LimitReached:
                metrics.ERRORS.labels("tenant_limit").inc()
                raise
        lease.take(self.by_key(key.digest))

    def by_key(self, digest: str) -> contextlib.AbstractContextManager[None]:
        """A place held by the key with this digest (a call, a stream, or a wait for the gateway's word on
        a key the instance knows); raises :class:`LimitReached`."""
        return self._place(digest, "This API key holds", "tenant_share")

    def by_address(self, address: str) -> contextlib.AbstractContextManager[None]:
        """A place for a request waiting for the gateway's check of a key the instance has never
        accepted, held by the client's ``address`` (an IPv6 client's /48, as the new-key budgets count
        it); raises :class:`LimitReached`."""
        return self._place(f"address {site_of(address) or address}", "Requests from your address waiting for "
                           "ColabHive to check new API keys hold", "address_share")

    @contextlib.contextmanager
    def _place(self, holder: str, who: str, past_share: str) -> Iterator[None]:
        """A place for ``holder`` for the ``with`` block: 503 when all are taken, 429 past the holder's
        share. ``who`` begins that refusal, ``past_share`` counts it in ``mcp_errors_total``."""
        with self._lock:
            mine = self._held.get(holder, 0)
            if self.used >= self.size:
                metrics.ERRORS.labels("worker_busy").inc()
                raise LimitReached(f"This server is busy: all {self.size} places for long requests of this worker "
                                   "are taken; try again shortly.", BUSY_RETRY_S, 503, "http_long_requests",
                                   allowed=self.size, used=self.used)
            if self.fair and mine >= (fair_share := share(self.size, self.used - mine)):
                metrics.ERRORS.labels(past_share).inc()
                raise LimitReached(f"{who} {mine} of this worker's {self.size} places for long requests, their "
                                   "share while others use the rest; try again when one of them ends.",
                                   BUSY_RETRY_S, 429, "http_long_requests", allowed=fair_share, used=mine)
            self._held[holder] = mine + 1
            self.used += 1
        try:
            yield
        finally:
            with self._lock:
                self.used -= 1
                mine = self._held.pop(holder) - 1
                if mine:
                    self._held[holder] = mine
