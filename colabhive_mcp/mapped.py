"""A file that every process of an instance maps into memory and changes under a file lock.

Each process maps the file for itself: a forked worker opens its own, since a file lock taken
through a descriptor inherited from its parent would be the parent's lock too. The threads of a
process take turns before one of them takes the file lock. Whoever opens a file of another
layout, or one cut short, lays it out afresh; nobody else is using it then.
"""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
import threading
from typing import Iterator


class MappedFile:
    """``path``, ``size`` bytes long, mapped by this process; a subclass says what its layout is."""

    def __init__(self, path: str, size: int) -> None:
        self.path = path
        self.size = size
        self._lock = threading.Lock()
        self._pid = 0
        self._fd = -1
        self._table: mmap.mmap | None = None
        self._open()

    def close(self) -> None:
        with self._lock:
            if self._table is not None and self._pid == os.getpid():
                self._table.close()
                os.close(self._fd)
            self._table, self._pid = None, 0

    def _mapping(self) -> mmap.mmap:
        """The mapping, for a read that takes no lock (which each subclass must make safe)."""
        table = self._table
        if table is None or self._pid != os.getpid():
            with self._lock:
                table = self._open()
        return table

    def _laid_out(self, table: mmap.mmap) -> bool:
        """Whether ``table`` already has this file's layout."""
        raise NotImplementedError

    def _lay_out(self, table: mmap.mmap) -> None:
        """Write a fresh table over ``table`` (under the file lock, before anyone else maps it)."""
        raise NotImplementedError

    def _opened(self) -> None:
        """This process has just mapped the file."""

    @contextlib.contextmanager
    def _locked(self) -> Iterator[mmap.mmap]:
        with self._lock:
            table = self._open()
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                yield table
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _open(self) -> mmap.mmap:
        """This process's mapping of the file (an inherited one is let go first)."""
        if self._table is None or self._pid != os.getpid():
            if self._table is not None:  # the parent's mapping and descriptor, inherited: let them go
                self._table.close()
                os.close(self._fd)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                if os.fstat(fd).st_size != self.size:
                    os.ftruncate(fd, 0)  # another layout, or a file cut short: start afresh
                    os.ftruncate(fd, self.size)
                table = mmap.mmap(fd, self.size)
                if not self._laid_out(table):
                    self._lay_out(table)
                fcntl.flock(fd, fcntl.LOCK_UN)
            except BaseException:
                os.close(fd)
                raise
            self._fd, self._table, self._pid = fd, table, os.getpid()
            self._opened()
        return self._table
