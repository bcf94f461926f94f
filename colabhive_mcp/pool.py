"""The hosted mode's tenants: a thread-safe LRU of :class:`Tenant` objects keyed by key hash.

A tenant is only a warm cache (gateway session, manifest): any worker can rebuild it from the
request's key. Eviction never breaks a call in flight: a tenant is closed only once it is both
evicted and no longer used.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from typing import Callable, Iterator

from cachetools import LRUCache

from . import metrics
from .config import Config
from .logs import log
from .tenant import Tenant


class _Slot:
    """A pooled tenant with a count of requests using it."""

    def __init__(self, tenant: Tenant) -> None:
        self.tenant = tenant
        self.users = 0
        self.evicted = False


class _EvictingLRU(LRUCache):
    def __init__(self, maxsize: int, on_evict: Callable[[_Slot], None]) -> None:
        super().__init__(maxsize)
        self._on_evict = on_evict

    def popitem(self):  # type: ignore[override]
        key, slot = super().popitem()
        self._on_evict(slot)
        return key, slot


class TenantPool:
    """Tenants by SHA-256 of their key; at most ``size`` resident."""

    def __init__(self, config: Config, size: int | None = None,
                 factory: Callable[[Config, str], Tenant] = Tenant) -> None:
        self.config = config
        self.factory = factory
        self._lock = threading.Lock()
        self._slots: _EvictingLRU = _EvictingLRU(size or config.pool_size, self._evicted)

    def __len__(self) -> int:
        with self._lock:
            return len(self._slots)

    @contextlib.contextmanager
    def tenant(self, api_key: str) -> Iterator[Tenant]:
        """The key's tenant, held for the duration of the ``with`` block."""
        digest = hashlib.sha256(api_key.encode("utf-8")).hexdigest()
        with self._lock:
            slot = self._slots.get(digest)
            if slot is None:
                slot = _Slot(self.factory(self.config, api_key))
                self._slots[digest] = slot
                log.bind(tenant=slot.tenant.key_id, pool_size=len(self._slots)).info("pool.tenant_added")
                metrics.TENANTS.set(len(self._slots))
            slot.users += 1
        try:
            yield slot.tenant
        finally:
            with self._lock:
                slot.users -= 1
                close = slot.evicted and slot.users == 0
            if close:
                slot.tenant.close()

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
