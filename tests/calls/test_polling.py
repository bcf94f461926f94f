"""The poll loop: backoff, Retry-After, deadlines, cancellation, transient failures, progress."""

import threading
import time

import pytest

from colabhive_mcp.calls.polling import (EARLY_POLLS, Backoff, ProgressTracker, Submitted, cancel_upstream, follow, run,
                                         status_message)
from colabhive_mcp.gateway.client import GatewayError
from colabhive_mcp.invocation import Invocation

from ..support.clock import FakeClock

FAST = Backoff(initial=0.01, maximum=0.02, jitter=0.0)


class ScriptedGateway:
    """Answers invoke with the first state and each poll with the next one."""

    def __init__(self, *states, retry_after=None):
        self.states = list(states)
        self.retry_after = retry_after
        self.polls, self.cancels, self.invokes = [], [], []

    def invoke(self, slug, arguments, **kwargs):
        self.invokes.append((slug, arguments, kwargs))
        return self._next()

    def get_invocation(self, invocation_id, timeout=None, polled=False):
        self.polls.append(time.monotonic())
        state = self._next()
        if isinstance(state, Exception):
            raise state
        return state, self.retry_after

    def cancel(self, invocation_id):
        self.cancels.append(invocation_id)
        return Invocation(invocation_id, "cancelled")

    def _next(self):
        return self.states.pop(0) if len(self.states) > 1 else self.states[0]


def inv(status, **extra):
    return Invocation.of({"invocation_id": "inv_1", "status": status, **extra})


def test_a_terminal_invoke_answer_needs_no_poll():
    gateway = ScriptedGateway(inv("succeeded", result="hi"))
    outcome = run(gateway, "echo", {"text": "hi"}, cancelled=threading.Event(), backoff=FAST)
    assert outcome.state == "done" and outcome.polls == 0 and gateway.polls == []
    slug, arguments, kwargs = gateway.invokes[0]
    assert kwargs["sync"] is True


def test_a_status_the_contract_does_not_name_is_followed_on_as_work_in_progress():
    """A gateway newer than the contract may name more states; the call is not failed for it."""
    gateway = ScriptedGateway(inv("warming"), inv("warming", status_detail="pulling image"), inv("succeeded", result="x"))
    updates = []
    outcome = run(gateway, "s", {}, cancelled=threading.Event(), on_update=updates.append, backoff=FAST)
    assert outcome.state == "done" and outcome.invocation.result == "x" and outcome.polls == 2
    assert "warming: pulling image" in [status_message(u) for u in updates]


def test_queued_work_is_polled_until_terminal_and_each_change_is_reported():
    gateway = ScriptedGateway(inv("queued"), inv("queued"), inv("running", progress={"progress": 1, "total": 2}),
                              inv("running", progress={"progress": 2, "total": 2}), inv("succeeded", result="x"))
    updates = []
    outcome = run(gateway, "s", {}, cancelled=threading.Event(), on_update=updates.append, backoff=FAST)
    assert outcome.state == "done" and outcome.polls == 4
    assert updates[0] == Submitted("s")
    assert [u.status for u in updates[1:]] == ["queued", "running", "running"]  # a repeat is no news


def test_max_wait_returns_the_pending_invocation():
    gateway = ScriptedGateway(inv("running"))
    outcome = run(gateway, "s", {}, cancelled=threading.Event(), max_wait=0.2, backoff=FAST)
    assert outcome.state == "pending" and outcome.invocation_id == "inv_1"


def test_a_wait_that_ends_after_an_unanswered_poll_is_unknown_not_pending():
    silent = ScriptedGateway(inv("running"), inv("running"), GatewayError("did not answer within 2 s"))
    outcome = run(silent, "s", {}, cancelled=threading.Event(), max_wait=0.3,
                  backoff=Backoff(initial=0.12, maximum=0.12, jitter=0.0))
    assert outcome.state == "unknown" and outcome.invocation_id == "inv_1"
    recovered = ScriptedGateway(inv("running"), GatewayError("did not answer"), inv("running"))
    outcome = run(recovered, "s", {}, cancelled=threading.Event(), max_wait=0.3,
                  backoff=Backoff(initial=0.12, maximum=0.12, jitter=0.0))
    assert outcome.state == "pending"  # the gateway's latest word: still running


@pytest.mark.slow
def test_a_poll_never_waits_past_the_end_of_the_wait():
    class Slow(ScriptedGateway):
        def get_invocation(self, invocation_id, timeout=None, polled=False):
            self.timeouts = [*getattr(self, "timeouts", []), timeout]
            return super().get_invocation(invocation_id)

    slow = Slow(inv("running"))
    run(slow, "s", {}, cancelled=threading.Event(), max_wait=3.0, backoff=Backoff(initial=1.0, maximum=1.0, jitter=0))
    assert all(1.0 <= t <= 2.05 for t in slow.timeouts), slow.timeouts


def test_cancellation_interrupts_the_backoff_sleep_and_leaves_the_decision_to_the_caller():
    gateway = ScriptedGateway(inv("queued"))
    cancelled = threading.Event()
    threading.Timer(0.2, cancelled.set).start()
    started = time.monotonic()
    outcome = run(gateway, "s", {}, cancelled=cancelled, backoff=Backoff(initial=30, maximum=30))
    assert outcome.state == "cancelled" and outcome.invocation_id == "inv_1" and gateway.cancels == []
    assert time.monotonic() - started < 5  # did not sleep out the 30 s interval
    cancel_upstream(gateway, outcome.invocation_id)
    assert gateway.cancels == ["inv_1"]


def test_a_call_cancelled_before_it_starts_never_reaches_the_gateway():
    gateway = ScriptedGateway(inv("succeeded"))
    cancelled = threading.Event()
    cancelled.set()
    assert run(gateway, "s", {}, cancelled=cancelled).state == "cancelled"
    assert gateway.invokes == []


def test_retry_after_is_a_lower_bound_for_the_next_poll():
    gateway = ScriptedGateway(inv("queued"), inv("queued"), inv("succeeded"), retry_after=0.3)
    run(gateway, "s", {}, cancelled=threading.Event(), backoff=FAST)
    assert gateway.polls[1] - gateway.polls[0] >= 0.29


def test_transient_poll_failures_are_tolerated_but_not_forever():
    flaky = ScriptedGateway(inv("queued"), GatewayError("503 busy", 503), inv("succeeded"))
    assert run(flaky, "s", {}, cancelled=threading.Event(), backoff=FAST).state == "done"
    unreachable = GatewayError("cannot reach the gateway")
    dead = ScriptedGateway(inv("queued"), unreachable)
    with pytest.raises(GatewayError) as failed:
        run(dead, "s", {}, cancelled=threading.Event(), backoff=FAST)
    assert len(dead.polls) == 3
    assert failed.value.invocation_id == inv("queued").id and failed.value.message == unreachable.message
    assert unreachable.invocation_id is None  # the gateway's own error is never changed in flight
    gone = ScriptedGateway(inv("queued"), GatewayError("404 not found", 404))
    with pytest.raises(GatewayError):
        run(gone, "s", {}, cancelled=threading.Event(), backoff=FAST)
    assert len(gone.polls) == 1
    garbled = ScriptedGateway(inv("queued"), GatewayError("200 not JSON", 200, garbled=True), inv("succeeded"))
    assert run(garbled, "s", {}, cancelled=threading.Event(), backoff=FAST).state == "done"


def test_a_gateway_that_says_when_to_come_back_has_not_failed_however_often_it_says_so():
    throttled = [GatewayError("429 slow down", 429, retry_after=0.01), GatewayError("503 busy", 503, retry_after=0.01)]
    patient = ScriptedGateway(inv("queued"), *throttled * 3, inv("succeeded"))
    assert run(patient, "s", {}, cancelled=threading.Event(), backoff=FAST).state == "done"
    assert len(patient.polls) == 7
    unsaid = ScriptedGateway(inv("queued"), GatewayError("503 busy", 503))  # no Retry-After: a failure
    with pytest.raises(GatewayError):
        run(unsaid, "s", {}, cancelled=threading.Event(), backoff=FAST)
    assert len(unsaid.polls) == 3


def test_a_call_that_loses_the_gateway_after_its_invoke_names_its_invocation():
    lost = ScriptedGateway(inv("queued"), GatewayError("cannot reach the gateway"))
    with pytest.raises(GatewayError) as raised:
        run(lost, "s", {}, cancelled=threading.Event(), backoff=FAST)
    assert raised.value.invocation_id == inv("queued").id


def test_a_retry_after_hint_is_spread_upward_so_waiting_calls_do_not_poll_in_lockstep():
    backoff = Backoff(jitter=0.2)
    spread = [backoff.spread(2.0) for _ in range(200)]
    assert all(2.0 <= s <= 2.4 for s in spread) and max(spread) - min(spread) > 0.2
    assert Backoff(jitter=0.0).spread(2.0) == 2.0


def test_backoff_grows_to_its_cap_with_bounded_jitter():
    delays = Backoff(initial=0.5, maximum=4, factor=2, jitter=0.1).delays()
    values = [next(delays) for _ in range(8)]
    assert 0.45 <= values[0] <= 0.55 and all(3.6 <= v <= 4.4 for v in values[4:])


def test_progress_only_ever_grows_and_says_something_human():
    tracker = ProgressTracker()
    states = [inv("queued", model_state="cold", status_detail="loading weights"), inv("queued"),
              inv("running", progress={"progress": 1, "total": 4, "message": "step 1 of 4"}),
              inv("running", progress={"progress": 1, "total": 4, "message": "step 1 of 4"}),
              inv("running", progress={"progress": 3, "total": 4})]
    reports = [tracker.advance(s) for s in states]
    values = [r[0] for r in reports]
    assert values == sorted(values) and len(set(values)) == len(values) and values[-1] < 100
    assert reports[0][2] == "loading model (cold start): loading weights"
    assert reports[2][2] == "step 1 of 4"
    assert all(r[1] == 100.0 for r in reports)


def test_status_messages():
    assert status_message(inv("queued", status_detail="waiting for a GPU")) == "queued: waiting for a GPU"
    assert status_message(inv("running")) == "running…"
    assert status_message(Submitted("echo")) == "starting echo…"


def test_a_heartbeat_keeps_reporting_when_nothing_changes():
    gateway = ScriptedGateway(inv("queued", status_detail="waiting for a GPU"))
    updates = []
    outcome = run(gateway, "s", {}, cancelled=threading.Event(), on_update=updates.append, max_wait=0.55,
                  heartbeat=0.1, backoff=Backoff(initial=5, maximum=5))
    assert outcome.state == "pending"
    assert 4 <= len(updates) <= 7  # one at once, then one per heartbeat despite the 5 s backoff


class Job:
    """A gateway running one job of ``seconds`` on a fake clock, with ``Retry-After: 1`` (or
    ``retry_after``; ``None``: none). Its progress says how much is done (``claims``: the fraction it
    says at a given elapsed time; ``None``: it says nothing)."""

    def __init__(self, clock, seconds, claims, fails_after=None, retry_after=1.0):
        self.clock, self.seconds, self.claims, self.fails_after = clock, seconds, claims, fails_after
        self.retry_after = retry_after
        self.started, self.polls, self.at, self.failed = clock.now, 0, [], []

    def get_invocation(self, invocation_id, timeout=None, polled=False):
        self.polls += 1
        elapsed = self.clock.now - self.started
        self.at.append(elapsed)
        if self.fails_after is not None and elapsed >= self.fails_after and not self.failed:
            self.failed.append(elapsed)
            raise GatewayError("busy", 503)  # once, and with no Retry-After
        if elapsed >= self.seconds:
            return inv("succeeded", result="done"), None
        claimed = self.claims(elapsed, self.seconds)
        return (inv("running", **({} if claimed is None else {"progress": {"progress": claimed, "total": 1}})),
                self.retry_after)


class Sleeper:
    """A cancel event that is never set, whose wait lets the fake clock's time pass."""

    def __init__(self, clock):
        self.clock = clock

    def is_set(self):
        return False

    def wait(self, seconds):
        self.clock.advance(seconds)
        return False


def waited(seconds, claims, fails_after=None, backoff=Backoff(jitter=0.0), retry_after=1.0):
    """How late a followed job of ``seconds`` was found done, and the polls it took (by default the default
    backoff without jitter); every poll came at least ``Retry-After`` after an answered one."""
    clock = FakeClock()
    job = Job(clock, seconds, claims, fails_after, retry_after)
    outcome = follow(job, inv("running"), cancelled=Sleeper(clock), clock=clock, backoff=backoff)
    assert outcome.state == "done"
    answered = [at for at in job.at if at not in job.failed]
    assert all(later - at >= (retry_after or 0) for at, later in zip(job.at, job.at[1:]) if at in answered), job.at
    return clock.now - job.started - seconds, job.polls, job


def test_work_that_reports_progress_is_polled_when_it_should_end_not_at_the_next_backoff():
    """A 31 s job, which ends just after a poll, is found done 4.3 s late by the backoff (its interval is
    5 s by then), and on time when it says how far it is, with no more polls."""
    late, polls, _ = waited(31, lambda elapsed, seconds: None)
    assert late > 4
    on_time, polls_on_time, _ = waited(31, lambda elapsed, seconds: elapsed / seconds)
    assert on_time <= 0.5 and polls_on_time <= polls


def test_work_that_says_nothing_is_found_done_at_most_a_quarter_of_its_time_late():
    """However a job's end falls between polls, it is found done within a quarter of its time (never
    sooner than Retry-After allows, 1 s here; never more than the longest interval, 5 s): a 7.75 s job
    at most 1.9 s late, where the growing backoff alone was 4 s late. With jitter too (Retry-After is
    spread up to 1.2 s, the longest interval to 6 s), which never stretches the quarter."""
    for seconds in [quarters / 4 for quarters in range(8, 161)]:  # 2 to 40 s
        late, _, _ = waited(seconds, lambda elapsed, seconds: None)
        assert late <= max(1.0, min(5.0, seconds / 4)) + 1e-9, (seconds, late)
        for _ in range(5):
            late, _, _ = waited(seconds, lambda elapsed, seconds: None, backoff=Backoff())
            assert late <= max(1.2, min(6.0, seconds / 4)) + 1e-9, (seconds, late)


def test_a_gateway_without_retry_after_is_polled_as_the_backoff_says_until_a_quarter_is_longer():
    """With no Retry-After, the first polls follow the backoff (two in the first second), and the
    quarter of the time waited cuts intervals only once it is past a second: a 15 s job takes 12 polls
    (8 by the backoff alone), a 60 s job 21 (17)."""
    _, polls, job = waited(15, lambda elapsed, seconds: None, retry_after=None)
    assert sum(1 for at in job.at if at < 1.0) == 2 and polls == 12
    late, polls, _ = waited(60, lambda elapsed, seconds: None, retry_after=None)
    assert polls == 21 and late <= 5.0


def test_the_quarter_never_polls_sooner_than_the_first_interval_set():
    """``poll_initial`` of 2 s: the quarter of the time waited never brings a poll sooner than that."""
    _, _, job = waited(20, lambda elapsed, seconds: None, retry_after=None, backoff=Backoff(initial=2.0, jitter=0.0))
    assert job.at[0] == 2.0 and all(later - at >= 2.0 for at, later in zip(job.at, job.at[1:])), job.at


def test_progress_that_misjudges_the_end_costs_at_most_two_early_polls():
    """Progress that runs ahead (it says the 60 s job is 99 % done after 20 s) brings two polls
    forward, then the backoff has its way again."""
    _, polls, _ = waited(60, lambda elapsed, seconds: None)
    _, misjudged, _ = waited(60, lambda elapsed, seconds: min(0.99, elapsed / 20))
    assert polls < misjudged <= polls + EARLY_POLLS


def test_a_poll_that_failed_is_followed_by_the_backoff_not_by_an_early_poll():
    """The work said it would end at 10 s; the poll then fails (a 503 with no Retry-After): the next
    poll waits as the backoff says, rather than coming at once because the work should be done."""
    _, _, job = waited(60, lambda elapsed, seconds: min(0.99, elapsed / 10), fails_after=10)
    [failed] = job.failed
    after = job.at[job.at.index(failed) + 1]
    assert after - failed >= 1.0, job.at
