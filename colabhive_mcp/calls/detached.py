"""Calls cut off by their host, kept running upstream for a while so that a retry attaches to them.

When a host gives up on a slow call (its deadline passed, or the server answered just before it
with a continuation), the invocation keeps running upstream for ``grace`` seconds. The same call
from the same key — same tool, same arguments — arriving meanwhile follows that invocation, its
progress and its result, instead of invoking again: a host's retry never runs a tool twice. If
nobody attaches within the grace period, the work is cancelled upstream. A call still polling is
noted too, so that a retry racing its host's cancel waits a moment for the cancel to land.

The entries live in the instance store, so a retry may reach any worker of the instance; keys are
hashes (of the key's binding, the slug and the canonical arguments), values are invocation ids.
The continuation tool finds a kept call by its invocation id only for the key that made it: another
key naming that id (whatever the gateway lets it see) neither claims nor ends it.
"""

from __future__ import annotations

import heapq
import secrets
import threading
import time
from typing import Any, Callable

from ..canonical import canonical, digest
from ..logs import log
from ..store.interface import InstanceStore

CALLS = "calls"  # call key -> {"invocation", "state": running | detached | attached, "token"}
#                   or {"idempotency_key", "state": "unanswered"}
INVOCATIONS = "kept_invocations"  # invocation id -> {"key": call key, "binding": its key's} (continuation tool)
RACE_S = 2.0  # how long a retry waits for a still-polling identical call to be cut off
KEPT_S = 60.0  # entries outlive their grace period by this much: the janitor still finds them then
LOOK_EVERY_S = 0.05


def call_key(binding: str, slug: str, arguments: dict[str, Any]) -> str:
    """The identity of a call: the same key, tool and canonical arguments."""
    return digest(binding, slug, canonical(arguments))


class DetachedCalls:
    def __init__(self, store: InstanceStore, grace: float, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.grace = grace
        self.clock = clock
        self._due: list[tuple[float, str, str, str, Callable[[str], None]]] = []
        self._wake = threading.Condition()
        self._janitor: threading.Thread | None = None

    def running(self, key: str, invocation_id: str, ttl: float) -> None:
        """A call is polling this invocation (a retry arriving now may be its host's)."""
        self.store.put(CALLS, key, {"invocation": invocation_id, "state": "running"}, ttl)

    def detach(self, binding: str, key: str, invocation_id: str, cancel: Callable[[str], None]) -> None:
        """The call's host stopped waiting: keep the work for ``grace`` seconds, then ``cancel`` it
        unless a retry attached. ``binding``: the calling key's, the only one that may follow it up."""
        token = secrets.token_hex(8)
        self.store.put(CALLS, key, {"invocation": invocation_id, "state": "detached", "token": token},
                       self.grace + KEPT_S)
        self.store.put(INVOCATIONS, invocation_id, {"key": key, "binding": binding}, self.grace + KEPT_S)
        log.bind(invocation_id=invocation_id, grace_s=self.grace).info("call.detached")
        with self._wake:
            heapq.heappush(self._due, (self.clock() + self.grace, key, token, invocation_id, cancel))
            if self._janitor is None:
                self._janitor = threading.Thread(target=self._watch, name="mcp-detached", daemon=True)
                self._janitor.start()
            self._wake.notify()

    def unanswered(self, key: str, idempotency_key: str) -> None:
        """The call's invoke got no answer (a timeout, a connection lost): the gateway may have started
        the work. A retry of the call within ``grace`` sends the same ``Idempotency-Key``, so it gets
        that work, not a second run of it."""
        self.store.put(CALLS, key, {"idempotency_key": idempotency_key, "state": "unanswered"}, self.grace)

    def idempotency_key(self, key: str) -> str | None:
        """The ``Idempotency-Key`` of this call's unanswered invoke, for its retry to send again."""
        entry = self.store.get(CALLS, key)
        return entry["idempotency_key"] if entry is not None and entry["state"] == "unanswered" else None

    def continues(self, key: str) -> bool:
        """Whether a call with this key would continue work a call started before (kept for its retry,
        or invoked without an answer), rather than start its own."""
        entry = self.store.get(CALLS, key)
        return entry is not None and entry["state"] != "running"

    def attach(self, key: str) -> str | None:
        """The invocation a retry of this call should follow instead of invoking again, if any."""
        deadline = self.clock() + RACE_S
        while True:
            entry = self.store.get(CALLS, key)
            if entry is None or entry["state"] == "unanswered":
                return None
            if entry["state"] != "running":
                self.store.put(CALLS, key, {"invocation": entry["invocation"], "state": "attached"},
                               self.grace + KEPT_S)
                log.bind(invocation_id=entry["invocation"]).info("call.attached")
                return entry["invocation"]
            if self.clock() >= deadline:
                return None  # a deliberate second call while the first still runs: it runs anew
            time.sleep(LOOK_EVERY_S)

    def follow_up(self, binding: str, invocation_id: str) -> str | None:
        """The continuation tool of the key ``binding`` follows a kept invocation: it is attached (so
        the work is not cancelled meanwhile), and its call key returned (``None``: not kept, no longer
        kept, or kept for another key)."""
        kept = self.store.get(INVOCATIONS, invocation_id)
        key = kept["key"] if kept is not None and kept["binding"] == binding else None
        entry = self.store.get(CALLS, key) if key is not None else None
        if key is None or entry is None or entry.get("invocation") != invocation_id:
            return None
        self.store.put(CALLS, key, {"invocation": invocation_id, "state": "attached"}, self.grace + KEPT_S)
        return key

    def finish(self, key: str | None, invocation_id: str | None = None) -> None:
        """The call ended for good (its result was delivered, or it was stopped): forget it."""
        if key is not None:
            self.store.delete(CALLS, key)
        if invocation_id is not None:
            self.store.delete(INVOCATIONS, invocation_id)

    def _watch(self) -> None:
        """Cancel, at the end of its grace period, each kept invocation nobody attached to."""
        while True:
            with self._wake:
                while not self._due or self._due[0][0] > self.clock():
                    self._wake.wait(max(0.0, self._due[0][0] - self.clock()) if self._due else None)
                _, key, token, invocation_id, cancel = heapq.heappop(self._due)
            entry = self.store.get(CALLS, key)
            if entry is None or entry.get("token") != token:
                continue  # delivered, attached, or detached again since: no longer this timer's to end
            self.finish(key, invocation_id)
            log.bind(invocation_id=invocation_id).info("call.abandoned")
            try:
                cancel(invocation_id)
            except Exception:  # the janitor must outlive any one failure
                log.bind(invocation_id=invocation_id).exception("call.cancel_failed")
