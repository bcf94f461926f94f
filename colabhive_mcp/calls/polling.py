"""The sync/async glue: invoke once, then poll with backoff until the work is done.

:func:`run` is the one loop every transport uses. It blocks its thread (``time.sleep``
semantics via ``Event.wait``), reports each change of the invocation through a callback,
stops waiting at once when the cancel event is set, and gives up waiting after ``max_wait``.
Whether the upstream work stops too is the caller's decision (:func:`cancel_upstream`): a host
that gave up waiting is not a user who asked to stop.

The backoff spares the gateway, but a call whose work ends just after a poll learns of it at the
next one: up to ``poll_max_interval`` later, and no later than a quarter of the time it has waited
(or a second, or the gateway's ``Retry-After``: :meth:`Backoff.within`). When the work reports how
far it is, the loop reckons when it should end (:class:`Pace`) and polls then, if that is sooner
than the backoff would: never sooner than the gateway's ``Retry-After``, and at most
:data:`EARLY_POLLS` times per call, so that progress which misjudges itself costs two polls, not a
poll per second.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Literal

from ..gateway.client import Gateway, GatewayError
from ..invocation import Invocation
from ..logs import log

MAX_POLL_FAILURES = 3
MIN_POLL_TIMEOUT_S = 1.0
EARLY_POLLS = 2  # polls a call may make sooner than its backoff, when the work's progress says it ends sooner
EARLY_SLACK_S = 0.1  # an early poll comes this long after the reckoned end (a poll on the dot may beat it)


OutcomeState = Literal["done", "pending", "unknown", "cancelled"]


@dataclass(frozen=True, slots=True)
class Submitted:
    """A call asked for, before the gateway's first answer: what a progress listener hears first."""

    slug: str


Update = Invocation | Submitted  # what a progress listener hears: each change of the work


@dataclass(frozen=True)
class Backoff:
    """Exponential poll intervals with jitter, from ``initial`` up to ``maximum`` seconds, and none longer
    than a ``share`` of the time waited so far, once that share is past ``share_floor`` (:meth:`within`)."""

    initial: float = 0.25
    maximum: float = 5.0
    factor: float = 1.6
    jitter: float = 0.2  # calls that started together soon poll apart
    share: float = 0.25
    share_floor: float = 1.0

    def delays(self) -> Iterator[float]:
        delay = self.initial
        while True:
            yield delay * random.uniform(1 - self.jitter, 1 + self.jitter)
            delay = min(self.maximum, delay * self.factor)

    def within(self, delay: float, waited: float) -> float:
        """``delay``, cut to ``share`` of the ``waited`` seconds, or to ``share_floor`` or ``initial``,
        whichever is longest (jittered downward only: a bound). Work that ends just after a poll is found
        done a quarter of its time late at most (or ``Retry-After``, if longer), rather than up to
        ``maximum`` (a 15 s job 3.4 s late at most rather than 6). It costs polls: for a 15 s job 11
        rather than 8 with the sandbox's ``Retry-After: 1``, 12 or 13 rather than 8 with none; for a
        60 s job 21 or 22 rather than 17; for 300 s 69 or 70 rather than 65."""
        cut = max(self.initial, self.share_floor, self.share * waited)
        return min(delay, cut * random.uniform(1 - self.jitter, 1))

    def spread(self, hint: float) -> float:
        """The gateway's ``Retry-After``, spread upward: calls told the same do not come back at once."""
        return hint * random.uniform(1, 1 + self.jitter)


class Pace:
    """When running work should end, reckoned from the fraction it reports: the rate between the first
    fraction seen while it runs and the latest. Forgotten when the work stops running or reports less
    than before (it started over)."""

    def __init__(self) -> None:
        self._first: tuple[float, float] | None = None  # (when, fraction)
        self._latest: tuple[float, float] | None = None

    def saw(self, invocation: Invocation, now: float) -> None:
        fraction = invocation.fraction if invocation.status == "running" else None
        if fraction is None or (self._latest is not None and fraction < self._latest[1]):
            self._first = self._latest = None
        if fraction is not None:
            if self._first is None:
                self._first = (now, fraction)
            self._latest = (now, fraction)

    def left(self, now: float) -> float | None:
        """Seconds until the work should end (0 or less: it should have); ``None`` until the fraction has moved."""
        if self._first is None or self._latest is None or self._latest[1] <= self._first[1]:
            return None
        (since, before), (at, fraction) = self._first, self._latest
        return at + (1.0 - fraction) * (at - since) / (fraction - before) - now


@dataclass
class Outcome:
    """How a call ended: ``done`` (terminal invocation), ``pending`` (the gateway's latest word is
    that it still runs), ``unknown`` (the wait ended while the gateway was not answering: nobody
    knows where the work stands) or ``cancelled``."""

    state: OutcomeState
    invocation: Invocation | None
    polls: int = 0

    @property
    def invocation_id(self) -> str | None:
        return self.invocation.id if self.invocation else None


def run(gateway: Gateway, slug: str, arguments: dict[str, Any], *, cancelled: threading.Event,
        sync_timeout_s: int = 1, started: Callable[[Invocation], None] | None = None,
        idempotency_key: str | None = None, **follow_options: Any) -> Outcome:
    """Invoke ``slug`` and :func:`follow` it to a terminal state. Raises :class:`GatewayError`
    when the gateway refuses the call or stays unreachable for several polls in a row (then
    naming the invocation, which exists upstream).

    Without an ``on_update`` listener the gateway may hold the invoke ``sync_timeout_s`` seconds,
    which saves a poll for work that finishes within it. ``started`` hears of an invocation that
    did not finish within the invoke (it will be polled).
    """
    if cancelled.is_set():
        return Outcome("cancelled", None)
    # A client that follows progress hears at once that the call started, and the gateway is not
    # asked to hold the invoke: every state of the work (queued, cold start, steps) is reported.
    on_update = follow_options.get("on_update")
    if on_update is not None:
        on_update(Submitted(slug))
    invocation = gateway.invoke(slug, arguments, sync=on_update is None, sync_timeout_s=sync_timeout_s,
                                idempotency_key=idempotency_key)
    if started is not None and not invocation.terminal:
        started(invocation)
    return follow(gateway, invocation, cancelled=cancelled, **follow_options)


def follow(gateway: Gateway, invocation: Invocation, *, cancelled: threading.Event,
           on_update: Callable[[Invocation], None] | None = None, max_wait: float = 300.0,
           backoff: Backoff = Backoff(), heartbeat: float = 10.0,
           clock: Callable[[], float] = time.monotonic) -> Outcome:
    """Poll an invocation until it is terminal, cancelled, or ``max_wait`` has passed.

    ``on_update`` hears of every change, and again every ``heartbeat`` seconds when nothing
    changes (so clients that reset their timeout on progress never give up on a long wait).
    ``cancelled`` ends the wait only: the work goes on upstream unless the caller stops it.
    """
    started = last_report = clock()
    polls, failures, retry_after, early = 0, 0, None, 0
    answered = True  # whether ``invocation`` is the gateway's answer to our latest question
    delays, pace = backoff.delays(), Pace()
    last_seen = None
    while True:
        if invocation.terminal:
            return Outcome("done", invocation, polls)
        if cancelled.is_set():
            return Outcome("cancelled", invocation, polls)
        now, snapshot = clock(), _observable(invocation)
        if answered:  # not the same word again after a poll that failed
            pace.saw(invocation, now)
        if on_update is not None and (snapshot != last_seen or now - last_report >= heartbeat):
            on_update(invocation)
            last_report = now
        last_seen = snapshot
        remaining = started + max_wait - now
        if remaining <= 0:
            return Outcome("pending" if answered else "unknown", invocation, polls)
        hinted = backoff.spread(retry_after) if retry_after else 0.0
        delay = min(max(backoff.within(next(delays), now - started), hinted), remaining)
        left = pace.left(now) if answered and early < EARLY_POLLS else None  # a gateway failing is not asked sooner
        if left is not None and (sooner := max(left + EARLY_SLACK_S, hinted, backoff.initial)) < delay:
            delay, early = sooner, early + 1  # the work should end before the backoff's next poll
        if on_update is not None:
            delay = min(delay, max(0.0, last_report + heartbeat - now))
        if cancelled.wait(delay):
            return Outcome("cancelled", invocation, polls)
        try:  # a poll never holds the call past its wait
            invocation, retry_after = gateway.get_invocation(
                invocation.id, timeout=max(MIN_POLL_TIMEOUT_S, started + max_wait - clock()), polled=True)
            failures, answered = 0, True
        except GatewayError as exc:  # a gateway that says when to come back has not failed (the wait bounds it)
            failures, answered = failures + (not exc.throttled), False
            if not exc.transient or failures >= MAX_POLL_FAILURES:
                raise exc.about(invocation.id) from exc  # the work exists upstream: say which
            retry_after = exc.retry_after
            log.bind(invocation_id=invocation.id, status=exc.status, error=exc.message).warning("invocation.poll_failed")
        polls += 1


def _observable(invocation: Invocation) -> tuple[Any, ...]:
    """The parts of an invocation a client is told about when they change."""
    return invocation.status, invocation.detail, invocation.model_state, invocation.fraction, invocation.step


def cancel_upstream(gateway: Gateway, invocation_id: str) -> None:
    """Ask the gateway to stop the work (best effort: a gateway without the route is left alone)."""
    try:
        gateway.cancel(invocation_id)
    except GatewayError as exc:
        log.bind(invocation_id=invocation_id, error=exc.message).warning("invocation.cancel_failed")


class ProgressTracker:
    """Turns invocation snapshots into MCP progress: a value on a 0–100 scale that only ever
    grows, and a human message ("loading model (cold start)…", "step 2 of 5")."""

    QUEUED_SHARE = 10.0

    def __init__(self) -> None:
        self.value = 0.0
        self.events = 0

    def advance(self, update: Update) -> tuple[float, float, str]:
        self.events += 1
        fraction = update.fraction if isinstance(update, Invocation) and update.status == "running" else None
        if fraction is not None:
            target = self.QUEUED_SHARE + (100.0 - self.QUEUED_SHARE - 1.0) * fraction
        else:  # creep towards the end of the queued share, never reaching it
            target = self.QUEUED_SHARE * (1 - 0.5 ** self.events)
        self.value = round(max(target, self.value + 0.01), 2)
        return self.value, 100.0, status_message(update)


def progress_percent(invocation: Invocation) -> float | None:
    """How far the work says it is, in percent, when it says so."""
    return None if invocation.fraction is None else round(invocation.fraction * 100, 1)


def status_message(update: Update) -> str:
    """A short human sentence for where the work stands."""
    if isinstance(update, Submitted):
        return f"starting {update.slug}…"
    if update.step is not None:
        return update.step
    if update.model_state == "cold":
        return f"loading model (cold start){': ' + update.detail if update.detail else '…'}"
    return f"{update.status}: {update.detail}" if update.detail else f"{update.status}…"
