"""What tenants share: identical manifest entries, and the tool definitions built from them, are
held once per process however many keys see them (most tenants see the same public actions); so is
the catalogue of a whole manifest, while a tenant holds it (:func:`held`)."""

from __future__ import annotations

import hashlib
import marshal
import threading
import weakref
from typing import Any, Callable, Hashable, MutableMapping

from cachetools import LRUCache

_lock = threading.Lock()
_entries: LRUCache = LRUCache(maxsize=50_000)  # digest -> the one entry object
_built: LRUCache = LRUCache(maxsize=200_000)  # (digest, ...) -> the one definition or view built from it
_held: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # key -> an object some tenant holds
_building: dict[tuple[int, Hashable], threading.Event] = {}  # (where, key) -> set once its build ends


def digest(value: Any) -> str:
    """The digest of a JSON value as it was read: two values read alike (keys in the same order, as a
    gateway writes one entry every time) have the same one, and two different values never do. Its
    input is ``marshal``'s version 2 form, which writes what it is given and nothing else (no
    references, every string as text): four times as fast as hashing the value's JSON."""
    return hashlib.sha256(marshal.dumps(value, 2)).hexdigest()


def entry(value: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The digest of an entry and the process's one copy of it."""
    key = digest(value)
    with _lock:
        return key, _entries.setdefault(key, value)


def built(key: Hashable, build: Callable[[], Any]) -> Any:
    """The one object built for ``key`` (built at most once while it is remembered)."""
    return _one(_built, key, build)


def held(key: Hashable, build: Callable[[], Any]) -> Any:
    """The one object built for ``key`` while anything holds it (then it goes: a large object, such as
    a catalogue, is kept no longer than a tenant uses it)."""
    return _one(_held, key, build)


def _one(kept: MutableMapping[Hashable, Any], key: Hashable, build: Callable[[], Any]) -> Any:
    """``kept[key]``, built outside the lock when missing, by one thread at a time: the others that
    want it meanwhile wait for that build (a catalogue of a 1 MB manifest takes milliseconds of the
    interpreter lock, which a hundred threads listing at once would each spend again). A build that
    fails leaves the next thread to try."""
    name = (id(kept), key)
    while True:
        with _lock:
            found = kept.get(key)
            if found is not None:
                return found
            building = _building.get(name)
            if building is None:
                building = _building[name] = threading.Event()
                break
        building.wait()
    try:
        found = build()
        with _lock:
            return kept.setdefault(key, found)
    finally:
        with _lock:
            del _building[name]
        building.set()
