"""The hosted mode's tenants: a thread-safe LRU of :class:`Tenant` objects keyed by key hash.

A tenant is only a warm cache (gateway session, manifest): any worker can rebuild it from the
request's key. A key enters the pool only once the gateway has said yes to it (a gateway that
cannot say is :class:`LimitReached`, and admits nobody), so made-up keys never evict real
tenants; a rejected key is remembered for ``rejected_key_ttl`` seconds and refused without asking
the gateway again. A key the instance has not seen is checked within the new-key budgets
(:meth:`Limits.new_key`: per client address, per instance); one the gateway accepted is remembered
for ``accepted_key_ttl`` (as its hash, in the instance store, across restarts) and comes back
without them. A request waiting for the gateway's word on a key holds one of the pool's
:class:`KeyCheckPlaces` meanwhile (an HTTP worker's places for long requests), so a slow gateway
cannot make such waits take every thread. Eviction never breaks a call in flight: a tenant is
closed only once it is both evicted and no longer used.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Callable, Iterator, Protocol

from cachetools import LRUCache

from .. import metrics
from ..keys import ApiKey, KeyRejected
from ..logs import log
from ..settings.config import Config
from ..store.interface import InstanceStore
from ..store.memory import MemoryStore
from .limits import LimitReached, Limits, Quotas
from .tenant import Tenant

REJECTED = "rejected"  # key digest -> the gateway's refusal, for rejected_key_ttl seconds
ACCEPTED = "accepted"  # key digest -> the gateway accepted it, for accepted_key_ttl seconds
RECHECK_S = 1.0


class _Slot:
    """A pooled tenant with a count of requests using it."""

    def __init__(self, tenant: Tenant) -> None:
        self.tenant = tenant
        self.users = 0
        self.evicted = False
        self.checked = time.monotonic()  # when the instance's rejected keys were last looked at for it


class _KeyCheck:
    """A new key being checked with the gateway; requests for the same key wait for its verdict."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.slot: _Slot | None = None
        self.failure: KeyRejected | LimitReached | None = None  # the gateway's no, or why it could not say


class KeyCheckPlaces(Protocol):
    """Places for requests waiting for the gateway's word on a key (an HTTP worker's threads): each
    raises :class:`LimitReached` when none is free."""

    def by_address(self, address: str) -> contextlib.AbstractContextManager[None]:
        """For a key the instance has never accepted, sent from ``address``."""

    def by_key(self, digest: str) -> contextlib.AbstractContextManager[None]:
        """For a key the instance accepted before."""


class _Unbounded:
    """As many places as there are requests (stdio, and a pool of its own)."""

    def by_address(self, address: str) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def by_key(self, digest: str) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()


class _EvictingLRU(LRUCache):
    def __init__(self, maxsize: int, on_evict: Callable[[_Slot], None]) -> None:
        super().__init__(maxsize)
        self._on_evict = on_evict

    def popitem(self) -> tuple[str, _Slot]:
        key, slot = super().popitem()
        self._on_evict(slot)
        return key, slot


class TenantPool:
    """Tenants by SHA-256 of their key; at most ``size`` resident."""

    def __init__(self, config: Config, size: int | None = None,
                 factory: Callable[[Config, ApiKey], Tenant] = Tenant, store: InstanceStore | None = None,
                 limits: Limits | None = None, places: KeyCheckPlaces | None = None) -> None:
        """``store``: where the gateway's verdicts on keys are remembered, ``limits``: where keys
        checked are counted (the instance's, so every worker knows), ``places``: what a request holds
        while it waits for the gateway's word on a new key (none by default)."""
        self.config = config
        self.factory = factory
        self.store = store or MemoryStore()
        self.limits = limits or Limits(Quotas.of(config), self.store)
        self._lock = threading.Lock()
        self._slots: _EvictingLRU = _EvictingLRU(size or config.pool_size, self._evicted)
        self._key_checks: dict[str, _KeyCheck] = {}
        self.places: KeyCheckPlaces = places or _Unbounded()

    def __len__(self) -> int:
        with self._lock:
            return len(self._slots)

    @contextlib.contextmanager
    def tenant(self, key: ApiKey, address: str = "") -> Iterator[Tenant]:
        """The key's tenant, held for the duration of the ``with`` block; ``address``: the client's,
        as the new-key budgets count it. Raises :class:`KeyRejected` for a key the gateway refused
        (now, or a short while ago), and :class:`LimitReached` when a new key cannot be checked now."""
        digest = key.digest
        slot = self._take(digest, key, address)
        try:
            yield slot.tenant
        finally:
            with self._lock:
                slot.users -= 1
                rejected = slot.tenant.rejection
                if rejected is not None:  # the key stopped working: refuse it from memory from now on
                    self._drop(digest, slot)
                close = slot.evicted and slot.users == 0
            if rejected is not None:
                self._remember(digest, rejected)
            if close:
                slot.tenant.close()

    def refusal(self, key: ApiKey) -> KeyRejected | None:
        """The gateway's refusal of ``key`` when it rejected the key lately (asks nobody)."""
        rejected = self.store.get(REJECTED, key.digest)
        return None if rejected is None else KeyRejected(rejected["status"], rejected["detail"])

    def _drop(self, digest: str, slot: _Slot) -> None:
        """Called under the lock: the slot leaves the pool (closed once its last user is done)."""
        if self._slots.get(digest) is slot:
            del self._slots[digest]
            slot.evicted = True
            metrics.TENANTS.set(len(self._slots))

    def _take(self, digest: str, key: ApiKey, address: str) -> _Slot:
        """The resident slot (one more user), or a new one once the gateway accepts the key. The
        instance's rejected keys are looked at for a new key, and at most every ``RECHECK_S`` for a
        resident one (another worker may have seen its key rejected)."""
        with self._lock:
            slot = self._slots.get(digest)
            if slot is not None and time.monotonic() - slot.checked < RECHECK_S:
                slot.users += 1
                return slot
        rejected = self.refusal(key)
        if rejected is not None:
            self._evict(digest)
            raise rejected
        return self._verdict(digest, key, address)

    def _in_use(self, digest: str) -> _Slot | None:
        """Called under the lock: the resident slot, marked checked now and with one more user; ``None``
        when there is none."""
        slot = self._slots.get(digest)
        if slot is not None:
            slot.checked = time.monotonic()
            slot.users += 1
        return slot

    def _verdict(self, digest: str, key: ApiKey, address: str) -> _Slot:
        """A slot for a key that has none: this request asks the gateway, or waits for the request
        that does (and looks again once the gateway has said yes), in one of the ``places``."""
        with contextlib.ExitStack() as place:
            while True:
                known = self.store.get(ACCEPTED, digest) is not None
                with self._lock:
                    slot = self._in_use(digest)
                    if slot is not None:
                        return slot
                    waiting = self._key_checks.get(digest)
                    if waiting is None:  # (a refused place leaves no check behind for others to wait on)
                        place.enter_context(self._place(digest, address, known))
                        check = self._key_checks[digest] = _KeyCheck()
                        break
                with self._place(digest, address, known):
                    waiting.done.wait()
                if waiting.failure is not None:
                    raise waiting.failure
            return self._check(digest, key, address, known, check)

    def _place(self, digest: str, address: str, known: bool) -> contextlib.AbstractContextManager[None]:
        """A place to wait for the gateway's word: by key for a key the instance accepted before, else by
        the sender's address (made-up keys are free to make: each must not bring a share of its own)."""
        return self.places.by_key(digest) if known else self.places.by_address(address)

    def _evict(self, digest: str) -> None:
        """A rejected key's slot goes (its tenant closed now, when no request uses it)."""
        with self._lock:
            slot = self._slots.get(digest)
            if slot is None:
                return
            idle = slot.users == 0
            self._drop(digest, slot)
        if idle:
            slot.tenant.close()

    def _check(self, digest: str, key: ApiKey, address: str, known: bool, check: _KeyCheck) -> _Slot:
        """Ask the gateway about a new key (``check`` tells the requests waiting for the verdict)."""
        try:
            check.slot = slot = self._admit(key, address, known)
        except KeyRejected as exc:
            check.failure = exc
            self._remember(digest, exc)
            raise
        except LimitReached as exc:
            check.failure = exc
            raise
        finally:
            with self._lock:
                del self._key_checks[digest]
                if check.slot is not None:
                    check.slot.users += 1
                    self._slots[digest] = check.slot
                    log.bind(tenant=check.slot.tenant.key_id, pool_size=len(self._slots)).info("pool.tenant_added")
                    metrics.TENANTS.set(len(self._slots))
            check.done.set()
        return slot

    def _remember(self, digest: str, rejected: KeyRejected) -> None:
        self.store.delete(ACCEPTED, digest)
        if self.config.rejected_key_ttl:
            self.store.put(REJECTED, digest, {"status": rejected.status, "detail": rejected.detail},
                           self.config.rejected_key_ttl)

    def _admit(self, key: ApiKey, address: str, known: bool) -> _Slot:
        """A tenant for ``key`` once the gateway says yes: at once for a key it accepted before
        (``known``), else within the new-key budgets."""
        if known:
            return self._verified(key, known)
        with self.limits.new_key(address):
            return self._verified(key, known)

    def _verified(self, key: ApiKey, known: bool) -> _Slot:
        tenant = self.factory(self.config, key)
        try:
            tenant.verify(vouched=known)  # (a key no worker accepted yet has no copy another worker got)
        except BaseException:
            tenant.close()
            raise
        if self.config.accepted_key_ttl:
            self.store.put(ACCEPTED, key.digest, True, self.config.accepted_key_ttl)
        return _Slot(tenant)

    def _evicted(self, slot: _Slot) -> None:
        """Called under the lock by the LRU when it drops ``slot``."""
        slot.evicted = True
        log.bind(tenant=slot.tenant.key_id, pool_size=len(self._slots), in_use=slot.users).info("pool.tenant_evicted")
        metrics.TENANTS.set(len(self._slots))
        if slot.users == 0:
            slot.tenant.close()

    def close(self) -> None:
        """Evict everything: idle tenants close now, busy ones when their last call ends."""
        with self._lock:
            while self._slots:
                self._slots.popitem()
