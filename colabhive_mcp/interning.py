"""What tenants share: identical manifest entries, and the tool definitions built from them, are
held once per process however many keys see them (most tenants see the same public actions)."""

from __future__ import annotations

import hashlib
import json
import threading
from typing import Any, Callable, Hashable

from cachetools import LRUCache

_lock = threading.Lock()
_entries: LRUCache = LRUCache(maxsize=50_000)  # digest -> the one entry object
_built: LRUCache = LRUCache(maxsize=200_000)  # (digest, ...) -> the one definition or view built from it


def digest(entry: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(entry, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def entry(value: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The digest of an entry and the process's one copy of it."""
    key = digest(value)
    with _lock:
        return key, _entries.setdefault(key, value)


def built(key: Hashable, build: Callable[[], Any]) -> Any:
    """The one object built for ``key`` (built at most once while it is remembered)."""
    with _lock:
        found = _built.get(key)
    if found is None:
        found = build()
        with _lock:
            found = _built.setdefault(key, found)
    return found
