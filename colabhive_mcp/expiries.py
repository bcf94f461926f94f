"""Which entries the instance store surely does not hold, so that most of its reads need no query.

On every tool call the store is asked whether a host's earlier identical call left work to attach
to (:mod:`colabhive_mcp.detached`); almost always nothing is there. ``expiries.bin``, beside the
store, is a table that every worker maps: for each of its slots, when the last entry whose key
falls in it expires. A write raises its key's slot before the entry is written, so a read whose
slot has passed cannot find anything and skips the database. Many keys share a slot: a live slot
only means "look".

A slot is one aligned 4-byte word (whole seconds, rounded up) that only rises, under the file lock;
reads take no lock. A fresh table starts every slot at the last expiry already in the store, so
entries written before the table existed are still looked for.
"""

from __future__ import annotations

import math
import mmap
import os
import struct
import zlib
from typing import Callable

from .logs import log
from .mapped import MappedFile

FILE_NAME = "expiries.bin"
SLOTS = 16_384
HEADER = struct.Struct("<16sI12x")  # the format's name, the slots (32 bytes: the slots stay aligned)
SLOT = struct.Struct("<I")  # seconds since the epoch, rounded up
MAGIC = b"colabhive-expiry"
SIZE = HEADER.size + SLOT.size * SLOTS
LAST_SECOND = 0xFFFF_FFFF


class Expiries(MappedFile):
    """The slots in ``path``; ``initial()`` says when the last entry stored so far expires."""

    def __init__(self, path: str, initial: Callable[[], float]) -> None:
        self._initial = initial
        super().__init__(path, SIZE)

    def may_hold(self, space: str, key: str, now: float) -> bool:
        """Whether the store may hold a live entry under ``key`` at ``now`` (``False``: surely not)."""
        return SLOT.unpack_from(self._mapping(), _offset(space, key))[0] > now

    def extend(self, space: str, key: str, expires: float) -> None:
        """An entry under ``key`` is about to be written, live until ``expires``."""
        offset, until = _offset(space, key), _seconds(expires)
        with self._locked() as table:
            if SLOT.unpack_from(table, offset)[0] < until:
                SLOT.pack_into(table, offset, until)

    def _laid_out(self, table: mmap.mmap) -> bool:
        return HEADER.unpack_from(table, 0)[:2] == (MAGIC, SLOTS)

    def _lay_out(self, table: mmap.mmap) -> None:
        table[HEADER.size:] = SLOT.pack(_seconds(self._initial())) * SLOTS
        HEADER.pack_into(table, 0, MAGIC, SLOTS)


def _offset(space: str, key: str) -> int:
    return HEADER.size + SLOT.size * (zlib.crc32(f"{space}\0{key}".encode("utf-8", "surrogatepass")) % SLOTS)


def _seconds(when: float) -> int:
    return LAST_SECOND if when >= LAST_SECOND else max(0, math.ceil(when))


def open_expiries(directory: str, initial: Callable[[], float]) -> Expiries | None:
    """The store's expiries in ``directory``; ``None`` (every read asks the store) when they cannot be opened."""
    path = os.path.join(directory, FILE_NAME)
    try:
        return Expiries(path, initial)
    except (OSError, ValueError) as exc:
        log.bind(path=path, error=str(exc)).warning("expiries.unavailable")
        return None
