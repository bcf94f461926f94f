"""What tenants share: identical manifest entries, and the tool definitions built from them, are
held once per process however many keys see them (most tenants see the same public actions); so is
the catalogue of a whole manifest, while a tenant holds it (:func:`held`).

Beyond what its tenants hold, a process keeps the last :data:`KEPT_ENTRIES` entries it read and
three times as many definitions and encodings built from them, so that a tenant coming back (or a
new key with the same actions) finds them: with 3 KB entries, about 190 MB at most, however many
different manifests pass through (``scripts/bench.py``, ``distinct_manifests``)."""

from __future__ import annotations

import hashlib
import marshal
import threading
import weakref
from typing import Any, Callable, Hashable, MutableMapping

from cachetools import LRUCache

_lock = threading.Lock()
KEPT_ENTRIES = 8_000  # about 9 KB each for a 3 KB entry, and 3 KB for each thing built from one
_entries: LRUCache = LRUCache(maxsize=KEPT_ENTRIES)  # digest -> the one entry object
_built: LRUCache = LRUCache(maxsize=3 * KEPT_ENTRIES)  # (digest, ...) -> the one definition or view built from it
_held: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # key -> an object some tenant holds
_building: dict[tuple[int, Hashable], tuple[int, threading.Event]] = {}  # (where, key) -> (builder, set when built)


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
    """The one object built for ``key`` while it is remembered. Two threads that want it at once may
    both build it (a definition or an encoding of one entry: tens of microseconds) and both get the one
    kept first: making them wait for one build, as :func:`held` does, costs more than building."""
    with _lock:
        found = _built.get(key)
    if found is None:
        found = build()
        with _lock:
            found = _built.setdefault(key, found)
    return found


def held(key: Hashable, build: Callable[[], Any]) -> Any:
    """The one object built for ``key`` while anything holds it (then it goes: a large object, such as
    a catalogue, is kept no longer than a tenant uses it)."""
    return _one(_held, key, build)


def _one(kept: MutableMapping[Hashable, Any], key: Hashable, build: Callable[[], Any]) -> Any:
    """``kept[key]``, built outside the lock when missing, by one thread at a time: the others that
    want it meanwhile wait for that build (a catalogue of a 1 MB manifest takes milliseconds of the
    interpreter lock, which a hundred threads listing at once would each spend again). A build that
    fails leaves the next thread to try."""
    name, me = (id(kept), key), threading.get_ident()
    while True:
        with _lock:
            found = kept.get(key)
            if found is not None:
                return found
            building = _building.get(name)
            if building is None:
                done = threading.Event()
                _building[name] = (me, done)
                break
        builder, done = building
        if builder == me:  # its own build asks for it: waiting would never end
            raise RuntimeError(f"building {key!r} needs {key!r} built")
        done.wait()
    try:
        found = build()
        with _lock:
            return kept.setdefault(key, found)
    finally:
        with _lock:
            del _building[name]
        done.set()
