"""Why a request stopped: a user's cancel stops the upstream work; a host that gave up waiting does not.

Hosts abandon tool calls at their own deadline (the TypeScript SDK after 60 s, Claude Desktop,
Claude Code...) and say so in ``notifications/cancelled`` ("Request timed out", "timed out after
20s"; :func:`colabhive_mcp.protocol.plan.reason_of` reads it). The work they abandoned is kept for
a retry to attach to (:mod:`colabhive_mcp.calls.detached`); anything else stops it upstream at once.

A connection that closes gives no reason. A 2026 client cancels by closing its stream (its revision
says a closed stream MUST be taken as a cancellation; a host with a cutoff is served before it, by
the bounded wait and its continuation). A handshake-era client's disconnect is never its cancel (its
revisions say so): unless it says why just after (the TypeScript SDK closes an aborted request, then
sends ``notifications/cancelled``), it counts as a host giving up.
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
SAYS_WHY_S = 1.0  # how long a handshake-era client's hang-up waits for the notifications/cancelled sent with it


class Cancellation(threading.Event):
    """A request's cancel event that remembers why it was set (``None``: a connection closed). The
    first reason given is kept, even when it comes after the connection closed."""

    def __init__(self) -> None:
        super().__init__()
        self.reason: Reason | None = None
        self._explained = threading.Event()
        self._explaining = threading.Lock()  # one reason wins, even when two are given at once

    def cancel(self, reason: Reason | None) -> None:
        """Set, with ``reason`` unless one was given before (a reason after a hang-up is kept: a
        shutdown's too, and then the request is answered, though nobody may read it)."""
        with self._explaining:
            if reason is not None and not self._explained.is_set():
                self.reason = reason
                self._explained.set()
        self.set()

    def explained(self, timeout: float) -> Reason | None:
        """The reason, waiting up to ``timeout`` seconds for one when none was given yet."""
        self._explained.wait(timeout)
        return self.reason

    @property
    def by_server(self) -> bool:
        """Whether the server ended the request (its client still waits for an answer)."""
        return self.reason in (SHUTDOWN, ENDED)


def keeps_work(cancelled: threading.Event, modern: bool) -> bool:
    """Whether the upstream work of a cancelled call should outlive it (for a retry to attach to): its
    host timed out, or its handshake-era client hung up and said no more within :data:`SAYS_WHY_S`
    (a ``modern`` client's hang-up is its cancel)."""
    reason = getattr(cancelled, "reason", None)
    if reason is None and not modern and isinstance(cancelled, Cancellation):
        reason = cancelled.explained(SAYS_WHY_S)
    if reason is None:
        return not modern
    return reason == TIMEOUT

