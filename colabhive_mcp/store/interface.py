"""What the worker processes of one instance share, as one interface: :class:`InstanceStore`.

Four kinds of state, each with its own verbs, so that no name means two things:

- *values*, under a space and a key, that expire (``get``, ``put``, ``add``, ``delete``): calls a
  retry may attach to, last good manifests. A full store lets the soonest to expire go;
- *marks*, that something single-use was used (``mark``): redeemed OAuth codes and the refresh
  tokens of each grant (by generation), client assertions, used confirmations. A mark is never let
  go before it expires: a store with no room for another refuses a new mark (and so the use), it
  never forgets one;
- *reservations*, at most so many under one key at once, each until its time is up or it is
  unreserved (``reserve``, ``unreserve``, ``next_free``): calls started per minute, keys checked per
  minute, rejected keys per address, billable calls per hour and day (lasting: no process's);
- *counts* of places held until released (``acquire``, ``release``): calls running, streams and
  waits held open. They are on every call's path.

:class:`colabhive_mcp.store.memory.MemoryStore` keeps them in one process (stdio, a single process);
:class:`colabhive_mcp.store.sqlite.SqliteStore` shares them between the processes of an instance. How the
latter does it is its own business: values and reservations in SQLite; counts in a table every
worker maps into memory (:mod:`colabhive_mcp.store.counts`, or its database when the table cannot be
made); and, to spare most reads a query, a second mapped table of when entries expire
(:mod:`colabhive_mcp.store.expiries`). Both mapped tables are :class:`colabhive_mcp.store.mapped.MappedFile`.

The instance has a fourth cross-process mechanism that is deliberately not part of this interface:
the cancel relay of the HTTP transport (:mod:`colabhive_mcp.transports.http.relay`), which drops
marker files that every worker looks for. It is a message to every worker, each of which must act on
it once, not state read under a key; only the transport needs it (a legacy cancellation reaching
another gunicorn worker than the call's), and the core never imports a transport.
"""

from __future__ import annotations

import enum
from typing import Any, Protocol


class Marked(enum.Enum):
    """What :meth:`InstanceStore.mark` did."""

    FIRST = "first"  # marked now: this is the first use
    AGAIN = "again"  # it was marked already: a second use
    FULL = "full"  # there is no room for another mark until some expire: refuse the use
    FAILED = "failed"  # the store cannot tell: refuse the use


class InstanceStore(Protocol):
    """The state the workers of an instance agree on. A store that cannot tell answers what refuses."""

    shared: bool  # whether other processes see what this store holds

    def get(self, space: str, key: str, failed: Any = None) -> Any:
        """The live value under ``key``, else ``None``; ``failed`` when the store cannot tell."""

    def put(self, space: str, key: str, value: Any, ttl: float) -> bool:
        """Store ``value`` (a JSON value, or bytes: kept as they are) under ``key`` for ``ttl`` seconds;
        whether it was stored."""

    def add(self, space: str, key: str, value: Any, ttl: float) -> bool:
        """Store ``value`` unless the key holds an unexpired one; whether it was stored."""

    def delete(self, space: str, key: str) -> None:
        """Forget the value under ``key``."""

    def mark(self, space: str, key: str, ttl: float, generation: int = 0) -> Marked:
        """Mark ``generation`` of ``key`` used (and every one before it), for ``ttl`` seconds from now,
        unless it is marked already. A new key needs room; a later generation of a key marked before
        takes its place."""

    def reserve(self, space: str, key: str, limit: int, ttl: float, lasting: bool = False) -> str | None:
        """One of at most ``limit`` reservations under ``key``, for ``ttl`` seconds unless unreserved
        sooner: its id, or ``None`` when all are taken. A reservation is its process's, freed when
        that process is gone, unless it is ``lasting`` (what was spent stays spent)."""

    def unreserve(self, space: str, key: str, reservation: str) -> None:
        """End ``reservation`` before its time is up."""

    def held(self, space: str, key: str) -> int:
        """How many reservations under ``key`` are live (when the store cannot tell: as many as any limit)."""

    def next_free(self, space: str, key: str, count: int = 1) -> float:
        """Seconds until ``count`` of the reservations under ``key`` have ended by themselves (0: now)."""

    def acquire(self, space: str, key: str, limit: int) -> bool:
        """One more place held under ``key``, unless ``limit`` are held; whether it was acquired."""

    def release(self, space: str, key: str) -> None:
        """Give back a place acquired under ``key``."""

    def close(self) -> None:
        """Let go of what the store holds open."""


class Counts(Protocol):
    """Places held under a key until released: the counts behind :meth:`InstanceStore.acquire`."""

    def acquire(self, space: str, key: str, limit: int) -> bool: ...

    def release(self, space: str, key: str) -> None: ...

    def close(self) -> None: ...


def per_minute_wait(store: InstanceStore, space: str, key: str, limit: int) -> float | None:
    """Count one more under ``key``, if fewer than ``limit`` were counted in the last minute (a
    ``limit`` of 0 counts nothing and refuses nothing): ``None`` when it is counted, else the
    seconds until the first of them leaves the minute."""
    if not limit or store.reserve(space, key, limit, 60.0) is not None:
        return None
    return store.next_free(space, key)
