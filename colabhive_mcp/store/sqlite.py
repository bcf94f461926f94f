"""The instance store: what the worker processes of one instance must agree on, with no external service.

A small SQLite database (WAL) in the instance's private runtime directory, file mode 0600, shared
by its workers; stdio and single-process servers keep the same things in memory. Values are JSON,
keyed by a space and a key, and expire. Beside them, *places*: at most so many held under one key
at once, each until it expires or goes with the process that held it (calls started per key in the
last minute, keys checked per minute), taken by ``reserve``; and counts, the places held until
released (calls, streams and waits per key), in shared memory (:mod:`colabhive_mcp.store.counts`). What
the two stores offer is :class:`colabhive_mcp.store.interface.InstanceStore`. Reads of keys that no live
entry can be under skip the database (:mod:`colabhive_mcp.store.expiries`). Nothing of users' prompts or
results goes in: keys are hashes, values are ids and timestamps.

The store fails closed, never over to a worker's own memory (where a confirmation used on one
worker could be used again on another, and each worker would count limits of its own). An
operation that fails is tried again on a fresh connection a few times; a database found corrupt is
moved aside (``instance.db.corrupt-<time>``) by the first worker to find out, and a fresh one made.
What still fails answers what refuses: ``add`` says the key is taken, ``mark`` says it failed
(its callers refuse the use and say why), ``reserve`` and ``acquire`` refuse the place, ``put`` says nothing was stored, and ``get`` answers
``failed`` (by default nothing, which is what refuses for every reader but one: a session's end,
whose reader passes what an ended session looks like). One warning per failure, until the store works again.

The runtime directory (:mod:`colabhive_mcp.store.runtime_dir`) and the files in it are trusted only when
they are this user's alone; a directory that cannot be used stops the start (:func:`open_store`):
split state is not an option for a server of several workers. In one process (stdio), the same
things are kept in memory (:class:`colabhive_mcp.store.memory.MemoryStore`).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import secrets
import sqlite3
import sys
import threading
import time
from typing import Any, Callable

from ..logs import log
from ..settings.config import ConfigError
from .corrupt import SIDE_FILES, corrupt, set_aside
from .counts import PlacesCounts, alive, open_counts
from .expiries import open_expiries
from .interface import Counts, InstanceStore, Marked
from .mapped import check_private, open_private
from .memory import MemoryStore
from .runtime_dir import check_runtime_dir

FILE_NAME = "instance.db"
PURGE_EVERY = 200  # writes between two sweeps of expired entries
BUSY_TIMEOUT_S = 5.0  # how long one attempt waits for another process's lock
ATTEMPTS = 3  # of a failing operation, each on a fresh connection (one only while the store fails)
RETRY_S = 0.05  # the wait before the second attempt, doubled before each next one
WAIT_WHEN_FAILED_S = 5.0  # what next_free answers when the store cannot tell
HELD_WHEN_FAILED = sys.maxsize  # what held answers then: more than any limit
RESERVE_IF_ROOM = ("INSERT INTO places SELECT ?, ?, ?, ?, ? WHERE "
                   "(SELECT COUNT(*) FROM places WHERE space = ? AND key = ? AND expires > ?) < ?")


class SqliteStore:
    """The store shared by the processes of one instance: one SQLite file in its runtime directory."""

    shared = True

    def __init__(self, path: str, max_entries: int = 100_000, clock: Callable[[], float] = time.time,
                 mapped: bool = True) -> None:
        """Raises ``sqlite3.Error`` or ``OSError`` when the file cannot be used (one that is not a
        database is moved aside first). Not ``mapped``: without the two tables mapped beside it (a
        store of reservations alone, such as what keys spent, which they would not speed up)."""
        self.path = path
        self.max_entries = max_entries
        self.clock = clock
        self._lock = threading.Lock()
        self._pid = 0
        self._db: sqlite3.Connection | None = None
        self._file = (0, 0)  # the device and inode the connection has open
        self._writes = 0
        self._failing = False  # an operation failed every attempt: warned once, until one succeeds
        try:
            self._connect()
        except sqlite3.DatabaseError as exc:
            self._recover(exc)
            self._connect()
        directory = os.path.dirname(path)
        self._counts: Counts = (open_counts(directory) if mapped else None) or PlacesCounts(self)
        self._expiries = open_expiries(directory, self._last_expiry) if mapped else None

    def get(self, space: str, key: str, failed: Any = None) -> Any:
        """The live value under ``key``, else ``None``; ``failed`` when the store cannot tell (a
        reader to whom nothing stored grants something passes what refuses)."""
        expiries = self._expiries
        if expiries is not None and not expiries.may_hold(space, key, self.clock()):
            return None  # no entry under this key can be live: no query

        def read(db: sqlite3.Connection) -> Any:
            row = db.execute("SELECT value FROM entries WHERE space = ? AND key = ? AND expires > ?",
                             (space, key, self.clock())).fetchone()
            return _decoded(row[0]) if row else None

        return self._run(read, failed)

    def put(self, space: str, key: str, value: Any, ttl: float) -> bool:
        expires = self._expect(space, key, self.clock() + ttl)
        return self._statement("INSERT OR REPLACE INTO entries VALUES (?, ?, ?, ?)",
                               (space, key, _encoded(value), expires))

    def add(self, space: str, key: str, value: Any, ttl: float) -> bool:
        """:meth:`MemoryStore.add`; ``False`` too when the store fails (the key may be taken)."""
        now = self.clock()
        expires = self._expect(space, key, now + ttl)

        def insert(db: sqlite3.Connection) -> bool:
            db.execute("DELETE FROM entries WHERE space = ? AND key = ? AND expires <= ?", (space, key, now))
            return db.execute("INSERT OR IGNORE INTO entries VALUES (?, ?, ?, ?)",
                              (space, key, _encoded(value), expires)).rowcount == 1

        return bool(self._write(insert, False))

    def mark(self, space: str, key: str, ttl: float, generation: int = 0) -> Marked:
        """:meth:`MemoryStore.mark`, across the instance's processes (``FAILED`` when the store fails).
        Marks have a table of their own, which the sweep empties of expired marks only."""
        def insert(db: sqlite3.Connection) -> Marked:
            now = self.clock()
            found = db.execute("SELECT used FROM marks WHERE space = ? AND key = ? AND expires > ?",
                               (space, key, now)).fetchone()
            if found is not None and found[0] >= generation:
                return Marked.AGAIN
            if found is None and self._marks_full(db):
                db.execute("DELETE FROM marks WHERE expires <= ?", (now,))
                if self._marks_full(db):
                    return Marked.FULL
            db.execute("INSERT OR REPLACE INTO marks VALUES (?, ?, ?, ?)", (space, key, generation, now + ttl))
            return Marked.FIRST

        return self._write(insert, Marked.FAILED)

    def _marks_full(self, db: sqlite3.Connection) -> bool:
        return db.execute("SELECT COUNT(*) FROM marks").fetchone()[0] >= self.max_entries

    def delete(self, space: str, key: str) -> None:
        self._statement("DELETE FROM entries WHERE space = ? AND key = ?", (space, key))

    def reserve(self, space: str, key: str, limit: int, ttl: float, lasting: bool = False) -> str | None:
        """:meth:`MemoryStore.reserve`, counted across the instance's processes (a dead one's places are
        free, unless they are ``lasting``: no process's, pid 0; ``None`` too when the store fails). One
        statement while there is room; only a full key is looked at more closely."""
        holder = 0 if lasting else os.getpid()

        def room(db: sqlite3.Connection) -> str | None:
            place, now = secrets.token_hex(8), self.clock()
            try:
                taken = db.execute(RESERVE_IF_ROOM, (space, key, place, holder, now + ttl,
                                                  space, key, now, limit)).rowcount == 1
            except sqlite3.OperationalError as exc:
                if exc.sqlite_errorcode != sqlite3.SQLITE_BUSY_SNAPSHOT:
                    raise
                return None  # another process wrote since the statement began: in a transaction
            return place if taken else None

        def insert(db: sqlite3.Connection) -> str | None:
            now = self.clock()
            db.execute("DELETE FROM places WHERE space = ? AND key = ? AND expires <= ?", (space, key, now))
            holders = dict(db.execute("SELECT pid, COUNT(*) FROM places WHERE space = ? AND key = ? GROUP BY pid",
                                      (space, key)).fetchall())
            if sum(holders.values()) >= limit:
                dead = [pid for pid in holders if pid and not alive(pid)]
                db.executemany("DELETE FROM places WHERE space = ? AND key = ? AND pid = ?",
                               [(space, key, pid) for pid in dead])
                if sum(holders.values()) - sum(holders[pid] for pid in dead) >= limit:
                    return None
            place = secrets.token_hex(8)
            db.execute("INSERT INTO places VALUES (?, ?, ?, ?, ?)", (space, key, place, holder, now + ttl))
            return place

        return self._write(room, None, atomic=False) or self._write(insert, None)

    def unreserve(self, space: str, key: str, reservation: str) -> None:
        self._statement("DELETE FROM places WHERE space = ? AND key = ? AND place = ?", (space, key, reservation))

    def held(self, space: str, key: str) -> int:
        """:meth:`MemoryStore.held`, across the instance's processes (a dead one's places still count
        until they expire; :data:`HELD_WHEN_FAILED` when the store fails)."""
        def count(db: sqlite3.Connection) -> int:
            return int(db.execute("SELECT COUNT(*) FROM places WHERE space = ? AND key = ? AND expires > ?",
                                  (space, key, self.clock())).fetchone()[0])

        return int(self._run(count, HELD_WHEN_FAILED))

    def next_free(self, space: str, key: str, count: int = 1) -> float:
        def soonest(db: sqlite3.Connection) -> float:
            now = self.clock()
            ends = db.execute("SELECT expires FROM places WHERE space = ? AND key = ? AND expires > ? ORDER BY expires "
                              "LIMIT ?", (space, key, now, max(1, count))).fetchall()
            return max(0.0, ends[-1][0] - now) if ends else 0.0

        return self._run(soonest, WAIT_WHEN_FAILED_S)

    def acquire(self, space: str, key: str, limit: int) -> bool:
        """:meth:`MemoryStore.acquire`, counted across the instance's processes (refused while the
        counts fail)."""
        return self._counts.acquire(space, key, limit)

    def release(self, space: str, key: str) -> None:
        self._counts.release(space, key)

    def close(self) -> None:
        with self._lock:
            self._disconnect()
        self._counts.close()
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
        """When the last entry stored now expires (fresh expiries start there; unknown: never)."""
        def last(db: sqlite3.Connection) -> float:
            return db.execute("SELECT MAX(expires) FROM entries").fetchone()[0] or 0.0

        return self._run(last, math.inf)

    def _connect(self) -> sqlite3.Connection:
        """This process's connection (a forked worker opens its own; a file moved aside is let go)."""
        if self._db is not None and self._pid == os.getpid() and self._same_file():
            return self._db
        self._disconnect()
        fd = open_private(self.path)
        try:
            found = os.fstat(fd)
        finally:
            os.close(fd)
        for side in SIDE_FILES:  # SQLite opens them itself, through links: they must be ours too
            with contextlib.suppress(FileNotFoundError):
                check_private(self.path + side, os.lstat(self.path + side))
        db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("CREATE TABLE IF NOT EXISTS entries (space TEXT NOT NULL, key TEXT NOT NULL, "
                       "value TEXT NOT NULL, expires REAL NOT NULL, PRIMARY KEY (space, key))")
            db.execute("CREATE TABLE IF NOT EXISTS marks (space TEXT NOT NULL, key TEXT NOT NULL, "
                       "used INTEGER NOT NULL, expires REAL NOT NULL, PRIMARY KEY (space, key))")
            db.execute("CREATE TABLE IF NOT EXISTS places (space TEXT NOT NULL, key TEXT NOT NULL, "
                       "place TEXT NOT NULL, pid INTEGER NOT NULL, expires REAL NOT NULL, "
                       "PRIMARY KEY (space, key, place))")
        except BaseException:
            db.close()
            raise
        self._db, self._pid, self._file = db, os.getpid(), (found.st_dev, found.st_ino)
        return db

    def _same_file(self) -> bool:
        """Whether the path still names the file the connection has open (not one moved aside)."""
        try:
            found = os.lstat(self.path)
        except FileNotFoundError:
            return False
        return (found.st_dev, found.st_ino) == self._file

    def _disconnect(self) -> None:
        if self._db is not None and self._pid == os.getpid():  # (a forked worker's was its parent's)
            with contextlib.suppress(sqlite3.Error):
                self._db.close()
        self._db = None

    def _recover(self, error: Exception) -> None:
        """After ``error``: a fresh connection next time, to a fresh file when this one is corrupt."""
        self._disconnect()
        if corrupt(error):
            set_aside(self.path, BUSY_TIMEOUT_S)

    def _write(self, action: Callable[[sqlite3.Connection], Any], failed: Any, *, atomic: bool = True) -> Any:
        """Run ``action`` (in one transaction when ``atomic``; a single statement needs none), and
        now and then sweep what expired; ``failed`` when it cannot be done."""
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
                    with contextlib.suppress(sqlite3.Error):  # (the connection may be what failed)
                        db.execute("ROLLBACK")
                raise
            return done

        return self._run(write, failed)

    def _statement(self, sql: str, parameters: tuple[Any, ...]) -> bool:
        """Run one statement; whether it ran."""
        def run(db: sqlite3.Connection) -> bool:
            db.execute(sql, parameters)
            return True

        return self._write(run, False, atomic=False)

    def _sweep(self, db: sqlite3.Connection) -> None:
        """Expired entries, places and marks go; past ``max_entries``, the entries soonest to expire go
        too, never a live mark (or next time, when
        the database is busy now: the write that triggered the sweep has already happened)."""
        try:
            self._purge(db)
        except sqlite3.Error as exc:
            log.bind(path=self.path, error=str(exc)).warning("store.sweep_failed")

    def _purge(self, db: sqlite3.Connection) -> None:
        db.execute("DELETE FROM entries WHERE expires <= ?", (self.clock(),))
        db.execute("DELETE FROM places WHERE expires <= ?", (self.clock(),))
        db.execute("DELETE FROM marks WHERE expires <= ?", (self.clock(),))
        (count,) = db.execute("SELECT COUNT(*) FROM entries").fetchone()
        if count > self.max_entries:
            db.execute("DELETE FROM entries WHERE rowid IN (SELECT rowid FROM entries ORDER BY expires LIMIT ?)",
                       (count - self.max_entries,))

    def _run(self, action: Callable[[sqlite3.Connection], Any], failed: Any) -> Any:
        """``action`` on this process's connection, tried again on a fresh one when it fails; ``failed``
        when no attempt succeeds (one warning, until an operation succeeds again)."""
        with self._lock:
            for attempt in range(1 if self._failing else ATTEMPTS):
                if attempt:
                    time.sleep(RETRY_S * 2 ** (attempt - 1))
                try:
                    done = action(self._connect())
                except (sqlite3.Error, OSError, ValueError) as exc:
                    error = exc
                    self._recover(exc)
                    continue
                if self._failing:
                    log.bind(path=self.path).info("store.recovered")
                    self._failing = False
                return done
            if not self._failing:
                log.bind(path=self.path, error=str(error)).warning("store.failed")
                self._failing = True
            return failed


def open_store(directory: str | None, max_entries: int = 100_000, mapped: bool = True) -> InstanceStore:
    """The instance's store in ``directory``; without one (stdio, a single process), memory. Raises
    :class:`ConfigError` when the directory or the store in it cannot be used. ``mapped``: see
    :class:`SqliteStore`."""
    if not directory:
        return MemoryStore(max_entries)
    check_runtime_dir(directory)
    path = os.path.join(directory, FILE_NAME)
    try:
        return SqliteStore(path, max_entries, mapped=mapped)
    except (sqlite3.Error, OSError) as exc:
        raise ConfigError(f"the instance store {path} cannot be used: {exc}") from None


def _encoded(value: Any) -> str | bytes:
    """A value as the table holds it: bytes as they are (a blob), anything else as JSON (text)."""
    return value if isinstance(value, bytes) else json.dumps(value)


def _decoded(held: str | bytes) -> Any:
    return held if isinstance(held, bytes) else json.loads(held)

