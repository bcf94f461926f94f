"""One invocation (a piece of work at the gateway) as the gateway last described it: the value the
gateway client makes of each answer, and that the calls, the tenants and the protocol's tasks read.
It imports nothing of the house, so that none of them needs the gateway client to know it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# The contract's states: queued, running, succeeded (= completed), failed, cancelled. A state it
# does not name (a gateway newer than it) is kept as sent, and read as still working.
TERMINAL = frozenset({"succeeded", "completed", "failed", "cancelled"})


@dataclass(frozen=True, slots=True)
class Invocation:
    """An invocation as the gateway last described it: the fields of the contract its consumers
    read, each checked as it is read (:meth:`of`); the gateway's other fields are not kept."""

    id: str  # the gateway's name for the work ("invocation_id"): the contract gives every invocation one
    status: str  # "queued", "running", "succeeded", "completed", "failed", "cancelled", or a newer state
    slug: str | None = None  # the action's ("action_slug")
    detail: str | None = None  # "status_detail": "loading weights"
    model_state: str | None = None  # "cold" or "warm"
    fraction: float | None = None  # how far the work says it is, 0 to 1 ("progress" / "total")
    step: str | None = None  # the work's own word on where it is ("progress"."message": "step 2 of 5")
    result: Any = None  # the action's answer: any JSON (the contract names the shapes seen)
    error: str | dict[str, Any] | None = None  # why it failed: text, or {"code", "message"}
    updated_at: str | None = None  # when it last changed, by the gateway's clock (ISO 8601)

    @classmethod
    def of(cls, body: Any) -> Invocation:
        """The invocation a JSON body describes. Raises :class:`ValueError` saying what is missing
        (a status, the id); a field of the wrong type is as good as absent. A status the contract does
        not name (a gateway newer than it) is kept, and is not terminal: the work is followed on."""
        if not isinstance(body, dict) or not isinstance(body.get("status"), str):
            raise ValueError("no 'status'")
        status, name, progress = body["status"], body.get("invocation_id"), body.get("progress")
        if not isinstance(name, str) or not name:
            raise ValueError("no 'invocation_id'")
        if not isinstance(progress, dict):
            progress = {}
        error = body.get("error")
        return cls(name, status, slug=_text(body.get("action_slug")),
                   detail=_text(body.get("status_detail")), model_state=_text(body.get("model_state")),
                   fraction=_fraction(progress.get("progress"), progress.get("total")),
                   step=_text(progress.get("message")), result=body.get("result"),
                   error=error if isinstance(error, (str, dict)) else None, updated_at=_text(body.get("updated_at")))

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    @property
    def succeeded(self) -> bool:
        return self.status in ("succeeded", "completed")  # the same, by the contract


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _fraction(done: Any, total: Any) -> float | None:
    if isinstance(done, (int, float)) and isinstance(total, (int, float)) and total > 0:
        return max(0.0, min(1.0, done / total))
    return None
