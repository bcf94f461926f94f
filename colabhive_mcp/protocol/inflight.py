"""The requests in flight: found by a cancellation (which may arrive first), stopped together at
shutdown; and the requests this server sends a client during a call, waiting for their answers."""

from __future__ import annotations

import hashlib
import json
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from ..calls.cancellation import SHUTDOWN, Cancellation, Reason
from .jsonrpc import ResponseFrame
from .request import Request

EARLY_CANCELS_KEPT = 256


def id_digest(request_id: Any) -> str:
    """A request id of any size as 32 hex digits (1 and "1" differ, as JSON-RPC says)."""
    return hashlib.sha256(json.dumps(request_id).encode()).hexdigest()[:32]


@dataclass
class _Waiter:
    """A request of ours to the client, waiting for its answer."""

    answered: threading.Event = field(default_factory=threading.Event)
    result: Any = None  # its result (None: it answered with an error)


class InFlight:
    """Keyed by (session id, request id); thread-safe."""

    def __init__(self) -> None:
        self._running: dict[tuple[str, Any], list[Cancellation]] = {}  # (several: a client that reused an id)
        self._early: OrderedDict[tuple[str, str], Reason | None] = OrderedDict()  # cancels that came first, by digest
        self._asked: dict[tuple[str, str], _Waiter] = {}
        self._lock = threading.Lock()

    def track(self, key: tuple[str, Any], cancelled: Cancellation) -> None:
        with self._lock:
            self._running.setdefault(key, []).append(cancelled)
            early = (key[0], id_digest(key[1])) if self._early else None
            if early is not None and early in self._early:
                cancelled.cancel(self._early.pop(early))

    def untrack(self, key: tuple[str, Any], cancelled: Cancellation) -> None:
        """The request of ``cancelled`` ended (not another one a client sent with the same id meanwhile:
        that one stays where a cancellation finds it)."""
        with self._lock:
            same_id = self._running.get(key, [])
            if cancelled in same_id:
                same_id.remove(cancelled)
            if not same_id:
                self._running.pop(key, None)

    def running(self, key: tuple[str, Any]) -> bool:
        """Whether the request runs in this process."""
        with self._lock:
            return key in self._running

    def cancel(self, key: tuple[str, Any], reason: Reason | None) -> None:
        """Cancel a request in flight, saying why; one not seen yet is remembered for when it arrives."""
        with self._lock:
            found = list(self._running.get(key, ()))
            if not found:
                self._remember((key[0], id_digest(key[1])), reason)
        for cancelled in found:
            cancelled.cancel(reason)

    def cancel_digest(self, session_id: str, digest: str, reason: Reason | None) -> None:
        """:meth:`cancel`, the request named by :func:`id_digest` (as another worker relays it)."""
        with self._lock:
            found = [c for (owner, rid), same_id in self._running.items() if owner == session_id and
                     id_digest(rid) == digest for c in same_id]
            if not found:
                self._remember((session_id, digest), reason)
        for cancelled in found:
            cancelled.cancel(reason)

    def _remember(self, early: tuple[str, str], reason: Reason | None) -> None:
        self._early[early] = reason
        while len(self._early) > EARLY_CANCELS_KEPT:
            self._early.popitem(last=False)

    def cancel_session(self, session_id: str) -> None:
        """The session's connection is gone: its requests are cancelled, with no reason given."""
        with self._lock:
            found = [c for (owner, _id), same_id in self._running.items() if owner == session_id for c in same_id]
        for cancelled in found:
            cancelled.cancel(None)

    def cancel_all(self) -> None:
        """Shutdown: every request is cancelled, and its work stopped upstream."""
        with self._lock:
            found = [c for same_id in self._running.values() for c in same_id]
        for cancelled in found:
            cancelled.cancel(SHUTDOWN)

    def ask(self, request: Request, method: str, params: dict[str, Any], timeout: float) -> Any:
        """Send the client a request during ``request`` and wait for its result (``None``: no answer)."""
        key = (request.session.id if request.session else "stdio", f"colabhive-{secrets.token_hex(8)}")
        waiter = _Waiter()
        with self._lock:
            self._asked[key] = waiter
        try:
            request.notify({"jsonrpc": "2.0", "id": key[1], "method": method, "params": params})
            deadline = time.monotonic() + timeout
            while not waiter.answered.wait(0.2):
                if request.cancelled.is_set() or time.monotonic() > deadline:
                    return None
            return waiter.result
        finally:
            with self._lock:
                self._asked.pop(key, None)

    def answered(self, session_id: str, response: ResponseFrame) -> None:
        """The client's answer to a request of ours."""
        with self._lock:
            waiter = self._asked.get((session_id, str(response.id)))
        if waiter is not None:
            waiter.result = response.result
            waiter.answered.set()
