"""The instance store: what the worker processes of one instance must agree on, with no external service.

A small SQLite database (WAL) in the instance's private runtime directory, file mode 0600, shared
by its workers; stdio and single-process servers keep the same things in memory. Values are JSON,
keyed by a space and a key, and expire. Beside them, *places*: at most so many held under one key
at once, each until it expires or goes with the process that held it (calls started per key in the
last minute, keys checked per minute); and ``counts``, the places held until given back (calls,
streams and waits per key), in shared memory (:mod:`colabhive_mcp.counts`). Reads of keys that no
live entry can be under skip the database (:mod:`colabhive_mcp.expiries`). Nothing of users' prompts
or results goes in: keys are hashes, values are ids and timestamps. A store that cannot be opened or
fails later is replaced by memory (per-worker behaviour), with one warning.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import sqlite3
import threading
import time
from typing import Any, Callable

from .counts import MemoryCounts, SharedCounts, alive, open_counts
from .expiries import open_expiries
from .logs import log

FILE_NAME = "instance.db"
PURGE_EVERY = 200  # writes between two sweeps of expired entries
TAKE_IF_ROOM = ("INSERT INTO places SELECT ?, ?, ?, ?, ? WHERE "
                "(SELECT COUNT(*) FROM places WHERE space = ? AND key = ? AND expires > ?) < ?")


class MemoryStore:
    """The store of one process."""

    def __init__(self, max_entries: int = 100_000, clock: Callable[[], float] = time.time) -> None:
        self.max_entries = max_entries
        self.clock = clock
        self._entries: dict[tuple[str, str], tuple[Any, float]] = {}
        self._places: dict[tuple[str, str], dict[str, float]] = {}  # place id -> when it expires
        self._lock = threading.Lock()
        self.counts: MemoryCounts | SharedCounts = MemoryCounts()

    def get(self, space: str, key: str) -> Any:
        with self._lock:
            found = self._entries.get((space, key))
            return found[0] if found is not None and found[1] > self.clock() else None

    def put(self, space: str, key: str, value: Any, ttl: float) -> None:
        with self._lock:
            self._make_room()
            self._entries[(space, key)] = (value, self.clock() + ttl)

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

    def take(self, space: str, key: str, limit: int, ttl: float) -> str | None:
        """One of at most ``limit`` places under ``key``, held until given back or ``ttl`` seconds
        pass: its id, or ``None`` when every place is held."""
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

    def give_back(self, space: str, key: str, place: str) -> None:
        with self._lock:
            held = self._places.get((space, key))
            if held is not None:
                held.pop(place, None)
                if not held:
                    del self._places[(space, key)]

    def next_free(self, space: str, key: str) -> float:
        """Seconds until the first place held under ``key`` expires (0: one is free)."""
        now = self.clock()
        with self._lock:
            return max(0.0, min(self._places.get((space, key), {}).values(), default=now) - now)

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


class SqliteStore:
    """The store shared by the processes of one instance: one SQLite file in its runtime directory."""

    def __init__(self, path: str, max_entries: int = 100_000, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self.max_entries = max_entries
        self.clock = clock
        self._lock = threading.Lock()
        self._pid = 0
        self._db: sqlite3.Connection | None = None
        self._writes = 0
        self._memory: MemoryStore | None = None  # after a failure: this process keeps things itself
        self._connect()
        self.counts = open_counts(os.path.dirname(path))
        self._expiries = open_expiries(os.path.dirname(path), self._last_expiry)

    def get(self, space: str, key: str) -> Any:
        expiries = self._expiries
        if expiries is not None and not expiries.may_hold(space, key, self.clock()):
            return None  # no entry under this key can be live: no query

        def read(db: sqlite3.Connection) -> Any:
            row = db.execute("SELECT value FROM entries WHERE space = ? AND key = ? AND expires > ?",
                             (space, key, self.clock())).fetchone()
            return json.loads(row[0]) if row else None

        return self._run(read, lambda memory: memory.get(space, key))

    def put(self, space: str, key: str, value: Any, ttl: float) -> None:
        expires = self._expect(space, key, self.clock() + ttl)
        self._statement("INSERT OR REPLACE INTO entries VALUES (?, ?, ?, ?)",
                        (space, key, json.dumps(value), expires), lambda memory: memory.put(space, key, value, ttl))

    def add(self, space: str, key: str, value: Any, ttl: float) -> bool:
        now = self.clock()
        expires = self._expect(space, key, now + ttl)

        def insert(db: sqlite3.Connection) -> bool:
            db.execute("DELETE FROM entries WHERE space = ? AND key = ? AND expires <= ?", (space, key, now))
            return db.execute("INSERT OR IGNORE INTO entries VALUES (?, ?, ?, ?)",
                              (space, key, json.dumps(value), expires)).rowcount == 1

        return bool(self._write(insert, lambda memory: memory.add(space, key, value, ttl)))

    def delete(self, space: str, key: str) -> None:
        self._statement("DELETE FROM entries WHERE space = ? AND key = ?", (space, key),
                        lambda memory: memory.delete(space, key))

    def take(self, space: str, key: str, limit: int, ttl: float) -> str | None:
        """:meth:`MemoryStore.take`, counted across the instance's processes (a dead one's places are
        free). One statement while there is room; only a full key is looked at more closely."""
        def room(db: sqlite3.Connection) -> str | None:
            place, now = secrets.token_hex(8), self.clock()
            try:
                taken = db.execute(TAKE_IF_ROOM, (space, key, place, os.getpid(), now + ttl,
                                                  space, key, now, limit)).rowcount == 1
            except sqlite3.OperationalError:  # another process wrote since the statement began: in a transaction
                return None
            return place if taken else None

        def insert(db: sqlite3.Connection) -> str | None:
            now = self.clock()
            db.execute("DELETE FROM places WHERE space = ? AND key = ? AND expires <= ?", (space, key, now))
            holders = dict(db.execute("SELECT pid, COUNT(*) FROM places WHERE space = ? AND key = ? GROUP BY pid",
                                      (space, key)).fetchall())
            if sum(holders.values()) >= limit:
                dead = [pid for pid in holders if not alive(pid)]
                db.executemany("DELETE FROM places WHERE space = ? AND key = ? AND pid = ?",
                               [(space, key, pid) for pid in dead])
                if sum(holders.values()) - sum(holders[pid] for pid in dead) >= limit:
                    return None
            place = secrets.token_hex(8)
            db.execute("INSERT INTO places VALUES (?, ?, ?, ?, ?)", (space, key, place, os.getpid(), now + ttl))
            return place

        def instead(memory: MemoryStore) -> str | None:
            return memory.take(space, key, limit, ttl)

        return self._write(room, instead, atomic=False) or self._write(insert, instead)

    def give_back(self, space: str, key: str, place: str) -> None:
        self._statement("DELETE FROM places WHERE space = ? AND key = ? AND place = ?", (space, key, place),
                        lambda memory: memory.give_back(space, key, place))

    def next_free(self, space: str, key: str) -> float:
        def soonest(db: sqlite3.Connection) -> float:
            (expires,) = db.execute("SELECT MIN(expires) FROM places WHERE space = ? AND key = ?",
                                    (space, key)).fetchone()
            return 0.0 if expires is None else max(0.0, expires - self.clock())

        return self._run(soonest, lambda memory: memory.next_free(space, key))

    def close(self) -> None:
        with self._lock:
            if self._db is not None and self._pid == os.getpid():
                self._db.close()
            self._db = None
        self.counts.close()
        if self._expiries is not None:
            self._expiries.close()

    # -- plumbing ---------------------------------------------------------------------------------

    def _expect(self, space: str, key: str, expires: float) -> float:
        """An entry is about to be written under ``key``, live until ``expires`` (returned): reads of
        its key must look for it from now on."""
        expiries = self._expiries
        if expiries is not None:
            try:
                expiries.extend(space, key, expires)
            except OSError as exc:  # reads can no longer trust the expiries: every read queries
                log.bind(path=expiries.path, error=str(exc)).warning("expiries.failed")
                self._expiries = None
        return expires

    def _last_expiry(self) -> float:
        """When the last entry stored now expires (fresh expiries start there)."""
        def last(db: sqlite3.Connection) -> float:
            return db.execute("SELECT MAX(expires) FROM entries").fetchone()[0] or 0.0

        return self._run(last, lambda memory: math.inf)

    def _connect(self) -> sqlite3.Connection:
        """This process's connection (a forked worker opens its own)."""
        if self._db is None or self._pid != os.getpid():
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            os.close(fd)
            db = sqlite3.connect(self.path, timeout=5.0, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("CREATE TABLE IF NOT EXISTS entries (space TEXT NOT NULL, key TEXT NOT NULL, "
                       "value TEXT NOT NULL, expires REAL NOT NULL, PRIMARY KEY (space, key))")
            db.execute("CREATE TABLE IF NOT EXISTS places (space TEXT NOT NULL, key TEXT NOT NULL, "
                       "place TEXT NOT NULL, pid INTEGER NOT NULL, expires REAL NOT NULL, "
                       "PRIMARY KEY (space, key, place))")
            self._db, self._pid = db, os.getpid()
        return self._db

    def _write(self, action: Callable[[sqlite3.Connection], Any], instead: Callable[[MemoryStore], Any], *,
               atomic: bool = True) -> Any:
        """Run ``action`` (in one transaction when ``atomic``; a single statement needs none), and
        now and then sweep what expired."""
        def write(db: sqlite3.Connection) -> Any:
            if atomic:
                db.execute("BEGIN IMMEDIATE")
            try:
                done = action(db)
                self._writes += 1
                if self._writes % PURGE_EVERY == 0:
                    self._sweep(db)  # its failure is not this write's
                if atomic:
                    db.execute("COMMIT")
            except BaseException:
                if atomic:
                    db.execute("ROLLBACK")
                raise
            return done

        return self._run(write, instead)

    def _statement(self, sql: str, parameters: tuple[Any, ...], instead: Callable[[MemoryStore], Any]) -> None:
        self._write(lambda db: db.execute(sql, parameters), instead, atomic=False)

    def _sweep(self, db: sqlite3.Connection) -> None:
        """Expired entries go; past ``max_entries``, the soonest to expire go too (or next time, when
        the database is busy now: the write that triggered the sweep has already happened)."""
        try:
            self._purge(db)
        except sqlite3.Error as exc:
            log.bind(path=self.path, error=str(exc)).warning("store.sweep_failed")

    def _purge(self, db: sqlite3.Connection) -> None:
        db.execute("DELETE FROM entries WHERE expires <= ?", (self.clock(),))
        db.execute("DELETE FROM places WHERE expires <= ?", (self.clock(),))
        (count,) = db.execute("SELECT COUNT(*) FROM entries").fetchone()
        if count > self.max_entries:
            db.execute("DELETE FROM entries WHERE rowid IN (SELECT rowid FROM entries ORDER BY expires LIMIT ?)",
                       (count - self.max_entries,))

    def _run(self, action: Callable[[sqlite3.Connection], Any], instead: Callable[[MemoryStore], Any]) -> Any:
        with self._lock:
            if self._memory is None:
                try:
                    return action(self._connect())
                except (sqlite3.Error, OSError, ValueError) as exc:
                    log.bind(path=self.path, error=str(exc)).warning("store.failed")
                    self._memory = MemoryStore(self.max_entries, self.clock)
            memory = self._memory
        return instead(memory)


def open_store(directory: str | None, max_entries: int = 100_000) -> MemoryStore | SqliteStore:
    """The instance's store in ``directory``; without one (stdio, a single process), memory."""
    if not directory:
        return MemoryStore(max_entries)
    path = os.path.join(directory, FILE_NAME)
    try:
        return SqliteStore(path, max_entries)
    except (sqlite3.Error, OSError) as exc:
        log.bind(path=path, error=str(exc)).warning("store.unavailable")
        return MemoryStore(max_entries)
