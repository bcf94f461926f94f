"""A corrupt instance database told from a sound one, and moved aside (with the files SQLite keeps
beside it) so that the next connection makes a fresh one: :class:`.sqlite.SqliteStore` recovers so."""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import time
import urllib.parse

from ..logs import log

SIDE_FILES = ("-wal", "-shm", "-journal")  # what SQLite makes beside a database
CORRUPT = (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)


def corrupt(error: Exception) -> bool:
    """Whether ``error`` says the database is corrupt (or is no database)."""
    return isinstance(error, sqlite3.DatabaseError) and getattr(error, "sqlite_errorcode", 0) & 0xFF in CORRUPT


def set_aside(path: str, busy_timeout: float) -> None:
    """Move the corrupt database at ``path`` aside: one process of the instance does, under a lock on
    the directory (the others then find the file sound, or gone)."""
    directory = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(directory, fcntl.LOCK_EX)
        if not _unsound(path, busy_timeout):
            return
        aside = f"{path}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
        for side in (*SIDE_FILES, ""):  # the database last: whoever finds it gone makes a fresh one
            with contextlib.suppress(FileNotFoundError):
                os.rename(path + side, aside + side)
        log.bind(path=path, moved_to=aside).warning("store.set_aside")
    finally:
        os.close(directory)  # (and its lock)


def _unsound(path: str, busy_timeout: float) -> bool:
    """Whether the file at ``path`` (if any) is not a sound database."""
    try:
        probe = sqlite3.connect(f"file:{urllib.parse.quote(path)}?mode=rw", uri=True, timeout=busy_timeout)
    except sqlite3.Error:
        return False  # gone: nothing to move aside
    try:
        return probe.execute("PRAGMA quick_check").fetchall() != [("ok",)]
    except sqlite3.DatabaseError as exc:
        return exc.sqlite_errorcode & 0xFF in CORRUPT
    finally:
        probe.close()
