"""One tool call from start to answer: an unexpected failure is itself and recorded; a kept call
belongs to the key that made it."""

import re
import sys
import threading

import pytest
from prometheus_client import REGISTRY

from colabhive_mcp.calls import call
from colabhive_mcp.calls.call import CallOptions
from colabhive_mcp.calls.detached import CALLS, DetachedCalls, call_key
from colabhive_mcp.keys import ApiKey
from colabhive_mcp.protocol import Server
from colabhive_mcp.sandbox import DEMO_KEY, DEMO_KEY_B
from colabhive_mcp.store.memory import MemoryStore
from colabhive_mcp.tenants.shared import Instance
from colabhive_mcp.tenants.tenant import Tenant

from ..support.core_client import Client, text_of


class Recorder:
    """Stands in for ``log``: what was logged, with the exception being handled when it was."""

    def __init__(self):
        self.records = []

    def bind(self, **fields):
        recorder = self

        class Bound:
            def info(self, event):
                recorder.records.append((event, fields, None))

            def exception(self, event):
                recorder.records.append((event, fields, sys.exc_info()[1]))

        return Bound()

    def events(self, name):
        return [(fields, exc) for event, fields, exc in self.records if event == name]


def internal_errors():
    return sum(s.value for metric in REGISTRY.collect() if metric.name == "mcp_tool_calls"
               for s in metric.samples if s.name == "mcp_tool_calls_total" and s.labels["status"] == "internal_error")


class Unexpected(Exception):
    pass


@pytest.fixture
def failing(monkeypatch):
    """Every tool call that reaches the gateway fails in an unforeseen way."""
    def run(*_args, **_kwargs):
        raise Unexpected("boom")

    monkeypatch.setattr(call, "run", run)
    recorder = Recorder()
    monkeypatch.setattr(call, "log", recorder)
    return recorder


def test_an_unexpected_failure_escapes_as_itself_and_the_call_is_recorded(failing, tenant):
    before = internal_errors()
    with pytest.raises(Unexpected, match="boom"):
        tenant.call_tool("echo", {"text": "a"}, CallOptions("2025-11-25", threading.Event()))
    (fields, _), = failing.events("mcp.tool.invoked")
    assert fields["status"] == "internal_error" and fields["slug"] == "echo" and fields["latency_ms"] >= 0
    assert internal_errors() == before + 1


def test_the_server_logs_the_unexpected_failure_itself(failing, server, tenant, monkeypatch):
    from colabhive_mcp.protocol import server as server_module

    logged = Recorder()
    monkeypatch.setattr(server_module, "log", logged)
    client = Client(server, tenant)
    client.initialize()
    answer = client.call("echo", {"text": "a"})
    assert answer["error"]["code"] == -32603
    (_fields, exc), = logged.events("mcp.internal_error")
    assert isinstance(exc, Unexpected)
    assert [fields["status"] for fields, _ in failing.events("mcp.tool.invoked")] == ["internal_error"]


def test_a_kept_call_is_found_only_by_the_key_that_made_it():
    kept = DetachedCalls(MemoryStore(), grace=60)
    mine, theirs = ApiKey.of(DEMO_KEY).binding, ApiKey.of(DEMO_KEY_B).binding
    key = call_key(mine, "batch-report", {"seconds": 3})
    kept.detach(mine, key, "inv_1", lambda _invocation: None)
    entry = kept.store.get(CALLS, key)
    assert kept.follow_up(theirs, "inv_1") is None
    assert kept.store.get(CALLS, key) == entry  # not claimed: its grace period still runs
    assert kept.follow_up(mine, "inv_1") == key


@pytest.mark.slow
def test_another_key_naming_a_kept_invocation_leaves_it_to_its_key(config, sandbox, journal):
    """Even when the gateway shows key B key A's invocation, B's continuation neither claims A's kept
    call nor forgets it: A's retry still attaches to the work instead of running the tool again."""
    config = config.replace(poll_max_wait=1)
    instance = Instance.of(config)
    a, b = Tenant(config, DEMO_KEY, instance), Tenant(config, DEMO_KEY_B, instance)
    b.gateway.get_invocation = a.gateway.get_invocation  # a gateway that would answer both
    try:
        first, other = Client(Server(config), a), Client(Server(config), b)
        first.initialize()
        other.initialize()
        pending = first.call("batch-report", {"seconds": 3})["result"]
        invocation_id = pending["_meta"]["com.colabhive/continuation"]["invocation_id"]
        followed = other.call("colabhive__wait_for_result", {"invocation_id": invocation_id, "wait_s": 10})
        assert "report ready" in text_of(followed)
        retried = first.call("batch-report", {"seconds": 3})
        assert "report ready" in text_of(retried)
        assert len(journal("invoke")) == 1  # the retry attached to A's kept work
    finally:
        a.close()
        b.close()


def test_a_calls_standing_moves_only_forward():
    """The table of moves: from knowing nothing, once, to one of the ways the instance knows of a
    call; a retried invoke may then poll; nothing goes back."""
    Standing = call.Standing
    assert call.MOVES[Standing.UNKNOWN] == set(Standing) - {Standing.UNKNOWN}
    assert call.MOVES[Standing.RETRYING] == {Standing.POLLING}
    assert all(not call.MOVES[s] for s in (Standing.POLLING, Standing.ATTACHED, Standing.FOLLOWING))
    assert [s for s in Standing if not s.recorded] == [Standing.UNKNOWN]


@pytest.fixture
def standings(monkeypatch):
    """Every change of standing of the calls made meanwhile, as (tool, from, to)."""
    seen, become = [], call.ToolCall._become

    def recorded(self, standing):
        seen.append((self.tool.name, self.standing.value, standing.value))
        become(self, standing)

    monkeypatch.setattr(call.ToolCall, "_become", recorded)
    return seen


def test_each_way_a_call_goes_moves_its_standing_as_the_table_says(tenant, standings):
    cut_off = CallOptions("2025-11-25", threading.Event(), deadline=0.5)  # a host that waits half a second
    assert tenant.call_tool("echo", {"text": "a"}, CallOptions("2025-11-25", threading.Event()))["content"]
    assert standings == []  # answered at once: the instance never knew of it

    pending = tenant.call_tool("batch-report", {"seconds": 3}, cut_off)
    assert standings == [("batch-report", "unknown", "polling")]
    invocation_id = re.search(r"invocation (inv_\w+)", pending["content"][0]["text"]).group(1)  # as it says
    retried = tenant.call_tool("batch-report", {"seconds": 3}, cut_off)  # the host's retry: the same work
    assert standings[1:] == [("batch-report", "unknown", "attached")]
    assert invocation_id in retried["content"][0]["text"]
    tenant.call_tool("colabhive__wait_for_result", {"invocation_id": invocation_id, "wait_s": 10},
                     CallOptions("2025-11-25", threading.Event()))
    assert standings[2:] == [("colabhive__wait_for_result", "unknown", "following")]


def test_a_move_the_table_does_not_allow_is_refused(tenant):
    made = call.ToolCall(tenant, tenant.catalog(), tenant.catalog().by_name["echo"], {"text": "a"},
                         CallOptions("2025-11-25", threading.Event()))
    made._become(call.Standing.POLLING)
    with pytest.raises(RuntimeError, match="from polling to attached"):
        made._become(call.Standing.ATTACHED)


def test_a_retried_unanswered_invoke_is_known_then_polls(tenant, sandbox, standings):
    """The invoke made its work but its answer was lost: the instance holds its idempotency key, so the
    same call again is a retry of it (standing ``retrying``), which then polls that work."""
    cut_off = CallOptions("2025-11-25", threading.Event(), deadline=0.5)
    sandbox.faults.add(route="invoke", kind="reset", after=True, slug="batch-report", count=1 + tenant.config.retries)
    lost = tenant.call_tool("batch-report", {"seconds": 20}, cut_off)
    assert "without running it twice" in lost["content"][0]["text"] and standings == []
    tenant.call_tool("batch-report", {"seconds": 20}, cut_off)
    assert standings == [("batch-report", "unknown", "retrying"), ("batch-report", "retrying", "polling")]
    invokes = [e for e in sandbox.journal_entries() if e["route"] == "invoke"]
    assert len({e["idempotency_key"] for e in invokes}) == 1 and len(invokes) == 2 + tenant.config.retries
