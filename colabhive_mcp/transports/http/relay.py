"""Cancellations across the worker processes of one instance.

A legacy client cancels with a ``notifications/cancelled`` POST, which gunicorn may hand to any
worker, not the one running the call. A worker that is not running the request drops a small marker
file in a directory all workers share (the instance's runtime directory, emptied at start and stop);
every worker looks there a few times a second and cancels the call if it is running it. A marker names
the request by a digest of its id, never the id itself (a client chooses its ids, of any size), and
expires after a minute.

A client decides how many cancellations it sends, so the relay is bounded: at most
``MAX_PER_SESSION`` markers a minute for one session, counted by each worker (a session cannot have
more calls running than its key's ``tenant_max_concurrent``, 32 by default: this is every one of them
cancelled twice over); at most ``MAX_PER_KEY`` in the directory for the sessions of one API key (a
marker's name starts with its key's log id, which every worker counts when it looks), so that a
key with many sessions cannot crowd out the others' cancellations; and none while the directory holds
``MAX_MARKERS`` (a minute of 8 relayed cancellations a second for the whole instance, far more than
clients send; a look at that many takes a few milliseconds). A cancellation past any of them is
dropped (the call runs on, as if it had not been sent) and counted in
``mcp_errors_total{kind="cancel_relay_dropped"}``. A look at a directory that has
not changed since the last one reads no file, and a marker that is not one (garbage, the wrong shape,
too large) is skipped.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import threading
import time
from collections import Counter
from typing import Any, Callable

from cachetools import TTLCache

from ... import metrics
from ...calls.cancellation import REASONS, Reason
from ...logs import log
from ...protocol.inflight import id_digest

RELAY_DIR = "cancel"  # in the instance's runtime directory
LOOK_EVERY_S = 0.2
MARKER_TTL_S = 60.0
MAX_MARKER_BYTES = 4096  # more than any marker written here: a session id, a digest, a short reason
MAX_PER_SESSION = 60  # markers one session may have written per minute, by each worker
MAX_MARKERS = 500  # in the directory: past it, no marker is written
MAX_PER_KEY = MAX_MARKERS // 5  # in the directory, for the sessions of one key
MTIME_SLACK_S = 1.0  # a directory changed this recently may change again within its mtime's granularity
_DIGEST = re.compile(r"[0-9a-f]{32}")


class CancelRelay:
    def __init__(self, directory: str, cancel: Callable[[str, str, Reason | None], None],
                 running: Callable[[str, Any], bool]) -> None:
        """``cancel(session_id, id_digest, reason)`` is called for every marker this process has not
        seen; ``running(session_id, request_id)``: whether the request runs in this process (then a
        cancellation of it has been applied here, and needs no marker)."""
        self.directory = directory
        self._cancel = cancel
        self._running = running
        self._lock = threading.Lock()
        self._seen: TTLCache = TTLCache(maxsize=100_000, ttl=MARKER_TTL_S * 2)
        self._written: TTLCache = TTLCache(maxsize=100_000, ttl=120.0)  # (session id, minute) -> markers
        # markers in the directory at the last look, and written here since, by their key's log id
        self._by_key: Counter[str] = Counter()
        self._quiet: int | None = None  # the directory's mtime when last looked at, if it had settled
        self._expires = math.inf  # when the oldest marker seen expires (then a look removes it)
        os.makedirs(directory, exist_ok=True)
        threading.Thread(target=self._watch, name="mcp-cancel-relay", daemon=True).start()

    def publish(self, key_id: str, session_id: str, request_id: Any, reason: Reason | None) -> None:
        """Relay a cancellation of a session of the key ``key_id`` names (its log id) to the other
        workers, unless the request runs here or a bound is reached."""
        if self._running(session_id, request_id):
            return
        payload = json.dumps([session_id, id_digest(request_id), reason])
        name = f"{key_id}.{hashlib.sha256(payload.encode()).hexdigest()[:32]}"  # (the id: hex, then a dot)
        window = (session_id, int(time.time() // 60))
        with self._lock:
            written = self._written.get(window, 0)
            if written >= MAX_PER_SESSION or self._by_key[key_id] >= MAX_PER_KEY or (
                    self._by_key.total() >= MAX_MARKERS):
                metrics.ERRORS.labels("cancel_relay_dropped").inc()
                return
            self._written[window] = written + 1
            self._by_key[key_id] += 1
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
                continue  # the directory went with the instance
            except Exception:  # the relay must outlive any one failure
                log.exception("http.cancel_relay_failed")

    def _look(self) -> None:
        """Relay the markers not seen yet and remove the expired ones; nothing when nothing changed."""
        now = time.time()
        changed = os.stat(self.directory).st_mtime_ns
        if changed == self._quiet and now < self._expires:
            return
        by_key, expires = Counter[str](), math.inf
        with os.scandir(self.directory) as entries:
            for entry in entries:
                try:
                    written = entry.stat().st_mtime
                    if now - written > MARKER_TTL_S:
                        os.remove(entry.path)
                        continue
                    by_key[entry.name.partition(".")[0]] += 1
                    expires = min(expires, written + MARKER_TTL_S)
                    if not entry.name.endswith(".tmp") and self._first_sight(entry.name):
                        self._relay(entry)
                except OSError:
                    continue  # removed meanwhile by another worker
        with self._lock:
            self._by_key = by_key
        self._expires = expires
        self._quiet = changed if now - changed / 1e9 > MTIME_SLACK_S else None

    def _first_sight(self, name: str) -> bool:
        with self._lock:
            seen = name in self._seen
            self._seen[name] = True
        return not seen

    def _relay(self, entry: os.DirEntry[str]) -> None:
        if entry.stat().st_size > MAX_MARKER_BYTES:
            return
        with open(entry.path, "rb") as fh:
            marker = _parsed(fh.read(MAX_MARKER_BYTES))
        if marker is not None:
            self._cancel(*marker)


def _parsed(raw: bytes) -> tuple[str, str, Reason | None] | None:
    """A marker's session id, request digest and reason; ``None`` for anything else."""
    try:
        marker = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not (isinstance(marker, list) and len(marker) == 3):
        return None
    session_id, digest, reason = marker
    if not (isinstance(session_id, str) and isinstance(digest, str) and _DIGEST.fullmatch(digest)
            and (reason is None or reason in REASONS)):
        return None
    return session_id, digest, reason
