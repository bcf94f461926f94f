"""The live catalogue: which actions each key sees, the manifest's ETag and its page cursors."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import threading
from typing import Any, Callable

from .actions import Action


class CursorError(ValueError):
    """A manifest cursor that is malformed, or that belongs to an older manifest version."""


class Manifest:
    """One key's whole manifest at one moment, in slug order, with one ETag for all its pages.

    A cursor encodes the manifest version (the ETag) and an offset. A cursor issued for an older
    version is rejected with CursorError (the gateway answers 400), so a client never stitches
    pages of two versions together: it must restart from the first page.
    """

    def __init__(self, entries: list[dict[str, Any]]) -> None:
        self.entries = entries
        canonical = json.dumps(entries, sort_keys=True, separators=(",", ":")).encode()
        self.version = hashlib.sha256(canonical).hexdigest()[:32]

    @property
    def etag(self) -> str:
        """The strong ETag, quoted as in the ``ETag`` header."""
        return f'"{self.version}"'

    def page(self, cursor: str | None, size: int) -> tuple[list[dict[str, Any]], str | None]:
        """The entries of the page at ``cursor`` (None: the first) and the next page's cursor."""
        start = self._offset(cursor) if cursor else 0
        end = start + size
        return self.entries[start:end], (self._cursor(end) if end < len(self.entries) else None)

    def _cursor(self, offset: int) -> str:
        return base64.urlsafe_b64encode(f"{self.version}:{offset}".encode()).decode().rstrip("=")

    def _offset(self, cursor: str) -> int:
        try:
            version, offset = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode().split(":")
            start = int(offset)
        except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
            raise CursorError("invalid cursor") from exc
        if version != self.version:
            raise CursorError("stale cursor: the manifest changed; restart from the first page")
        if not 0 < start < len(self.entries):
            raise CursorError("invalid cursor")
        return start


class Registry:
    """The actions the sandbox serves, safe to change while requests run."""

    def __init__(self, defaults: Callable[[], list[Action]]) -> None:
        self._defaults = defaults
        self._lock = threading.Lock()
        self._actions: dict[str, Action] = {}
        self.restore()

    def restore(self) -> None:
        """Go back to the default catalogue."""
        actions = {action.slug: action for action in self._defaults()}
        with self._lock:
            self._actions = actions

    def add(self, action: Action) -> None:
        """Add ``action``, replacing one of the same slug."""
        with self._lock:
            self._actions[action.slug] = action

    def remove(self, slug: str) -> bool:
        """Remove an action; False if there was none."""
        with self._lock:
            return self._actions.pop(slug, None) is not None

    def get(self, key: str, slug: str) -> Action | None:
        """The action ``slug`` if ``key`` may see it."""
        with self._lock:
            action = self._actions.get(slug)
        return action if action is not None and action.visible_to(key) else None

    def manifest(self, key: str) -> Manifest:
        """Everything ``key`` sees, sorted by slug."""
        with self._lock:
            actions = sorted(self._actions.items())
        return Manifest([action.entry for _, action in actions if action.visible_to(key)])
