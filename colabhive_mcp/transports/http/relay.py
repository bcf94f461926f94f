"""Cancellations across the worker processes of one instance.

A legacy client cancels with a ``notifications/cancelled`` POST, which gunicorn may hand to any
worker, not the one running the call. The worker that receives it drops a small marker file in a
directory all workers share (the instance's runtime directory, emptied at start and stop); every
worker looks there a few times a second and cancels the call if it is running it. A marker names
the request by a digest of its id, never the id itself (a client chooses its ids, of any size), and
expires after a minute.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from typing import Any, Callable

from cachetools import TTLCache

from ...protocol.inflight import id_digest

RELAY_DIR = "cancel"  # in the instance's runtime directory
LOOK_EVERY_S = 0.2
MARKER_TTL_S = 60.0
MAX_REASON_CHARS = 200


class CancelRelay:
    def __init__(self, directory: str, cancel: Callable[[str, str, str | None], None]) -> None:
        """``cancel(session_id, id_digest, reason)`` is called for every marker this process has not seen."""
        self.directory = directory
        self._cancel = cancel
        self._seen: TTLCache = TTLCache(maxsize=100_000, ttl=MARKER_TTL_S * 2)
        os.makedirs(directory, exist_ok=True)
        threading.Thread(target=self._watch, name="mcp-cancel-relay", daemon=True).start()

    def publish(self, session_id: str, request_id: Any, reason: str | None) -> None:
        reason = reason[:MAX_REASON_CHARS] if isinstance(reason, str) else None
        payload = json.dumps([session_id, id_digest(request_id), reason])
        name = hashlib.sha256(payload.encode()).hexdigest()[:32]
        self._seen[name] = True  # this process has already applied it
        path = os.path.join(self.directory, name)
        temporary = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
        with open(temporary, "w", encoding="utf-8") as fh:
            fh.write(payload)
        os.replace(temporary, path)

    def _watch(self) -> None:
        while True:
            time.sleep(LOOK_EVERY_S)
            try:
                self._look()
            except OSError:
                continue

    def _look(self) -> None:
        now = time.time()
        for entry in os.scandir(self.directory):
            if entry.name.endswith(".tmp"):
                continue
            if now - entry.stat().st_mtime > MARKER_TTL_S:
                os.remove(entry.path)
            elif entry.name not in self._seen:
                self._seen[entry.name] = True
                with open(entry.path, encoding="utf-8") as fh:
                    session_id, digest, reason = json.load(fh)
                self._cancel(session_id, digest, reason)
