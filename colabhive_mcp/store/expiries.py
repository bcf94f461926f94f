"""Which entries the instance store surely does not hold, so that most of its reads need no query.

On every tool call the store is asked whether a host's earlier identical call left work to attach
to (:mod:`colabhive_mcp.calls.detached`); almost always nothing is there. ``expiries.bin``, beside the
store, is a table that every worker maps: for each of its slots, when the last entry whose key
falls in it expires. A write raises its key's slot before the entry is written, so a read whose
slot has passed cannot find anything and skips the database. Many keys share a slot: a live slot
only means "look".

A slot is one aligned 4-byte word, changed only under the file lock: how many whole seconds before
the last second it can hold (in 2106) its expiry is, so that it only falls as the expiry rises, and
a slot of zeros (a file cut short and grown again) says "look". Reads take no lock and read the file
rather than its mapping, which a file cut short could not back (a short read also says "look"). A
fresh table starts every slot at the last expiry already in the store, so entries written before the
table existed are still looked for.
"""

from __future__ import annotations

import math
import mmap
import os
import struct
import zlib
from typing import Callable

from ..logs import log
from .mapped import MappedFile

FILE_NAME = "expiries.bin"
SLOTS = 16_384
HEADER = struct.Struct("<16sII8x")  # the format's name and version, the slots (32 bytes: the slots stay aligned)
SLOT = struct.Struct("<I")  # seconds before LAST_SECOND
MAGIC = b"colabhive-expiry"
VERSION = 2
SIZE = HEADER.size + SLOT.size * SLOTS
LAST_SECOND = 0xFFFF_FFFF


class Expiries(MappedFile):
    """The slots in ``path``; ``initial()`` says when the last entry stored so far expires."""

    def __init__(self, path: str, initial: Callable[[], float]) -> None:
        self._initial = initial
        super().__init__(path, SIZE)

    def may_hold(self, space: str, key: str, now: float) -> bool:
        """Whether the store may hold a live entry under ``key`` at ``now`` (``False``: surely not)."""
        try:
            slot = self._read(_offset(space, key), SLOT.size)
        except OSError:
            return True
        return len(slot) < SLOT.size or LAST_SECOND - SLOT.unpack(slot)[0] > now

    def extend(self, space: str, key: str, expires: float) -> None:
        """An entry under ``key`` is about to be written, live until ``expires``."""
        offset, before = _offset(space, key), LAST_SECOND - _seconds(expires)
        with self._locked() as table:
            if SLOT.unpack_from(table, offset)[0] > before:
                SLOT.pack_into(table, offset, before)

    def _laid_out(self, table: mmap.mmap) -> bool:
        return HEADER.unpack_from(table, 0) == (MAGIC, VERSION, SLOTS)

    def _lay_out(self, table: mmap.mmap) -> None:
        table[HEADER.size:] = SLOT.pack(LAST_SECOND - _seconds(self._initial())) * SLOTS
        HEADER.pack_into(table, 0, MAGIC, VERSION, SLOTS)


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
