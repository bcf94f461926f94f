"""Upstream faults, end to end through the hosted server (gunicorn, 2026-07-28 stateless client).

Every case injects one gateway fault with the sandbox and checks three things:

(a) the affected call ends within a bound derived from the server's settings, with a clear
    answer (the result, an ``isError`` result or a JSON-RPC error saying what happened, never
    a stack trace or a key);
(b) the same server keeps serving: a call by another key (DEMO_KEY_B) right after, or during
    a hang, succeeds;
(c) retries never start a second invocation upstream: every invoke attempt of one tool call
    carries the same Idempotency-Key and the sandbox holds at most one invocation for it.

Faults are scoped to the slug of the faulted call, so the other key's call is never hit by them.
"""

import json
import threading
import time
from dataclasses import dataclass

import pytest

from colabhive_mcp.calls.polling import MAX_POLL_FAILURES
from colabhive_mcp.keys import ApiKey
from colabhive_mcp.sandbox import DEMO_KEY, DEMO_KEY_B, Sandbox
from colabhive_mcp.sandbox.contract import fingerprint

from ..support.http_client import initialize, modern, rpc
from ..support.http_server import HttpServer, free_port
from ..support.waiting import wait_until

pytestmark = pytest.mark.slow

# -- the settings of the servers under test, and the bounds they imply -------------------------

TIMEOUT = 2  # COLABHIVE_REQUEST_TIMEOUT: one gateway response
RETRIES = 2  # COLABHIVE_RETRIES: of connection errors and 502/503/504
SYNC = 1  # COLABHIVE_SYNC_TIMEOUT: the gateway may hold an invoke this long (added to its timeout)
POLL_MAX_WAIT = 10  # COLABHIVE_POLL_MAX_WAIT: for the faulted short jobs
BATCH_WAIT = 2  # COLABHIVE_POLL_MAX_WAIT_BY batch=…: for the job that never ends
ENV = {"COLABHIVE_REQUEST_TIMEOUT": str(TIMEOUT), "COLABHIVE_RETRIES": str(RETRIES),
       "COLABHIVE_SYNC_TIMEOUT": str(SYNC), "COLABHIVE_POLL_MAX_WAIT": str(POLL_MAX_WAIT),
       "COLABHIVE_POLL_MAX_WAIT_BY": f"batch={BATCH_WAIT}"}

ATTEMPTS = RETRIES + 1
BACKOFF_S = 0.2 * (2 ** RETRIES - 1)  # the gateway client's retry delays, all of them
SLACK = 5.0  # scheduling, a cold tenant's manifest pages, the test client: generous on purpose
MANIFEST_BOUND = ATTEMPTS * TIMEOUT + BACKOFF_S + SLACK
INVOKE_BOUND = ATTEMPTS * (TIMEOUT + SYNC) + BACKOFF_S + SLACK
# a poll loop returns by POLL_MAX_WAIT at the latest, plus the poll in flight at that moment
POLL_BOUND = (TIMEOUT + SYNC) + POLL_MAX_WAIT + ATTEMPTS * TIMEOUT + BACKOFF_S + SLACK
NEVER_ENDS_BOUND = (TIMEOUT + SYNC) + BATCH_WAIT + ATTEMPTS * TIMEOUT + BACKOFF_S + SLACK
HANG_S = TIMEOUT + SYNC + 1.0  # the sandbox holds a hung invoke longer than the client waits for it
POLL_HANG_S = TIMEOUT + 1.0  # (a poll or manifest request is waited for TIMEOUT)

# the faulted calls (by DEMO_KEY) and the ordinary call of the other key
INSTANT = ("echo", {"text": "fault-matrix"}, "fault-matrix")  # terminal in the invoke answer
SHORT_JOB = ("test_reconnection", {}, "Reconnection test completed successfully.")  # a 2 s job: polled
OTHER = ("hive-chat", {"prompt": "still serving"}, "still serving")
PERSISTENT = 50  # a fault "count" no retry budget gets through


class LoggedServer:
    """An :class:`HttpServer` with the test settings, whose JSON log events a test can read."""

    def __init__(self, api_url, *args, env=None):
        self.server = HttpServer(api_url, *args, env={**ENV, **(env or {})})
        self.url = self.server.url

    def mark(self):
        return len(self.server.lines)

    def text_since(self, mark):
        return self.server.stderr(mark)

    def events_since(self, mark, name=None):
        events = []
        for line in self.text_since(mark).splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict) and (name is None or event.get("event") == name):
                events.append(event)
        return events

    def stop(self):
        return self.server.stop()


@pytest.fixture(scope="module")
def faulty(gateway_sandbox):
    """Two gunicorn workers with short timeouts, on the session's sandbox."""
    server = LoggedServer(gateway_sandbox.url, "--http-workers", "2")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def revalidating(gateway_sandbox):
    """Two workers (as deployed: a worker that never fetched a tenant's manifest still serves the
    instance's last good copy) that revalidate the manifest on every request, before answering it
    (TTL 0, no stale-while-revalidate)."""
    server = LoggedServer(gateway_sandbox.url, "--http-workers", "2", env={
        "COLABHIVE_MANIFEST_TTL": "0", "COLABHIVE_MANIFEST_STALE_WHILE_REVALIDATE": "0"})
    yield server
    server.stop()


@pytest.fixture(scope="module")
def behind(gateway_sandbox):
    """Two workers at the default stale-while-revalidate window, with a one-second TTL."""
    server = LoggedServer(gateway_sandbox.url, "--http-workers", "2", env={"COLABHIVE_MANIFEST_TTL": "1"})
    yield server
    server.stop()


# -- helpers ------------------------------------------------------------------------------------

@dataclass
class Answer:
    status: int  # HTTP status
    kind: str  # "ok", "error" (an isError result), "rpc_error" (a JSON-RPC error), "broken"
    text: str  # the content text, or the JSON-RPC error message
    body: str  # the whole HTTP body
    seconds: float
    result: dict | None = None


def answer_of(response, seconds):
    try:
        body = response.json()
    except ValueError:
        return Answer(response.status_code, "broken", response.text, response.text, seconds)
    if "error" in body:
        return Answer(response.status_code, "rpc_error", body["error"].get("message", ""), response.text, seconds)
    result = body.get("result") or {}
    text = "\n".join(block.get("text", "") for block in result.get("content", []))
    return Answer(response.status_code, "error" if result.get("isError") else "ok", text, response.text, seconds,
                  result)


def call(server, name, arguments, key=DEMO_KEY):
    started = time.monotonic()
    response = modern(server.url, "tools/call", {"name": name, "arguments": arguments}, key=key)
    return answer_of(response, time.monotonic() - started)


def list_tools(server, key=DEMO_KEY):
    started = time.monotonic()
    response = modern(server.url, "tools/list", key=key)
    answer = answer_of(response, time.monotonic() - started)
    if answer.kind == "ok":
        answer.text = ",".join(sorted(t["name"] for t in answer.result.get("tools", [])))
    return answer


def in_background(function, *args, **kwargs):
    """Run ``function`` on a thread; ``outcome()`` joins it and returns its value."""
    box = []
    thread = threading.Thread(target=lambda: box.append(function(*args, **kwargs)), daemon=True)
    thread.start()

    def outcome(timeout=120):
        thread.join(timeout)
        assert box, f"the call did not end within {timeout} s"
        return box[0]

    return thread, outcome


def struck(fault, count):
    """How many requests a rule added with ``count`` has hit so far."""
    return count - (fault.count or 0)


def settle(sandbox, rules):
    """Wait until every request a hang rule struck has ended upstream (the sandbox journals a hung
    request only when it drops it), so nothing of this test lands in the next test's journal."""
    hung = sum(struck(fault, count) for fault, count in rules if fault.kind == "hang")
    assert wait_until(lambda: sum(e["fault"] == "hang" for e in sandbox.journal_entries()) >= hung, HANG_S + 10)


def assert_clear(answer):
    """An answer a person can read: JSON-RPC over a 200, no stack trace, no key."""
    assert answer.status == 200, answer.body
    assert answer.kind != "broken", answer.body
    for leak in ("Traceback", 'File "', "hive_demo", "Bearer", "Internal error"):
        assert leak not in answer.body, f"{leak!r} in the answer: {answer.body}"


def assert_server_log_clean(server, mark):
    text = server.text_since(mark)
    assert "hive_demo" not in text and "Traceback" not in text
    assert not server.events_since(mark, "mcp.internal_error")


def upstream(sandbox, key):
    """The key's invoke requests (as journaled) and its invocations (as the sandbox holds them)."""
    invokes = [e for e in sandbox.journal_entries() if e["route"] == "invoke" and e["key"] == fingerprint(key)]
    store = sandbox.app.state.invocations
    with store._lock:
        invocations = [i for i in store._by_id.values() if i.owner == key]
    return invokes, invocations


def assert_one_invocation_at_most(sandbox, key, expected):
    """(c): all invoke attempts share one Idempotency-Key and at most one invocation exists."""
    invokes, invocations = upstream(sandbox, key)
    assert len({e["idempotency_key"] for e in invokes}) <= 1 and all(e["idempotency_key"] for e in invokes), invokes
    assert len({e["invocation_id"] for e in invokes if e["invocation_id"]}) <= 1, invokes
    assert len(invocations) == expected, [i.id for i in invocations]
    return invokes, invocations


def assert_other_key_served(server, sandbox):
    """(b): an ordinary call by the other key succeeds (and makes exactly one invocation)."""
    name, arguments, expected = OTHER
    before = len(upstream(sandbox, DEMO_KEY_B)[1])
    answer = call(server, name, arguments, key=DEMO_KEY_B)
    assert_clear(answer)
    assert answer.kind == "ok" and expected in answer.text, answer.body
    assert answer.seconds < INVOKE_BOUND
    assert len(upstream(sandbox, DEMO_KEY_B)[1]) == before + 1
    return answer


# -- the matrix: faults on the invoke and poll routes ----------------------------------------------

@dataclass
class Case:
    faults: list  # sandbox.faults.add(...) arguments; the slug is the faulted call's
    call: tuple = INSTANT
    expect: str = "ok"  # "ok", or "error" with ``says`` in the text
    says: tuple = ()
    invokes: int = 1  # invoke attempts upstream
    invocations: int = 1  # invocations the sandbox ends up holding for the call
    bound: float = INVOKE_BOUND
    faulted_polls: int | None = None  # polls the fault struck, when the poll loop must give up


def F(route, kind, count=1, **params):
    return {"route": route, "kind": kind, "count": count, **params}


CASES = {
    # 5xx bursts shorter than the retry budget: the call succeeds on the same invocation
    **{f"invoke-{status}-burst": Case([F("invoke", "status", RETRIES, status=status)], invokes=ATTEMPTS)
       for status in (502, 503, 504)},
    "invoke-503-persistent": Case([F("invoke", "status", PERSISTENT, status=503)], expect="error",
                                  says=("503", "injected failure"), invokes=ATTEMPTS, invocations=0),
    "poll-502-burst": Case([F("poll", "status", RETRIES, status=502)], call=SHORT_JOB, bound=POLL_BOUND),
    # a 503 that says when to come back: the invoke is retried no sooner; polls told so are not failures
    "invoke-503-retry-after": Case([F("invoke", "status", status=503, retry_after=1)], invokes=2),
    "poll-429-past-the-failure-budget": Case([F("poll", "rate_limit", MAX_POLL_FAILURES + 2, retry_after=1)],
                                             call=SHORT_JOB, bound=POLL_BOUND),
    # 429: not retried at once; the caller is told when to come back
    "invoke-429": Case([F("invoke", "rate_limit", retry_after=7)], expect="error",
                       says=("429", "Retry after 7 s"), invocations=0),
    # connection resets: before the gateway acted, after it created the invocation, and mid-poll
    "invoke-reset": Case([F("invoke", "reset")], invokes=2),
    "invoke-reset-after-create": Case([F("invoke", "reset", after=True)], invokes=2),
    "invoke-reset-after-create-persistent": Case([F("invoke", "reset", PERSISTENT, after=True)], expect="error",
                                                 says=("cannot reach the gateway",), invokes=ATTEMPTS),
    "poll-reset": Case([F("poll", "reset")], call=SHORT_JOB, bound=POLL_BOUND),
    "poll-reset-persistent": Case([F("poll", "reset", PERSISTENT)], call=SHORT_JOB, expect="error",
                                  says=("cannot reach the gateway",), bound=POLL_BOUND,
                                  faulted_polls=MAX_POLL_FAILURES * ATTEMPTS),
    # a gateway that accepts the connection and never answers
    "invoke-hang": Case([F("invoke", "hang", seconds=HANG_S)], expect="error",
                        says=(f"did not answer within {TIMEOUT + SYNC:g} s",), invocations=0),
    "invoke-hang-after-create": Case([F("invoke", "hang", seconds=HANG_S, after=True)], expect="error",
                                     says=(f"did not answer within {TIMEOUT + SYNC:g} s",)),
    "poll-hang-once": Case([F("poll", "hang", seconds=POLL_HANG_S)], call=SHORT_JOB, bound=POLL_BOUND),
    "poll-hang-persistent": Case([F("poll", "hang", PERSISTENT, seconds=POLL_HANG_S)], call=SHORT_JOB, expect="error",
                                 says=(f"did not answer within {TIMEOUT:g} s",), bound=POLL_BOUND,
                                 faulted_polls=MAX_POLL_FAILURES),  # a timed-out GET is not retried
    # bodies cut short, not JSON, or a broken gzip stream
    "invoke-truncated": Case([F("invoke", "truncate")], invokes=2),
    "invoke-truncated-after-create": Case([F("invoke", "truncate", after=True)], invokes=2),
    "invoke-truncated-persistent": Case([F("invoke", "truncate", PERSISTENT)], expect="error",
                                        says=("cut short",), invokes=ATTEMPTS, invocations=0),
    "poll-truncated": Case([F("poll", "truncate")], call=SHORT_JOB, bound=POLL_BOUND),
    "invoke-garbage": Case([F("invoke", "garbage")], expect="error", says=("not JSON",), invocations=0),
    "invoke-garbage-after-create": Case([F("invoke", "garbage", after=True)], expect="error", says=("not JSON",)),
    "poll-garbage": Case([F("poll", "garbage")], call=SHORT_JOB, bound=POLL_BOUND),  # a glitch: polled again
    "poll-garbage-persistent": Case([F("poll", "garbage", PERSISTENT)], call=SHORT_JOB, expect="error",
                                    says=("not JSON", "do not run it again"), bound=POLL_BOUND,
                                    faulted_polls=MAX_POLL_FAILURES),
    "invoke-bad-gzip": Case([F("invoke", "bad_gzip")], invokes=2),
    "invoke-bad-gzip-after-create": Case([F("invoke", "bad_gzip", after=True)], invokes=2),
    "invoke-bad-gzip-persistent": Case([F("invoke", "bad_gzip", PERSISTENT)], expect="error",
                                       says=("gzip",), invokes=ATTEMPTS, invocations=0),
    "poll-bad-gzip": Case([F("poll", "bad_gzip")], call=SHORT_JOB, bound=POLL_BOUND),
}


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_fault_matrix(faulty, sandbox, case):
    name, arguments, expected = case.call
    mark = faulty.mark()
    rules = [(sandbox.faults.add(slug=name, **spec), spec["count"]) for spec in case.faults]
    hangs = any(fault.kind == "hang" for fault, _ in rules)

    thread, outcome = in_background(call, faulty, name, arguments)
    if hangs:  # (b) during the hang: the other key is served while this call waits
        assert wait_until(lambda: struck(*rules[0]) > 0, 15), "the hang was never reached"
        assert_other_key_served(faulty, sandbox)
        assert thread.is_alive(), "the other key's call should have been served while the gateway hung"
    answer = outcome()

    # (a) ends within its bound, with a clear answer
    assert_clear(answer)
    assert answer.seconds < case.bound, f"{answer.seconds:.1f} s (bound {case.bound:.1f} s): {answer.body}"
    if case.expect == "ok":
        assert answer.kind == "ok" and expected in answer.text, answer.body
    else:
        assert answer.kind == "error", answer.body
        for words in case.says:
            assert words in answer.text, answer.body
    assert all(struck(fault, count) > 0 for fault, count in rules), "the fault was never hit"
    settle(sandbox, rules)

    # (b) right after: the other key's ordinary call succeeds
    assert_other_key_served(faulty, sandbox)

    # (c) one invocation at most, every attempt under the same Idempotency-Key
    invokes, invocations = assert_one_invocation_at_most(sandbox, DEMO_KEY, case.invocations)
    assert len(invokes) == case.invokes, [(e["status"], e["fault"]) for e in invokes]
    if invocations:
        assert {e["invocation_id"] for e in invokes if e["invocation_id"]} <= {invocations[0].id}
    if case.faulted_polls is not None:  # the poll loop gave up after its budget, not before or never
        polls = [e for e in sandbox.journal_entries() if e["route"] == "poll" and e["key"] == fingerprint(DEMO_KEY)]
        assert sum(e["fault"] is not None for e in polls) == case.faulted_polls, polls
    assert_server_log_clean(faulty, mark)


def test_the_same_call_after_an_unanswered_invoke_gets_the_work_it_started(faulty, sandbox):
    """The invoke made its invocation, but no answer came in time: the same call again (on either
    worker) sends the same Idempotency-Key, and gets that invocation's result."""
    name, arguments, expected = INSTANT
    rules = [(sandbox.faults.add(slug=name, **F("invoke", "hang", seconds=HANG_S, after=True)), 1)]
    first = call(faulty, name, arguments)
    assert first.kind == "error" and "without running it twice" in first.text, first.body
    settle(sandbox, rules)
    again = call(faulty, name, arguments)
    assert again.kind == "ok" and expected in again.text, again.body
    invokes, _ = assert_one_invocation_at_most(sandbox, DEMO_KEY, 1)
    assert len(invokes) == 2


def test_a_rate_limited_poll_waits_for_retry_after_then_succeeds(faulty, sandbox, journal):
    """A 429 on a poll is not the call's end: the next poll comes after Retry-After, not sooner."""
    name, arguments, expected = SHORT_JOB
    mark = faulty.mark()
    sandbox.faults.add(route="poll", kind="rate_limit", retry_after=2, slug=name)
    answer = call(faulty, name, arguments)
    assert_clear(answer)
    assert answer.kind == "ok" and expected in answer.text and answer.seconds < POLL_BOUND, answer.body
    polls = journal("poll")
    assert [e["fault"] for e in polls][:2] == ["rate_limit", None]
    assert polls[1]["t"] - polls[0]["t"] >= 2 * 0.95  # the hint was honoured (a lower bound only)
    assert_other_key_served(faulty, sandbox)
    assert_one_invocation_at_most(sandbox, DEMO_KEY, 1)
    assert_server_log_clean(faulty, mark)


def test_an_invocation_that_never_ends_returns_a_handle_in_time(faulty, sandbox):
    """A job far longer than poll_max_wait: the call returns a pending result naming the invocation."""
    mark = faulty.mark()
    answer = call(faulty, "batch-report", {"seconds": 600})
    assert_clear(answer)
    assert BATCH_WAIT <= answer.seconds < NEVER_ENDS_BOUND, f"{answer.seconds:.1f} s"
    assert answer.kind == "ok", answer.body  # pending is not an error
    (invocation,) = assert_one_invocation_at_most(sandbox, DEMO_KEY, 1)[1]
    assert invocation.id in answer.text and "still" in answer.text, answer.body
    assert "colabhive__wait_for_result" in answer.text  # how to follow up
    follow_up = call(faulty, "colabhive__wait_for_result", {"invocation_id": invocation.id, "wait_s": 0})
    assert follow_up.kind == "ok" and invocation.id in follow_up.text and follow_up.seconds < INVOKE_BOUND
    assert_other_key_served(faulty, sandbox)
    assert len(upstream(sandbox, DEMO_KEY)[1]) == 1  # following up started nothing
    assert_server_log_clean(faulty, mark)


@pytest.mark.parametrize("fault", [F("poll", "hang", PERSISTENT, seconds=30), F("poll", "reset", PERSISTENT)])
def test_a_wait_that_ends_while_the_gateway_is_silent_never_claims_the_work_is_running(faulty, sandbox, fault):
    """Polls that get no answer until the wait ends: nobody knows whether the job still runs, so the
    call says its state is unknown (an error naming the invocation and how to follow it up), never
    "still running" - and a hung poll does not hold the call past its wait."""
    mark = faulty.mark()
    sandbox.faults.add(slug="batch-report", **fault)
    answer = call(faulty, "batch-report", {"seconds": 600})
    assert_clear(answer)
    assert answer.kind == "error" and answer.seconds < NEVER_ENDS_BOUND, answer.body
    (invocation,) = assert_one_invocation_at_most(sandbox, DEMO_KEY, 1)[1]
    for words in (invocation.id, "state is unknown", "do not run it again", "colabhive__wait_for_result"):
        assert words in answer.text, answer.body
    assert "still running" not in answer.text and "is still" not in answer.text
    sandbox.faults.clear()
    assert_server_log_clean(faulty, mark)


def test_losing_the_gateway_after_the_invoke_names_the_running_invocation(faulty, sandbox):
    """The invoke succeeded, then every poll failed: the work runs on upstream, so the answer must
    say so and name the invocation (a model told "could not be run" runs it a second time)."""
    name, arguments, expected = SHORT_JOB
    sandbox.faults.add(route="poll", kind="reset", count=PERSISTENT, slug=name)
    answer = call(faulty, name, arguments)
    assert_clear(answer)
    assert answer.kind == "error" and answer.seconds < POLL_BOUND, answer.body
    (invocation,) = assert_one_invocation_at_most(sandbox, DEMO_KEY, 1)[1]
    assert invocation.id in answer.text, f"the answer does not name the running invocation: {answer.text}"
    sandbox.faults.clear()
    followed = call(faulty, "colabhive__wait_for_result", {"invocation_id": invocation.id, "wait_s": 10})
    assert followed.kind == "ok" and expected in followed.text, followed.body
    assert len(upstream(sandbox, DEMO_KEY)[1]) == 1


def test_a_legacy_session_recovers_the_same_way(faulty, sandbox):
    """The legacy era (an initialized session) gets the same retries and the same clear errors."""
    name, arguments, expected = INSTANT
    session = initialize(faulty.url)
    sandbox.faults.add(route="invoke", kind="reset", after=True, slug=name)
    recovered = rpc(faulty.url, "tools/call", {"name": name, "arguments": arguments}, session=session, id_=3)
    assert recovered.json()["result"]["content"][0]["text"] == expected
    sandbox.faults.add(route="invoke", kind="status", status=503, count=PERSISTENT, slug=name)
    started = time.monotonic()
    failed = answer_of(rpc(faulty.url, "tools/call", {"name": name, "arguments": arguments}, session=session,
                           id_=4), time.monotonic() - started)
    assert_clear(failed)
    assert failed.kind == "error" and "503" in failed.text and failed.seconds < INVOKE_BOUND
    invokes, invocations = upstream(sandbox, DEMO_KEY)
    assert len(invocations) == 1  # the reset call's; the refused one made none
    assert len({e["idempotency_key"] for e in invokes}) == 2  # one key per logical call, reused by retries
    assert_other_key_served(faulty, sandbox)


# -- a gateway that refuses connections ------------------------------------------------------------

def test_a_gateway_that_refuses_connections_then_comes_back():
    port = free_port()  # nothing listens there
    server = LoggedServer(f"http://127.0.0.1:{port}/api/builder/v1", "--http-workers", "1")
    try:
        name, arguments, expected = INSTANT
        for refused in (call(server, name, arguments), list_tools(server, key=DEMO_KEY_B)):
            # a key the gateway could not check is not admitted: 503, come back later, saying why
            assert refused.status == 503 and refused.kind == "rpc_error", refused.body
            assert "cannot check this API key" in refused.text and "Connection refused" in refused.text
            assert not any(leak in refused.body for leak in ("Traceback", 'File "', "hive_demo", "Bearer"))
            assert refused.seconds < MANIFEST_BOUND
        assert wait_until(lambda: server.events_since(0, "manifest.unavailable"))
        # the same process serves again as soon as the gateway is back
        with Sandbox(port=port) as revived:
            other = call(server, *OTHER[:2], key=DEMO_KEY_B)
            assert other.kind == "ok" and OTHER[2] in other.text, other.body
            again = call(server, name, arguments)
            assert again.kind == "ok" and expected in again.text, again.body
            invokes = [e for e in revived.journal_entries() if e["route"] == "invoke"]
            assert len(invokes) == 2 and len({e["invocation_id"] for e in invokes}) == 2  # one per call
        assert server.server.process.poll() is None
    finally:
        log = server.stop()
    assert "hive_demo" not in log and "Traceback" not in log


# -- the manifest route fails while a copy is cached -------------------------------------------------

MANIFEST_FAULTS = {
    "status-503": (F("manifest", "status", PERSISTENT, status=503), "503 injected failure"),
    "turns-invalid": (F("manifest", "status", PERSISTENT, status=200, body={"tools": "not a list"}),
                      "not an object with a 'tools' list"),
    "not-json": (F("manifest", "garbage", PERSISTENT), "not JSON"),
    "reset": (F("manifest", "reset", PERSISTENT), "cannot reach the gateway"),
    "hang": (F("manifest", "hang", 1, seconds=POLL_HANG_S), f"did not answer within {TIMEOUT:g} s"),
}


@pytest.mark.parametrize("spec,error", list(MANIFEST_FAULTS.values()), ids=list(MANIFEST_FAULTS))
def test_a_failing_manifest_route_serves_the_cached_copy_and_logs_it(revalidating, sandbox, spec, error):
    server = revalidating
    before = list_tools(server)
    assert before.kind == "ok" and "echo" in before.text.split(","), before.body
    assert list_tools(server, key=DEMO_KEY_B).kind == "ok"
    sandbox.add_action({"name": "fresh-tool", "description": "published while the manifest route is down",
                        "inputSchema": {"type": "object"}})  # a successful revalidation would show it
    mark = server.mark()
    fault = sandbox.faults.add(**spec)
    rules = [(fault, spec["count"])]

    thread, outcome = in_background(list_tools, server)
    if fault.kind == "hang":  # (b) the other key is served while this key's manifest fetch hangs
        assert wait_until(lambda: struck(fault, spec["count"]) > 0, 15)
        assert_other_key_served(server, sandbox)
        assert thread.is_alive(), "the other key's call should have been served during the hang"
    listed = outcome()
    # (a) the stale copy is served, in time
    assert_clear(listed)
    assert listed.kind == "ok" and listed.text == before.text, listed.body  # no fresh-tool: the cached copy
    assert listed.seconds < MANIFEST_BOUND
    called = call(server, *INSTANT[:2])
    assert_clear(called)
    assert called.kind == "ok" and INSTANT[2] in called.text and called.seconds < INVOKE_BOUND, called.body
    # ... and the staleness is logged, with what went wrong and without the key
    assert wait_until(lambda: server.events_since(mark, "manifest.stale"))
    stale = [e for e in server.events_since(mark, "manifest.stale") if e.get("tenant") == ApiKey.of(DEMO_KEY).log_id]
    assert stale and all(error in e["error"] and e["etag"] for e in stale), stale
    settle(sandbox, rules)
    sandbox.faults.clear()

    # (b) after the fault: the other key is served, and this key sees the fresh manifest again
    assert_other_key_served(server, sandbox)
    assert "fresh-tool" in list_tools(server).text.split(",")
    # (c) the tool call made one invocation
    assert_one_invocation_at_most(sandbox, DEMO_KEY, 1)
    assert_server_log_clean(server, mark)


def test_a_hung_manifest_route_holds_up_no_list_while_a_copy_exists(behind, sandbox):
    """Past the TTL, every list (whichever worker serves it: one without a copy of its own takes the
    instance's) is the copy, at once; revalidations ask the hung route behind the lists, and the news
    arrives once the route answers again."""
    server = behind
    mark = server.mark()
    before = list_tools(server)
    assert before.kind == "ok" and "echo" in before.text.split(","), before.body
    sandbox.add_action({"name": "fresh-tool", "description": "published while the manifest route hangs",
                        "inputSchema": {"type": "object"}})
    fault = sandbox.faults.add(route="manifest", kind="hang", count=PERSISTENT, seconds=POLL_HANG_S)
    time.sleep(1.2)  # past the TTL
    lists = [list_tools(server) for _ in range(8)]
    assert all(listed.kind == "ok" and listed.text == before.text for listed in lists), [x.body for x in lists]
    assert max(listed.seconds for listed in lists) < TIMEOUT, [listed.seconds for listed in lists]  # none waited
    assert wait_until(lambda: struck(fault, PERSISTENT) > 0)  # the revalidations did ask it
    sandbox.faults.clear()
    settle(sandbox, [(fault, PERSISTENT)])
    assert wait_until(lambda: "fresh-tool" in list_tools(server).text.split(","), 20)
    assert_server_log_clean(server, mark)
