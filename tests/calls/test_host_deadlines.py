"""Cold calls that survive real hosts' deadlines.

Hosts abandon a tool call at their own cutoff (Claude Desktop 4 min, Claude Code after 300 s
without progress, Cursor 5 min, the TypeScript SDK 60 s unless told to reset on progress; the
sources are in docs/hosts.rst). The server answers shortly before a known cutoff with a
continuation naming the exact call that gets the result; a host's timeout is not a user's cancel
(the work keeps running for a grace period); a retry of the same call attaches to it.
The gateway always sees one invocation.
"""

import dataclasses
import threading
import time

import pytest

from colabhive_mcp.calls import cancellation
from colabhive_mcp.calls.cancellation import TIMEOUT, USER, Cancellation, keeps_work
from colabhive_mcp.calls.detached import DetachedCalls
from colabhive_mcp.catalog import profiles
from colabhive_mcp.protocol import Server
from colabhive_mcp.protocol.plan import reason_of
from colabhive_mcp.settings.config import Config, ConfigError
from colabhive_mcp.settings.sources import load
from colabhive_mcp.store.memory import MemoryStore
from colabhive_mcp.tenants.tenant import Tenant

from ..support.core_client import Client
from ..support.waiting import wait_until

pytestmark = pytest.mark.slow

CONTINUATION = "com.colabhive/continuation"


# -- what each host is known to do -----------------------------------------------------------------

@pytest.mark.parametrize("client_name,deadline,timer", [
    ("claude-ai", 240, 0), ("Claude Desktop", 240, 0), ("claude-code", 350, 300), ("cursor-vscode", 300, 0),
    ("Visual Studio Code", 0, 0), ("n8n-mcp-client", 60, 0), ("gemini-cli-mcp-client", 600, 0),
    ("mcp-inspector", 60, 60), ("inspector-client", 60, 60), ("some-new-host", 60, 0)])
def test_each_known_host_has_its_cutoff(client_name, deadline, timer):
    profile = profiles.for_client({"name": client_name}, Config())
    assert (profile.deadline, profile.progress_timer) == (deadline, timer)


def test_deadlines_can_be_set_for_every_host_or_per_profile():
    config = load({}, {"COLABHIVE_HOST_DEADLINE": "45", "COLABHIVE_HOST_DEADLINES": "claude-desktop=240,vscode=0"}).config
    assert profiles.for_client({"name": "claude-ai"}, config).deadline == 240
    assert profiles.for_client({"name": "cursor"}, config).deadline == 45
    assert profiles.for_client({"name": "vscode"}, config).deadline == 0
    with pytest.raises(ConfigError, match="unknown claude-desktpo"):
        load({}, {"COLABHIVE_HOST_DEADLINES": "claude-desktpo=240"})


def test_a_call_answers_shortly_before_its_host_gives_up():
    unknown, desktop, code, cursor = (profiles.for_client({"name": n}, Config())
                                      for n in ("x", "claude-ai", "claude-code", "cursor"))
    assert 48 <= profiles.wait_budget(unknown, progress=True) <= 55
    assert 225 <= profiles.wait_budget(desktop, progress=True) < 240
    assert 285 <= profiles.wait_budget(cursor, progress=True) < 300
    assert 335 <= profiles.wait_budget(code, progress=True) < 350  # progress keeps its 300 s idle timer away
    assert 285 <= profiles.wait_budget(code, progress=False) < 300  # without progress, that timer is the limit
    assert profiles.wait_budget(profiles.for_client({"name": "vscode"}, Config()), progress=True) is None
    inspector = profiles.for_client({"name": "mcp-inspector"}, Config())
    assert 48 <= profiles.wait_budget(inspector, progress=False) == profiles.wait_budget(inspector, progress=True) < 60
    assert profiles.heartbeat(inspector, progress=True, configured=10) == 10  # within its 60 s progress timer
    assert profiles.heartbeat(unknown, progress=True, configured=10) == 10
    # a progress timer shorter than the heartbeat: progress comes every third of it, and without
    # progress the timer is a plain deadline
    strict = dataclasses.replace(inspector, progress_timer=10)
    assert profiles.wait_budget(strict, progress=False) < 10 < profiles.wait_budget(strict, progress=True)
    assert profiles.heartbeat(strict, progress=True, configured=10) < 4
    tiny = profiles.for_client({"name": "x"}, Config(host_deadline=4))
    assert 2.5 <= profiles.wait_budget(tiny, progress=False) < 4


@pytest.mark.parametrize("reason,kind", [
    ("McpError: MCP error -32001: Request timed out", TIMEOUT),  # the TypeScript SDK's timeout
    ("timed out after 20.0s", TIMEOUT),  # the Python SDK's
    ("TimeoutError: signal timed out", TIMEOUT),  # AbortSignal.timeout()
    ("AbortError: This operation was aborted", USER), ("the user pressed stop", USER), ("caller cancelled", USER),
    (None, USER), (7, USER)])
def test_a_host_timeout_is_told_from_a_user_cancel(reason, kind):
    assert reason_of(reason) == kind


def test_which_cancelled_calls_keep_their_work():
    timed_out, stopped, closed = Cancellation(), Cancellation(), Cancellation()
    timed_out.cancel(TIMEOUT)
    stopped.cancel(USER)
    closed.set()  # a connection closed: no reason
    for modern in (True, False):
        assert keeps_work(timed_out, modern) and not keeps_work(stopped, modern)
    assert not keeps_work(closed, True)  # 2026: closing the stream is cancelling, however late
    assert keeps_work(closed, False)  # the handshake era: a disconnect alone is not a cancel
    said_why = Cancellation()
    said_why.set()  # the connection closed, and then the client said why (the TypeScript SDK's abort)
    threading.Timer(0.2, said_why.cancel, [USER]).start()
    assert not keeps_work(said_why, False) and said_why.reason == USER
    said_why.cancel(TIMEOUT)
    assert said_why.reason == USER  # the first reason given stays
    assert cancellation.SHUTDOWN != TIMEOUT and not keeps_work(Cancellation(), True)


# -- through the protocol core, on the sandbox gateway -------------------------------------------------

@pytest.fixture
def deadline_client(config):
    """A client whose host gives up after 4 s (the server knows it) and a 1 s grace period."""
    tuned = config.replace(host_deadline=4, host_timeout_grace=1.5)
    return Client(Server(tuned), Tenant(tuned, tuned.api_key))


def test_a_call_past_the_deadline_answers_with_its_continuation_and_the_result_follows(deadline_client, journal):
    client = deadline_client
    client.initialize()
    started = time.monotonic()
    first = client.call("batch-report", {"seconds": 7}, progressToken="p")["result"]
    assert 2.5 <= time.monotonic() - started < 4  # before the host's cutoff
    assert not first.get("isError")  # not a failure: the work goes on
    following = first["_meta"][CONTINUATION]
    assert following["tool"] == "colabhive__wait_for_result" and following["status"] in ("queued", "running")
    text = first["content"][0]["text"]
    assert following["invocation_id"] in text and "colabhive__wait_for_result" in text and "not a failure" in text
    results = []
    while len(results) < 5:
        answer = client.call(following["tool"], following["arguments"])["result"]
        results.append(answer)
        if CONTINUATION not in answer.get("_meta", {}):
            break
    assert "report ready" in results[-1]["content"][0]["text"] and not results[-1].get("isError")
    assert len(journal("invoke")) == 1 and not journal("cancel")


def test_a_tool_with_an_output_schema_gets_its_structured_result_through_the_continuation(config, sandbox, journal):
    schema = {"type": "object", "properties": {"score": {"type": "number"}}, "required": ["score"]}
    sandbox.add_action({"name": "slow-scorer", "description": "scores slowly", "sideEffects": [],
                        "inputSchema": {"type": "object"}, "outputSchema": schema}, result={"score": 0.75}, seconds=4)
    tuned = config.replace(host_deadline=3)
    client = Client(Server(tuned), Tenant(tuned, tuned.api_key))
    client.initialize()
    first = client.call("slow-scorer", {})["result"]
    # a plain result without structuredContent would be rejected by clients that check the schema
    assert first["isError"] is True and "not a failure" in first["content"][0]["text"]
    following = first["_meta"][CONTINUATION]
    answer = first
    while CONTINUATION in answer.get("_meta", {}):
        answer = client.call(following["tool"], following["arguments"])["result"]
    assert answer["structuredContent"] == {"score": 0.75} and not answer.get("isError")
    assert len(journal("invoke")) == 1


def call_in_background(client, name, arguments, cancelled, modern=False):
    answers = []
    meta = {"progressToken": "bg", **({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                                       "io.modelcontextprotocol/clientCapabilities": {}} if modern else {})}
    message = {"jsonrpc": "2.0", "id": f"bg-{time.monotonic()}", "method": "tools/call",
               "params": {"name": name, "arguments": arguments, "_meta": meta}}
    thread = threading.Thread(target=lambda: answers.append(client.send(message, cancelled=cancelled)))
    thread.start()
    return thread, answers


def given_up_by_its_host(client, name, arguments, journal):
    """Start the call, and once it polls, end it as its host's timeout does (its work is kept); its answers."""
    cancelled = Cancellation()
    thread, answers = call_in_background(client, name, arguments, cancelled)
    assert wait_until(lambda: journal("poll"))
    cancelled.cancel(reason_of("McpError: MCP error -32001: Request timed out"))
    thread.join(5)
    return answers


@pytest.mark.parametrize("tool,arguments", [("batch-report", {"seconds": 4}),
                                            ("slow-writer", {"name": "Ada"})])  # side effects: never twice
def test_a_host_timeout_keeps_the_work_and_the_retry_attaches_to_it(config, sandbox, journal, tool, arguments):
    sandbox.add_action({"name": "slow-writer", "description": "writes slowly", "sideEffects": ["writes"],
                        "inputSchema": {"type": "object"}}, result={"written": True}, seconds=4)
    client = Client(Server(config), Tenant(config, config.api_key))
    client.initialize()
    assert given_up_by_its_host(client, tool, arguments, journal) == [None]  # a cancelled request gets no answer
    retried = client.call(tool, arguments)["result"]
    assert not retried.get("isError") and ("report ready" in str(retried) or "written" in str(retried))
    assert len(journal("invoke")) == 1 and not journal("cancel")


def test_a_hosts_retry_of_billable_work_is_not_counted_again(config, sandbox, journal):
    """A key with a budget of one billable call: its host gives up on the call and retries it, which
    attaches to the work already counted (and is not refused); a new call is past the budget."""
    sandbox.add_action({"name": "slow-biller", "description": "bills slowly", "sideEffects": ["billing"],
                        "inputSchema": {"type": "object"}}, result={"billed": True}, seconds=4)
    budgeted = config.replace(billable_calls_per_hour=1, spend_guard="refuse")
    client = Client(Server(budgeted), Tenant(budgeted, budgeted.api_key))
    client.initialize()
    given_up_by_its_host(client, "slow-biller", {"n": 1}, journal)
    retried = client.call("slow-biller", {"n": 1})["result"]
    assert not retried.get("isError") and "billed" in str(retried)
    fresh = client.call("slow-biller", {"n": 2})["result"]
    assert fresh["isError"] and "hourly budget of 1" in fresh["content"][0]["text"]
    assert len(journal("invoke")) == 1


def test_a_user_cancel_still_stops_the_work_at_once(config, journal):
    client = Client(Server(config), Tenant(config, config.api_key))
    client.initialize()
    cancelled = Cancellation()
    thread, answers = call_in_background(client, "batch-report", {"seconds": 30}, cancelled)
    assert wait_until(lambda: journal("poll"))
    cancelled.cancel(reason_of("the user pressed stop"))
    thread.join(5)
    assert answers == [None] and wait_until(lambda: journal("cancel"), 3)
    assert client.call("batch-report", {"seconds": 1, "fail": True})  # a different call: runs anew
    assert len(journal("invoke")) == 2


def test_work_nobody_comes_back_for_is_cancelled_after_the_grace_period(deadline_client, journal):
    client = deadline_client  # grace: 1.5 s
    client.initialize()
    cancelled = Cancellation()
    thread, _ = call_in_background(client, "batch-report", {"seconds": 30}, cancelled)
    assert wait_until(lambda: journal("poll"))
    cancelled.cancel(TIMEOUT)
    thread.join(5)
    gave_up = time.time()
    assert not journal("cancel")
    assert wait_until(lambda: journal("cancel"), 5)
    assert 1.3 <= journal("cancel")[0]["t"] - gave_up < 3


@pytest.mark.parametrize("modern", [True, False], ids=["2026", "handshake era"])
def test_a_2026_hang_up_cancels_the_work_and_a_handshake_era_one_keeps_it(config, journal, modern):
    """A 2026 client cancels by closing its stream, however long it waited (its revision: a closed
    stream MUST be taken as a cancellation); in the handshake era a disconnect is never a cancel (the
    client sends notifications/cancelled): the work is kept for a retry to attach to."""
    client = Client(Server(config), Tenant(config, config.api_key))
    if not modern:
        client.initialize()
    for waited in (0.1, 2.5):  # soon, and long after the call started
        closed, cancels, invokes = Cancellation(), len(journal("cancel")), len(journal("invoke"))
        arguments = {"seconds": 20 + waited}
        thread, _ = call_in_background(client, "batch-report", arguments, closed, modern)
        assert wait_until(lambda: len(journal("invoke")) > invokes)  # the call has started
        time.sleep(waited)
        closed.set()  # the client's connection closed: no reason given
        thread.join(5)
        if modern:
            assert wait_until(lambda: len(journal("cancel")) > cancels, 5), waited
            continue
        time.sleep(0.3)
        assert len(journal("cancel")) == cancels, waited  # kept
        retried_in, cancelled = time.monotonic(), Cancellation()
        retry, _ = call_in_background(client, "batch-report", arguments, cancelled, modern)
        assert wait_until(lambda: len(journal("poll")) > 3)
        cancelled.cancel(USER)
        retry.join(5)
        assert time.monotonic() - retried_in < 5
    assert len(journal("invoke")) == 2  # (the handshake era's retries attached to the kept work)


def test_a_retry_of_a_call_whose_invoke_went_unanswered_continues_it_and_never_runs_it_twice(config, sandbox,
                                                                                               journal):
    """The gateway made the invocation, but its answer never came within the timeout: the same call
    again sends the same Idempotency-Key, so the gateway answers with that invocation."""
    tuned = config.replace(request_timeout=1, sync_timeout=1, retries=0)
    client = Client(Server(tuned), Tenant(tuned, tuned.api_key))
    client.initialize()
    sandbox.faults.add(route="invoke", kind="hang", seconds=3, after=True, count=1)
    failed = client.call("echo", {"text": "once"})["result"]
    assert failed["isError"] and "without running it twice" in failed["content"][0]["text"]
    retried = client.call("echo", {"text": "once"})["result"]
    assert not retried.get("isError") and retried["content"][0]["text"] == "once"
    assert wait_until(lambda: len(journal("invoke")) == 2, 5)  # the hung one is journaled as it ends
    invokes = journal("invoke")
    assert len({e["idempotency_key"] for e in invokes}) == 1
    assert len({e["invocation_id"] for e in invokes}) == 1  # one invocation, answered twice
    assert client.call("echo", {"text": "once"})["result"]["content"][0]["text"] == "once"
    assert len({e["idempotency_key"] for e in journal("invoke")}) == 2  # a fresh call runs anew


def test_a_continuation_finds_no_kept_call_once_its_key_holds_an_unanswered_invoke():
    calls = DetachedCalls(MemoryStore(), grace=60)
    calls.detach("binding", "call", "inv_1", lambda _invocation_id: None)
    calls.unanswered("call", "idem-1")  # the same call, again, and its invoke went unanswered
    assert calls.follow_up("binding", "inv_1") is None and calls.attach("call") is None
    assert calls.idempotency_key("call") == "idem-1"


def test_a_fresh_identical_call_with_nothing_cut_off_behind_it_runs_anew(config, journal):
    client = Client(Server(config), Tenant(config, config.api_key))
    client.initialize()
    for _ in range(2):  # asked twice on purpose: two images, two invocations
        assert "report ready" in str(client.call("batch-report", {"seconds": 0.5}))
    assert len(journal("invoke")) == 2


# -- across the processes of one instance ---------------------------------------------------------------

def test_a_retry_reaching_another_worker_attaches_through_the_instance_store(gateway_sandbox, sandbox, journal,
                                                                             tmp_path):
    """Two processes sharing a runtime directory (as the workers of one instance do): the call runs in
    one, its host's timeout reaches it, and the retry lands on the other, which attaches."""
    from ..support.http_client import initialize, post, rpc
    from ..support.http_server import HttpServer

    shared = {"COLABHIVE_RUNTIME_DIR": str(tmp_path)}
    first = HttpServer(gateway_sandbox.url, "--http-workers", "1", env=shared)
    second = HttpServer(gateway_sandbox.url, "--http-workers", "1", env=shared)
    try:
        session = initialize(first.url)
        arguments = {"name": "batch-report", "arguments": {"seconds": 5}, "_meta": {"progressToken": 1}}
        thread = threading.Thread(target=rpc, args=(first.url, "tools/call", arguments), kwargs={
            "session": session, "id_": 41})
        thread.start()
        assert wait_until(lambda: journal("poll"))
        timed_out = post(first.url, {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {
            "requestId": 41, "reason": "McpError: MCP error -32001: Request timed out"}}, **{"Mcp-Session-Id": session})
        assert timed_out.status_code == 202
        retried = rpc(second.url, "tools/call", {**arguments, "_meta": {}}, session=session, id_=42)
        assert "report ready" in retried.json()["result"]["content"][0]["text"]
        thread.join(10)
    finally:
        first.stop()
        log = second.stop()
    assert len(journal("invoke")) == 1 and not journal("cancel")
    assert '"call.attached"' in log
