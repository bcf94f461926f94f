"""The spend guard: billable calls per key over rolling windows, counted in the instance store."""

import multiprocessing
import threading

import pytest

from colabhive_mcp.calls.results import LIMIT
from colabhive_mcp.catalog.tools import Tool
from colabhive_mcp.protocol import Server
from colabhive_mcp.store.memory import MemoryStore
from colabhive_mcp.store.sqlite import SqliteStore
from colabhive_mcp.tenants.spend import NOTHING, Budget, SpendGuard, kept_store
from colabhive_mcp.tenants.tenant import Tenant

from ..support.clock import FakeClock
from ..support.core_client import Client as CoreClient

KEY, KEY_ID = "d" * 64, "sha256:dddd"


def tool(slug, effects=("billing",), cost="$0.002 / image"):
    entry = {"name": slug, "sideEffects": list(effects), **({"costHint": cost} if cost else {})}
    return Tool(slug.replace("-", "_"), entry, {"name": slug, "inputSchema": {"type": "object"}})


IMAGE, CHAT, ECHO = tool("image-gen-tiny"), tool("hive-chat", cost=None), tool("echo", effects=())


def test_what_counts_and_how_much():
    budget = Budget(per_hour=10, billable=("web-*",), weights=(("image-*", 5), ("*", 2)))
    assert budget.weight(IMAGE) == 5  # the first glob that matches
    assert budget.weight(CHAT) == 2
    assert budget.weight(tool("web-scrape", effects=("external_network",))) == 2  # named billable
    assert budget.weight(ECHO) == 0
    assert budget.weight(tool("no-word", effects=())) == 0
    unsaid = Tool("unsaid", {"name": "unsaid"}, {"name": "unsaid", "inputSchema": {}})
    assert budget.weight(unsaid) == 0  # no side effects declared: billable only when named
    assert Budget().windows == () and not Budget().asks and not Budget(per_day=5, guard="refuse").asks


def test_within_budget_nothing_changes_and_past_it_the_refusal_says_what_to_do():
    guard = SpendGuard(Budget(per_hour=3, guard="refuse"), MemoryStore())
    for _ in range(3):
        assert guard.admit(KEY, KEY_ID, IMAGE, None)[0] is None
    assert guard.admit(KEY, KEY_ID, ECHO, None)[0] is None  # not billable: never counted, never refused
    refused, charge = guard.admit(KEY, KEY_ID, IMAGE, None)
    text = refused["content"][0]["text"]
    assert refused["isError"] and "hourly budget of 3 billable ColabHive calls is used (3 in the last hour)" in text
    assert "costs $0.002 / image" in text and "billable_calls_per_hour" in text and "frees up in 60 minutes" in text
    facts = refused["_meta"][LIMIT]
    assert facts == {"limit": "billable_calls_per_hour", "allowed": 3, "used": 3, "window": "hour", "weight": 1,
                     "cost": "$0.002 / image", "retryAfter": 3600}
    assert guard.spent(KEY) == {"hour": 3}
    assert guard.admit("e" * 64, KEY_ID, IMAGE, None)[0] is None  # another key has its own budget


def test_the_window_rolls():
    clock = FakeClock()
    store = MemoryStore(clock=clock)
    guard = SpendGuard(Budget(per_hour=2, guard="refuse"), store)
    guard.admit(KEY, KEY_ID, IMAGE, None)
    clock.advance(1800)
    guard.admit(KEY, KEY_ID, IMAGE, None)
    refused = guard.admit(KEY, KEY_ID, IMAGE, None)[0]
    assert refused["_meta"][LIMIT]["retryAfter"] == 1800  # when the first of them leaves the hour
    clock.advance(1801)
    assert guard.admit(KEY, KEY_ID, IMAGE, None)[0] is None


def test_a_heavy_call_takes_its_weight_from_every_window_or_none():
    guard = SpendGuard(Budget(per_hour=10, per_day=12, guard="refuse", weights=(("image-*", 5),)), MemoryStore())
    guard.admit(KEY, KEY_ID, IMAGE, None)
    guard.admit(KEY, KEY_ID, IMAGE, None)
    assert guard.spent(KEY) == {"hour": 10, "day": 10}
    refused = guard.admit(KEY, KEY_ID, IMAGE, None)[0]
    assert refused["_meta"][LIMIT]["window"] == "hour"
    assert guard.spent(KEY) == {"hour": 10, "day": 10}  # nothing of the refused call stays counted
    assert guard.admit(KEY, KEY_ID, CHAT, None)[0] is not None  # the hour is full for every billable tool


def test_past_the_budget_only_the_users_yes_runs_the_call_and_it_is_counted():
    guard = SpendGuard(Budget(per_hour=1), MemoryStore())
    asked = []

    def ask(answer):
        def gate(over):
            asked.append(over)
            return answer
        return gate

    assert guard.admit(KEY, KEY_ID, IMAGE, ask(None))[0] is None
    assert asked == [None]  # within budget the gate is asked only about side effects
    declined = {"content": [{"type": "text", "text": "no"}], "isError": True}
    assert guard.admit(KEY, KEY_ID, IMAGE, ask(declined)) == (declined, NOTHING)
    assert asked[-1].figures["used"] == 1 and guard.spent(KEY) == {"hour": 1}
    stop, charge = guard.admit(KEY, KEY_ID, IMAGE, ask(None))  # the user said yes
    assert stop is None and guard.spent(KEY) == {"hour": 2}
    assert guard.admit(KEY, KEY_ID, IMAGE, ask(None))[0] is None and guard.spent(KEY) == {"hour": 3}
    charge.refund()  # the yes-d call did not go to the gateway after all
    assert guard.spent(KEY) == {"hour": 2}
    assert guard.admit(KEY, KEY_ID, IMAGE, None)[0]["isError"]  # no one to ask: refused


def test_a_declined_side_effect_gives_back_what_it_counted():
    guard = SpendGuard(Budget(per_hour=5), MemoryStore())
    stop, _ = guard.admit(KEY, KEY_ID, IMAGE, lambda over: {"content": [], "isError": True})
    assert stop is not None and guard.spent(KEY) == {"hour": 0}


def _spend_and_die(path, count):
    store = SqliteStore(path)
    guard = SpendGuard(Budget(per_hour=10, guard="refuse"), store)
    for _ in range(count):
        guard.admit(KEY, KEY_ID, IMAGE, None)
    store.close()


def test_what_a_worker_spent_stays_spent_when_it_is_gone(tmp_path):
    """A worker's running calls are freed when it dies; what it spent is not (lasting reservations)."""
    path = str(tmp_path / "store.db")
    worker = multiprocessing.get_context("spawn").Process(target=_spend_and_die, args=(path, 7))
    worker.start()
    worker.join(60)
    assert worker.exitcode == 0
    store = SqliteStore(path)
    guard = SpendGuard(Budget(per_hour=10, guard="refuse"), store)
    try:
        results = [guard.admit(KEY, KEY_ID, IMAGE, None)[0] for _ in range(4)]
        assert [r is None for r in results] == [True, True, True, False]  # the full key looked at its holders
        assert guard.spent(KEY) == {"hour": 10}
    finally:
        store.close()


def test_no_more_calls_than_the_budget_get_through_however_many_come_at_once(tmp_path):
    stores = [SqliteStore(str(tmp_path / "store.db")) for _ in range(4)]  # as the workers of an instance
    guards = [SpendGuard(Budget(per_hour=10, guard="refuse"), store) for store in stores]
    through, start = [], threading.Barrier(32)

    def call(n):
        start.wait()
        if guards[n % 4].admit(KEY, KEY_ID, IMAGE, None)[0] is None:
            through.append(n)

    threads = [threading.Thread(target=call, args=(n,)) for n in range(32)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    try:
        assert len(through) == 10 and guards[0].spent(KEY) == {"hour": 10}
    finally:
        for store in stores:
            store.close()


@pytest.mark.parametrize("modern", [False, True])
def test_what_a_model_reads_past_the_budget(config, journal, modern):
    """Through the core, in either era, with no one to ask: the refusal is the tool's result."""
    budgeted = config.replace(billable_calls_per_hour=2, spend_guard="refuse")
    client = CoreClient(Server(budgeted), Tenant(budgeted, budgeted.api_key))
    if not modern:
        client.initialize()
    answers = [client.call("image-gen-tiny", {"prompt": "a hive", "size": 16}, modern=modern)["result"]
               for _ in range(3)]
    assert [bool(a.get("isError")) for a in answers] == [False, False, True]
    assert "Ask the user" in answers[2]["content"][0]["text"] and answers[2]["_meta"][LIMIT]["used"] == 2
    assert len(journal("invoke")) == 2
    echo = client.call("echo", {"text": "free"}, modern=modern)["result"]
    assert echo["content"][0]["text"] == "free"


def test_a_stdio_servers_spend_is_kept_only_where_nobody_else_can_write(tmp_path):
    kept = kept_store({"XDG_STATE_HOME": str(tmp_path / "state")})
    assert isinstance(kept, SqliteStore)
    assert kept.reserve("billable-day", "key", 1, 60, lasting=True) and kept.held("billable-day", "key") == 1
    kept.close()
    made = tmp_path / "state" / "colabhive-mcp" / "spend"
    assert made.stat().st_mode & 0o777 == 0o700
    assert {path.name for path in made.iterdir()} <= {"spend.db", "spend.db-wal", "spend.db-shm"}  # nothing else
    shared = tmp_path / "shared" / "colabhive-mcp" / "spend"
    shared.mkdir(parents=True)
    shared.chmod(0o777)
    assert kept_store({"XDG_STATE_HOME": str(tmp_path / "shared")}) is None  # counted in memory instead
    assert kept_store({}) is None


def test_a_task_is_counted_even_beside_a_call_its_host_retries(config, journal, monkeypatch):
    """A call that continues work of before (a host's retry) is not counted again; a task always starts
    work of its own, so it is counted whatever calls of the same arguments came before."""
    budgeted = config.replace(billable_calls_per_hour=5, spend_guard="refuse")
    tenant = Tenant(budgeted, budgeted.api_key)
    monkeypatch.setattr(tenant.calls, "continues", lambda key: True)  # as if a call like it was cut off
    summarizer = tenant.catalog().by_slug["cold-summarizer"]
    assert tenant.admit(summarizer, {"text": "t"}, None) == (None, NOTHING)
    client = CoreClient(Server(budgeted), tenant)
    client.initialize("2025-11-25")
    created = client.request("tools/call", {"name": "cold-summarizer", "arguments": {"text": "t"},
                                            "task": {"ttl": 60000}})["result"]
    assert created["task"]["status"] == "working" and tenant.spend.spent(tenant.digest) == {"hour": 1}


def test_a_task_is_counted_when_it_is_created_in_either_era(config, journal):
    """A long-running billable tool asked for as a task: counted once as it starts, refused past the
    budget before anything reaches the gateway (2025-11-25's task, and 2026's)."""
    budgeted = config.replace(billable_calls_per_hour=1, spend_guard="refuse")
    server, tenant = Server(budgeted), Tenant(budgeted, budgeted.api_key)
    legacy = CoreClient(server, tenant)
    legacy.initialize("2025-11-25")
    created = legacy.request("tools/call", {"name": "cold-summarizer", "arguments": {"text": "a long text"},
                                            "task": {"ttl": 60000}})["result"]
    assert created["task"]["status"] == "working"
    refused = legacy.request("tools/call", {"name": "cold-summarizer", "arguments": {"text": "again"},
                                            "task": {"ttl": 60000}})["result"]
    assert refused["isError"] and refused["_meta"][LIMIT]["limit"] == "billable_calls_per_hour"
    modern = CoreClient(server, tenant).modern("tools/call", {"name": "cold-summarizer", "arguments": {"text": "x"}}, **{
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}})["result"]
    assert modern["isError"] and "hourly budget of 1" in modern["content"][0]["text"]
    assert [e["slug"] for e in journal("invoke")] == ["cold-summarizer"]


def test_when_a_window_frees_up_counts_what_was_confirmed_past_it_and_the_calls_weight():
    clock = FakeClock()
    guard = SpendGuard(Budget(per_hour=2), MemoryStore(clock=clock))
    yes = lambda over: None  # noqa: E731
    guard.admit(KEY, KEY_ID, IMAGE, yes)
    clock.advance(100)
    guard.admit(KEY, KEY_ID, IMAGE, yes)
    clock.advance(100)
    assert guard.admit(KEY, KEY_ID, IMAGE, yes)[0] is None  # past the budget, with the user's yes: 3 counted
    clock.advance(100)
    asked = []
    guard.admit(KEY, KEY_ID, IMAGE, lambda over: asked.append(over) or {"content": [], "isError": True})
    assert asked[0].figures["used"] == 3
    assert asked[0].retry_after == 3400  # two must leave the hour before this call fits: the second, at 3,700 s
    heavy = SpendGuard(Budget(per_hour=10, guard="refuse", weights=(("image-*", 4),)), MemoryStore(clock=clock))
    for _ in range(2):
        heavy.admit(KEY, KEY_ID, IMAGE, None)
        clock.advance(600)
    refused = heavy.admit(KEY, KEY_ID, IMAGE, None)[0]  # 8 of 10 used: room for 2, this call needs 4
    assert refused["_meta"][LIMIT]["retryAfter"] == 3600 - 1200  # the first call's 4 must leave


def test_a_retry_of_work_under_way_is_neither_counted_nor_refused_and_a_failed_ask_gives_back():
    guard = SpendGuard(Budget(per_hour=1, guard="refuse"), MemoryStore())
    assert guard.admit(KEY, KEY_ID, IMAGE, None)[0] is None
    assert guard.admit(KEY, KEY_ID, IMAGE, None, again=True) == (None, NOTHING)  # a host's retry of that call
    assert guard.spent(KEY) == {"hour": 1}
    asking = SpendGuard(Budget(per_hour=5), MemoryStore())

    def cannot_ask(over):
        raise RuntimeError("the client cannot be asked")

    with pytest.raises(RuntimeError):
        asking.admit(KEY, KEY_ID, IMAGE, cannot_ask)
    assert asking.spent(KEY) == {"hour": 0}
