"""The record of gateway requests the sandbox served, for tests to inspect."""

from __future__ import annotations

import threading
from typing import Any


class Journal:
    """An append-only, thread-safe list of request records."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: list[dict[str, Any]] = []

    def record(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self._entries.append(entry)

    def entries(self) -> list[dict[str, Any]]:
        """A snapshot copy, oldest first."""
        with self._lock:
            return [dict(entry) for entry in self._entries]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
