"""Counts that the processes of one instance share: how many calls, streams and waits a key holds.

Every tool call acquires a place under its key and releases it, so this is on the hot path: no
database. The counts are rows of a table in a file of the instance's private runtime directory
(mode 0600) that every worker maps into memory; acquiring or releasing a place reads and writes a
few of them under a file lock. A row holds one process's count under one key, and counts only
while that process lives (its pid, and its start time where ``/proc`` tells it), so the places of a
worker that dies are free again. stdio and a single process count in memory.

A limit is never split between workers: when the file cannot be made (its filesystem is full), the
instance store counts in its database instead (:class:`PlacesCounts`); when it
fails later (cut short and its filesystem full), every place is refused until it works again.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import struct
import threading
from typing import Iterator

from ..logs import log
from .interface import InstanceStore
from .mapped import MappedFile

COUNTED = "counted-"  # the spaces of counts kept as reservations (PlacesCounts)
HELD_S = 86400.0  # how long such a place lasts at most, when its process neither releases it nor dies

FILE_NAME = "counts.bin"
ROWS = 65_536  # far more than the threads of any instance: held places never fill the table
ROW = struct.Struct("<16sIIQ")  # the key's digest, the pid, its count, the process's start time
HEADER = struct.Struct("<16sII")  # the format's name, the rows, how many rows were ever used
MAGIC = b"colabhive-counts"
EMPTY = bytes(16)  # the digest of a row never used: a key's rows end at the first one
SIZE = ROW.size * (ROWS + 1)  # the header takes the first row's room


class MemoryCounts:
    """The counts of one process."""

    def __init__(self) -> None:
        self._counts: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def acquire(self, space: str, key: str, limit: int) -> bool:
        """One more place under ``key``, unless ``limit`` are held; whether it was acquired."""
        with self._lock:
            held = self._counts.get((space, key), 0)
            if held >= limit:
                return False
            self._counts[(space, key)] = held + 1
            return True

    def release(self, space: str, key: str) -> None:
        with self._lock:
            held = self._counts.pop((space, key), 0) - 1
            if held > 0:
                self._counts[(space, key)] = held

    def close(self) -> None:
        pass


class SharedCounts(MappedFile):
    """The counts of every process of an instance, in ``path`` (an open-addressed table of rows)."""

    def __init__(self, path: str) -> None:
        self._start = 0  # this process's start time, which its rows carry
        self._failing = False  # the file failed: warned once, until it works again
        super().__init__(path, SIZE)

    def acquire(self, space: str, key: str, limit: int) -> bool:
        """One more place under ``key``, unless ``limit`` are held across the instance; whether it
        was acquired (not while the file fails: the most restrictive answer)."""
        try:
            with self._locked() as table:
                acquired = self._acquire(table, _digest(space, key), limit)
        except OSError as exc:
            self._failed(exc)
            return False
        if self._failing:
            log.bind(path=self.path).info("counts.recovered")
            self._failing = False
        return acquired

    def release(self, space: str, key: str) -> None:
        try:
            with self._locked() as table:
                own = self._rows_of(table, _digest(space, key))[0]
                if own is not None:
                    self._add(table, own, -1)
        except OSError as exc:  # the file was laid out afresh or is gone: the place went with it
            self._failed(exc)

    def _failed(self, exc: OSError) -> None:
        if not self._failing:
            log.bind(path=self.path, error=str(exc)).warning("counts.failed")
            self._failing = True

    # -- the table ------------------------------------------------------------------------------

    def _acquire(self, table: mmap.mmap, digest: bytes, limit: int) -> bool:
        own, spare, held, others = self._rows_of(table, digest)
        if held >= limit:
            held -= self._free_the_dead(table, others)
            if held >= limit:
                return False
        if own is None:
            own = self._claim(table, digest, spare)
            if own is None:  # cannot happen while the table is larger than the threads that hold places
                log.bind(path=self.path).warning("counts.full")
                return True
        self._add(table, own, 1)
        return True

    def _rows_of(self, table: mmap.mmap, digest: bytes) -> tuple[int | None, int | None, int, list[int]]:
        """The rows of ``digest`` (from its home row to the first never-used row): this process's
        row, a row free for reuse, the count held under ``digest``, and the other processes' rows
        that hold places (an earlier process with this pid is one of them: its start time differs)."""
        own: int | None = None
        spare: int | None = None
        held, others = 0, list[int]()
        for offset in _probe(digest):
            row_digest, pid, count, start = ROW.unpack_from(table, offset)
            if row_digest == EMPTY:
                return own, offset if spare is None else spare, held, others
            if row_digest == digest and pid == self._pid and start == self._start:
                own = offset
                held += count
            elif count == 0:
                spare = offset if spare is None else spare
            elif row_digest == digest:
                held += count
                others.append(offset)
        return own, spare, held, others

    def _claim(self, table: mmap.mmap, digest: bytes, offset: int | None) -> int | None:
        """This process's row for ``digest``, at ``offset`` (a row free for reuse, or the first never
        used); ``None`` when there is none."""
        if offset is not None and ROW.unpack_from(table, offset)[0] == EMPTY:
            if HEADER.unpack_from(table, 0)[2] >= ROWS // 2:  # rows of keys long gone slow every search
                self._compact(table)
                offset = self._rows_of(table, digest)[1]  # now the first never-used row, if any
            if offset is not None:
                name, rows, used = HEADER.unpack_from(table, 0)
                HEADER.pack_into(table, 0, name, rows, used + 1)
        if offset is not None:
            ROW.pack_into(table, offset, digest, self._pid, 0, self._start)
        return offset

    def _add(self, table: mmap.mmap, offset: int, change: int) -> None:
        """Change the count in this process's row at ``offset`` (never below nothing)."""
        digest, pid, count, start = ROW.unpack_from(table, offset)
        ROW.pack_into(table, offset, digest, pid, max(0, count + change), start)

    def _compact(self, table: mmap.mmap) -> None:
        held = [row for row in ROW.iter_unpack(table[ROW.size:]) if row[2] and alive(row[1], row[3])]
        table[ROW.size:] = bytes(SIZE - ROW.size)
        for row in held:
            offset = next(o for o in _probe(row[0]) if ROW.unpack_from(table, o)[0] == EMPTY)
            ROW.pack_into(table, offset, *row)
        HEADER.pack_into(table, 0, MAGIC, ROWS, len(held))

    def _free_the_dead(self, table: mmap.mmap, offsets: list[int]) -> int:
        """Empty the rows of processes that are gone; how many places that freed."""
        freed = 0
        for offset in offsets:
            row_digest, pid, count, start = ROW.unpack_from(table, offset)
            if not alive(pid, start):
                ROW.pack_into(table, offset, row_digest, pid, 0, start)
                freed += count
        return freed

    # -- the file -------------------------------------------------------------------------------

    def _laid_out(self, table: mmap.mmap) -> bool:
        return HEADER.unpack_from(table, 0)[:2] == (MAGIC, ROWS)

    def _lay_out(self, table: mmap.mmap) -> None:
        table[:] = bytes(SIZE)
        HEADER.pack_into(table, 0, MAGIC, ROWS, 0)

    def _opened(self) -> None:
        self._start = _start_time(self._pid)


def _digest(space: str, key: str) -> bytes:
    return hashlib.blake2b(f"{space}\0{key}".encode(), digest_size=16).digest()


def _probe(digest: bytes) -> Iterator[int]:
    """The offsets of the rows a digest may sit in, from its home row on (wrapping round once)."""
    home = int.from_bytes(digest[:4], "little") % ROWS
    for index in range(home, home + ROWS):
        yield ROW.size * (1 + index % ROWS)


def _start_time(pid: int) -> int:
    """When process ``pid`` started (clock ticks since boot); 0 where ``/proc`` cannot tell, when
    it is gone, or when it has exited and waits to be reaped (a zombie holds nothing)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        return 0 if fields[0] == b"Z" else int(fields[19])
    except (OSError, ValueError, IndexError):
        return 0


def alive(pid: int, start: int = 0) -> bool:
    """Whether process ``pid`` of this instance (started at ``start``, when known) still runs."""
    if start:
        return _start_time(pid) == start  # a reused pid has another start time
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: the pid was reused, so ours is gone
        return False
    return True


def open_counts(directory: str) -> SharedCounts | None:
    """The instance's counts in ``directory``; ``None`` (with a warning) when the file cannot be used."""
    path = os.path.join(directory, FILE_NAME)
    try:
        return SharedCounts(path)
    except (OSError, ValueError) as exc:
        log.bind(path=path, error=str(exc)).warning("counts.unavailable")
        return None


class PlacesCounts:
    """The store's counts kept as its reservations, when ``counts.bin`` cannot be used (say, its
    filesystem is full): still counted across the instance (a database write per place acquired and
    per place released), and refused while the store fails."""

    def __init__(self, store: InstanceStore) -> None:
        self._store = store
        self._held: dict[tuple[str, str], list[str]] = {}  # the places this process holds
        self._lock = threading.Lock()

    def acquire(self, space: str, key: str, limit: int) -> bool:
        place = self._store.reserve(COUNTED + space, key, limit, HELD_S)
        if place is None:
            return False
        with self._lock:
            self._held.setdefault((space, key), []).append(place)
        return True

    def release(self, space: str, key: str) -> None:
        with self._lock:
            held = self._held.get((space, key))
            if not held:
                return
            place = held.pop()
            if not held:
                del self._held[(space, key)]
        self._store.unreserve(COUNTED + space, key, place)

    def close(self) -> None:
        pass
