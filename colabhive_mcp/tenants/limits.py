"""Limits that hold across an instance: per API key (calls running, calls started in the last minute,
streams and waits held open), per client address (keys it sent that the gateway rejected, in the
last minute) and per instance (keys checked with the gateway per minute).

They are counted in the instance store (what is held, in its shared counts), so a tenant's eviction
does not reset them and every worker of the instance sees the same counts (stdio and a single
process count in memory). Each refusal says which limit it hit and when to try again.
"""

from __future__ import annotations

import contextlib
import ipaddress
import math
import threading
from dataclasses import dataclass, fields
from functools import cached_property
from typing import Any, Iterator

from ..calls import results
from ..errors import BUSY_RETRY_S, LIMIT_REACHED, ColabHiveError
from ..keys import KeyRejected
from ..settings.config import Config
from ..store.interface import InstanceStore, per_minute_wait
from ..store.memory import MemoryStore

CALLS, STARTED, HELD, COLD, REFUSED = "calls", "started", "held", "cold", "refused-keys"
CHECKS_PER_ADDRESS = 8  # keys of one client address (IPv6: one /48) this process checks with the gateway at once
CHECK_QUEUE_S = 30.0  # how long a new key waits for one of those (hosts wait a minute or more for an answer)
SITE_SHARE = 4  # an IPv6 /48 (a site: 65,536 /64s) may send this many times an address's rejected keys


def site_of(address: str) -> str | None:
    """The IPv6 /48 of a client's /64 (as :func:`colabhive_mcp.transports.http.incoming.client_address`
    names it); ``None`` for an IPv4 address or anything else."""
    try:
        network = ipaddress.ip_network(address, strict=False)
    except ValueError:
        return None
    return str(network.supernet(new_prefix=48)) if network.version == 6 and network.prefixlen >= 48 else None


class LimitReached(ColabHiveError):
    """A limit is full: the message names it, ``retry_after`` says when a place may be free, and
    ``status`` whose limit it is, as HTTP says it (429: the client's own, 503: the server's).
    ``limit`` is the setting that sets it and ``figures`` what it allows and what is used, which
    :attr:`data` gives a program beside the words (a JSON-RPC error's ``data``, a result's ``_meta``)."""

    code = LIMIT_REACHED

    def __init__(self, message: str, retry_after: float, status: int = 503, limit: str | None = None,
                 **figures: Any) -> None:
        super().__init__(message, max(1.0, retry_after))
        self.retry_after: float = max(1.0, retry_after)
        self.status = self.http_status = status
        self.limit, self.figures = limit, figures

    @property
    def data(self) -> dict[str, Any]:
        return {**({"limit": self.limit} if self.limit else {}), **self.figures,
                "retryAfter": math.ceil(self.retry_after)}

    @cached_property
    def result(self) -> dict[str, Any]:
        """The refusal as a tool's result: the words for the model, :attr:`data` for programs."""
        return results.limit_result(self.message, self.data)


@dataclass(frozen=True)
class Quotas:
    """The settings :class:`Limits` holds an instance to, as the settings table names and explains them."""

    tenant_max_concurrent: int
    tenant_calls_per_minute: int
    tenant_max_streams: int
    rejected_keys_per_minute: int
    cold_fetches_per_minute: int

    @classmethod
    def of(cls, config: Config) -> Quotas:
        return cls(**{f.name: getattr(config, f.name) for f in fields(cls)})


class Limits:
    def __init__(self, quotas: Quotas, store: InstanceStore | None = None) -> None:
        self.quotas = quotas
        self.store: InstanceStore = store or MemoryStore()
        self._checking: dict[str, tuple[threading.BoundedSemaphore, int]] = {}  # address -> (its checks, waiters)
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def call(self, digest: str) -> Iterator[None]:
        """A tool call of the key with this digest, within ``tenant_max_concurrent`` and
        ``tenant_calls_per_minute``; raises :class:`LimitReached`."""
        limit, per_minute = self.quotas.tenant_max_concurrent, self.quotas.tenant_calls_per_minute
        with self._place(CALLS, digest, limit, LimitReached(
                f"This API key already has {limit} ColabHive calls running (the limit is {limit}); try again "
                "when one finishes.", BUSY_RETRY_S, 429, "tenant_max_concurrent", allowed=limit, used=limit)):
            wait = per_minute_wait(self.store, STARTED, digest, per_minute)
            if wait is not None:
                raise LimitReached(f"This API key started {per_minute} ColabHive calls in the last minute (the "
                                   f"limit); try again in {math.ceil(wait)} s.", wait, 429, "tenant_calls_per_minute",
                                   allowed=per_minute, used=per_minute)
            yield

    def held(self, digest: str) -> contextlib.AbstractContextManager[None]:
        """A stream or a wait the key holds open, within ``tenant_max_streams``; raises :class:`LimitReached`."""
        limit = self.quotas.tenant_max_streams
        return self._place(HELD, digest, limit, LimitReached(
            f"This API key already holds {limit} streams and waits open (the limit is {limit}); close one, "
            "or try again later.", BUSY_RETRY_S * 6, 429, "tenant_max_streams", allowed=limit, used=limit))

    @contextlib.contextmanager
    def new_key(self, address: str) -> Iterator[None]:
        """The gateway's check of a key the instance does not know, sent from ``address`` (see
        :func:`colabhive_mcp.transports.http.incoming.client_address`); raises :class:`LimitReached`.

        Only keys the gateway rejects count against their address (``rejected_keys_per_minute``, 429
        past it), so made-up keys lock out nobody but their sender, and any number of real keys from
        one address are served. An IPv6 client's address is its /64, and its /48 may send
        :data:`SITE_SHARE` times as many: a site's 65,536 /64s cannot spend the instance's budget
        alone. The instance checks at most ``cold_fetches_per_minute`` new keys in all (503 past
        it); each process checks :data:`CHECKS_PER_ADDRESS` of one address (of one /48 for IPv6) at
        once, the others waiting their turn, so that no burst from many addresses of a site is under
        way before its first refusals count."""
        senders = self._senders(address)
        widest, _, named = senders[-1]  # (an IPv6 site's checks wait their turn together)
        with self._turn(widest, named):
            per_address, per_minute = self.quotas.rejected_keys_per_minute, self.quotas.cold_fetches_per_minute
            if not per_address:
                senders = []
            for sender, limit, who in senders:
                if not self._room(REFUSED, sender, limit):
                    wait = self.store.next_free(REFUSED, sender)
                    raise LimitReached(f"{who[:1].upper()}{who[1:]} sent {limit} API keys that ColabHive rejected in "
                                       f"the last minute (the limit); try again in {wait:.0f} s with a valid key.",
                                       wait, 429, "rejected_keys_per_minute", allowed=limit, used=limit)
            cold_wait = per_minute_wait(self.store, COLD, "instance", per_minute)
            if cold_wait is not None:
                raise LimitReached("This server is checking too many new API keys right now; try again shortly.",
                                   cold_wait, 503, "cold_fetches_per_minute", allowed=per_minute, used=per_minute)
            try:
                yield
            except KeyRejected:
                for sender, limit, _ in senders:
                    self.store.reserve(REFUSED, sender, limit, 60.0)
                raise

    def _senders(self, address: str) -> list[tuple[str, int, str]]:
        """Who a rejected key from ``address`` counts against, with its limit and its name in a refusal."""
        per_address = self.quotas.rejected_keys_per_minute
        site = site_of(address)
        return [(address, per_address, "your address")] + (
            [(site, per_address * SITE_SHARE, "your network (its IPv6 /48)")] if site is not None else [])

    def _room(self, space: str, key: str, limit: int) -> bool:
        """Whether a place under ``key`` is free now (looked at, not taken: a rejection being counted
        just then must find its place)."""
        return self.store.held(space, key) < limit

    @contextlib.contextmanager
    def _turn(self, address: str, who: str) -> Iterator[None]:
        """One of this process's :data:`CHECKS_PER_ADDRESS` checks for ``address`` (waiting for it);
        ``who`` names it in a refusal."""
        with self._lock:
            gate, waiting = self._checking.get(address) or (threading.BoundedSemaphore(CHECKS_PER_ADDRESS), 0)
            self._checking[address] = (gate, waiting + 1)
        try:
            if not gate.acquire(timeout=CHECK_QUEUE_S):
                raise LimitReached(f"This server is checking many new API keys from {who}; try again shortly.",
                                   BUSY_RETRY_S)
            try:
                yield
            finally:
                gate.release()
        finally:
            with self._lock:
                gate, waiting = self._checking[address]
                if waiting == 1:
                    del self._checking[address]
                else:
                    self._checking[address] = (gate, waiting - 1)

    @contextlib.contextmanager
    def _place(self, space: str, digest: str, limit: int, refusal: LimitReached) -> Iterator[None]:
        if not limit:
            yield
            return
        if not self.store.acquire(space, digest, limit):
            raise refusal
        try:
            yield
        finally:
            self.store.release(space, digest)
