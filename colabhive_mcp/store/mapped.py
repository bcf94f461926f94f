"""A file that every process of an instance maps into memory and changes under a file lock.

Each process maps the file for itself: a forked worker opens its own, since a file lock taken
through a descriptor inherited from its parent would be the parent's lock too. The threads of a
process take turns before one of them takes the file lock. Whoever opens a file of another
layout, or one cut short, lays it out afresh.

Touching a mapped page that the file cannot back kills the process (SIGBUS), which Python cannot
catch; so the file's blocks are allocated (``posix_fallocate``) before it is mapped (a sparse page
first written on a full filesystem is such a page), and every access under the lock first checks
that the file still has its size (someone may have cut it short): a file cut short is grown and
laid out again (what it held is lost), or, when that fails too, the access raises ``OSError``
(a cut that falls in the microseconds between the check and the access still kills: only the
instance's own processes take the lock). A read that takes no lock does not touch the mapping: it
reads the file (``os.pread``), which a file cut short only makes short.
"""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
import stat
import threading
from typing import Iterator

from ..logs import log


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

    def _read(self, offset: int, length: int) -> bytes:
        """``length`` bytes at ``offset``, read without a lock (fewer when the file was cut short)."""
        if self._table is None or self._pid != os.getpid():
            with self._lock:
                self._open()
        return os.pread(self._fd, length, offset)

    def _laid_out(self, table: mmap.mmap) -> bool:
        """Whether ``table`` already has this file's layout."""
        raise NotImplementedError

    def _lay_out(self, table: mmap.mmap) -> None:
        """Write a fresh table over ``table`` (under the file lock)."""
        raise NotImplementedError

    def _opened(self) -> None:
        """This process has just mapped the file."""

    @contextlib.contextmanager
    def _locked(self) -> Iterator[mmap.mmap]:
        with self._lock:
            table = self._open()
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                if os.lseek(self._fd, 0, os.SEEK_END) < self.size:  # cheaper than fstat: on every call
                    log.bind(path=self.path).warning("mapped_file.cut_short")
                    os.posix_fallocate(self._fd, 0, self.size)
                    self._lay_out(table)
                yield table
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _open(self) -> mmap.mmap:
        """This process's mapping of the file (an inherited one is let go first)."""
        if self._table is None or self._pid != os.getpid():
            if self._table is not None:  # the parent's mapping and descriptor, inherited: let them go
                self._table.close()
                os.close(self._fd)
                self._table = None
            fd = open_private(self.path)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                os.posix_fallocate(fd, 0, self.size)
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


def open_private(path: str) -> int:
    """A read-write descriptor of ``path`` in the instance's runtime directory, made (mode 0600) when
    missing: never through a symbolic link, and only of a regular file of this process's user."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        check_private(path, os.fstat(fd))
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_private(path: str, found: os.stat_result) -> None:
    """Raise ``PermissionError`` unless ``found`` (of ``path``) is a regular file of this process's user."""
    if not stat.S_ISREG(found.st_mode) or found.st_uid != os.geteuid():
        raise PermissionError(f"{path} is not a regular file of uid {os.geteuid()}: it is not used")
