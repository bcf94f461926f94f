"""Why a request stopped: a user's cancel stops the upstream work; a host that gave up waiting does not.

Hosts abandon tool calls at their own deadline (the TypeScript SDK after 60 s, Claude Desktop,
Claude Code...) and say so in ``notifications/cancelled`` ("Request timed out", "timed out after
20s"; :func:`colabhive_mcp.protocol.plan.reason_of` reads it). The work they abandoned is kept for
a retry to attach to (:mod:`colabhive_mcp.detached`); anything else stops it upstream at once. A connection that closes gives no reason: one that had
waited long enough for a host to give up (``hang_up_keeps_after``) counts as a host giving up.
"""

from __future__ import annotations

import threading
from typing import Final, Literal

Reason = Literal["user", "timeout", "shutdown", "ended"]
USER: Final = "user"  # stop the work: the user (or the client) asked for it
TIMEOUT: Final = "timeout"  # the host gave up waiting: keep the work for a retry
SHUTDOWN: Final = "shutdown"  # the server is stopping: stop the work, and answer
ENDED: Final = "ended"  # the server ends a long-lived request (a listen at stream_max_age): answer it
REASONS: Final[tuple[Reason, ...]] = (USER, TIMEOUT, SHUTDOWN, ENDED)


class Cancellation(threading.Event):
    """A request's cancel event that remembers why it was set (``None``: a connection closed)."""

    def __init__(self) -> None:
        super().__init__()
        self.reason: Reason | None = None

    def cancel(self, reason: Reason | None) -> None:
        if not self.is_set():
            self.reason = reason
        self.set()

    @property
    def by_server(self) -> bool:
        """Whether the server ended the request (its client still waits for an answer)."""
        return self.reason in (SHUTDOWN, ENDED)


def keeps_work(cancelled: threading.Event, waited: float, hang_up_keeps_after: float) -> bool:
    """Whether the upstream work of a cancelled call should outlive it (for a retry to attach to):
    its host timed out, or its connection closed after ``hang_up_keeps_after`` seconds or more."""
    reason = getattr(cancelled, "reason", None)
    if reason is None:
        return waited >= hang_up_keeps_after
    return reason == TIMEOUT
