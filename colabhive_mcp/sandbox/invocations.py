"""Invocations whose status follows from elapsed time, and their thread-safe store."""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable

from .actions import Action, ActionError, Timing
from .contract import API_PREFIX

TERMINAL = frozenset({"succeeded", "completed", "failed", "cancelled"})
IDEMPOTENCY_TTL_S = 24 * 3600.0


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class Invocation:
    """One call of an action. Its outcome is computed at once and revealed when ``timing`` has run out."""

    id: str
    slug: str
    owner: str
    created: float
    timing: Timing
    result: Any = None
    error: str | dict[str, str] | None = None
    done_status: str = "succeeded"
    cancelled_at: float | None = None

    @classmethod
    def start(cls, action: Action, owner: str, args: dict[str, Any], timing: Timing, now: float) -> Invocation:
        """Run ``action`` on ``args`` and wrap the outcome in a new invocation owned by ``owner``."""
        invocation = cls("inv_" + secrets.token_hex(12), action.slug, owner, now, timing, done_status=action.done_status)
        try:
            invocation.result = action.run(args)
        except ActionError as exc:
            invocation.error = exc.error
        return invocation

    def is_terminal(self, now: float) -> bool:
        return self.cancelled_at is not None or now - self.created >= self.timing.total_s

    def view(self, now: float) -> dict[str, Any]:
        """The Invocation JSON as it stands at ``now``."""
        timing = self.timing
        cut = None if self.cancelled_at is None else self.cancelled_at - self.created
        at = now - self.created if cut is None else cut
        status, fields, changed = self._stage(at)
        if cut is not None:
            status, changed = "cancelled", cut
            fields = {"status_detail": "cancelled by the caller", "metrics": {"duration_ms": round(cut * 1000)}}
        body: dict[str, Any] = {"invocation_id": self.id, "action_slug": self.slug, "status": status}
        if timing.model_state is not None:
            body["model_state"] = "cold" if timing.model_state == "cold" and at < timing.queued_s else "warm"
        body.update(fields)
        body["poll_url"] = f"{API_PREFIX}/invocations/{self.id}"
        body["created_at"] = _iso(self.created)
        body["updated_at"] = _iso(self.created + changed)
        return body

    def _stage(self, at: float) -> tuple[str, dict[str, Any], float]:
        """Status, stage-specific fields and when (seconds after creation) the stage began."""
        timing = self.timing
        if at < timing.queued_s:
            return "queued", {"status_detail": timing.queued_detail}, 0.0
        if at < timing.total_s:
            if not timing.steps:
                return "running", {"status_detail": "running"}, timing.queued_s
            step_s = timing.running_s / timing.steps
            step = min(timing.steps, int((at - timing.queued_s) / step_s) + 1)
            message = f"step {step} of {timing.steps}"
            progress = {"progress": 100 * step // timing.steps, "total": 100, "message": message}
            return "running", {"status_detail": message, "progress": progress}, timing.queued_s + (step - 1) * step_s
        metrics = {"duration_ms": round(timing.total_s * 1000), "queued_ms": round(timing.queued_s * 1000)}
        if self.error is not None:
            return "failed", {"error": self.error, "metrics": metrics}, timing.total_s
        return self.done_status, {"result": self.result, "metrics": metrics}, timing.total_s


class Invocations:
    """All invocations by id, with their owners and idempotency keys."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_id: dict[str, Invocation] = {}
        self._by_idempotency_key: dict[tuple[str, str], Invocation] = {}

    def create(
        self, owner: str, idempotency_key: str | None, start: Callable[[], Invocation]
    ) -> tuple[Invocation, bool]:
        """The invocation already made for ``idempotency_key``, or a new one from ``start()``; True if new."""
        with self._lock:
            if idempotency_key:
                known = self._by_idempotency_key.get((owner, idempotency_key))
                if known is not None and time.time() - known.created < IDEMPOTENCY_TTL_S:
                    return known, False
            invocation = start()
            self._by_id[invocation.id] = invocation
            if idempotency_key:
                self._by_idempotency_key[(owner, idempotency_key)] = invocation
            return invocation, True

    def get(self, owner: str, invocation_id: str) -> Invocation | None:
        """The invocation if ``owner`` made it."""
        with self._lock:
            invocation = self._by_id.get(invocation_id)
        return invocation if invocation is not None and invocation.owner == owner else None

    def cancel(self, owner: str, invocation_id: str, now: float) -> Invocation | None:
        """Cancel the invocation unless it already finished; None if ``owner`` has no such invocation."""
        with self._lock:
            invocation = self._by_id.get(invocation_id)
            if invocation is None or invocation.owner != owner:
                return None
            if not invocation.is_terminal(now):
                invocation.cancelled_at = now
            return invocation

    def clear(self) -> None:
        with self._lock:
            self._by_id.clear()
            self._by_idempotency_key.clear()
