"""What an agent sees of the spend guard, through the official Python SDK client in both eras, over
stdio and the hosted server at its defaults (its default workers): a loop of billable calls against
a small budget, what passes, what is asked, what is refused and what the model reads."""

import concurrent.futures
import sys

import anyio
import httpx2
import pytest
import requests
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.types import ElicitResult

from colabhive_mcp.calls.results import LIMIT
from colabhive_mcp.sandbox import DEMO_KEY

from ..support.environ import server_env
from ..support.http_client import modern
from ..support.http_server import HttpServer, events, hosted_server

pytestmark = pytest.mark.real_clients

IMAGE = {"prompt": "a hive at dawn", "size": 16}


async def agent_loop(target, mode, answers=None, calls=4):
    """``calls`` billable calls, then a free one; ``answers``: what the user says each time asked
    (``None``: a client that cannot ask its user, no elicitation capability)."""
    asked, said = [], iter(answers or ())

    async def on_elicit(context, params):
        asked.append(params.message)
        answer = next(said)
        return ElicitResult(action="accept", content={"confirm": True}) if answer == "yes" else ElicitResult(action=answer)

    asks = {"elicitation_callback": on_elicit} if answers is not None else {}
    async with Client(target, mode=mode, read_timeout_seconds=60, **asks) as client:
        results = [await client.call_tool("image-gen-tiny", IMAGE) for _ in range(calls)]
        free = await client.call_tool("echo", {"text": "not billable"})
    return asked, results, free


def invoked(journal):
    return [entry["slug"] for entry in journal("invoke")]


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_past_the_budget_a_stdio_agent_asks_its_user(sandbox, journal, mode):
    target = StdioServerParameters(command=sys.executable, args=[
        "-m", "colabhive_mcp", "stdio", "--api-url", sandbox.url, "--billable-calls-per-hour", "2"],
        env=server_env(COLABHIVE_API_KEY=DEMO_KEY))
    asked, results, free = anyio.run(agent_loop, target, mode, ["yes", "decline"])
    assert len(asked) == 2  # the third and fourth calls, not the first two
    assert all("hourly budget of 2 billable ColabHive calls is used" in q and "$0.002 / image" in q for q in asked)
    assert "(2 in the last hour)" in asked[0] and "(3 in the last hour)" in asked[1]  # the yes-d call counts
    assert [r.is_error for r in results] == [False, False, False, True]
    assert "did not allow" in results[3].content[0].text
    assert free.content[0].text == "not billable"
    assert invoked(journal) == ["image-gen-tiny"] * 3 + ["echo"]


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_a_client_that_cannot_ask_reads_why_and_when_over_http(gateway_sandbox, sandbox, journal, mode):
    """At the server's defaults but the budget: refused past it, with the words a model acts on and
    the figures in ``_meta``; the refusal is logged and counted, never the arguments."""
    with hosted_server(gateway_sandbox.url, billable_calls_per_hour=2) as server:
        transport = streamable_http_client(server.url, http_client=httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {DEMO_KEY}"}, timeout=60))
        asked, results, free = anyio.run(agent_loop, transport, mode, None, 3)
        logged = events(server, "mcp.spend.over_budget")
        counted = requests.get(server.url.removesuffix("/mcp") + "/metrics", timeout=30).text
    assert asked == []  # no elicitation capability: nobody to ask
    assert [r.is_error for r in results] == [False, False, True]
    words = results[2].content[0].text
    assert "budget of 2 billable ColabHive calls is used" in words and "Ask the user" in words
    assert "frees up in" in words and "billable_calls_per_hour" in words
    facts = results[2].meta[LIMIT]
    assert facts["limit"] == "billable_calls_per_hour" and facts["used"] == 2 and 3500 <= facts["retryAfter"] <= 3600
    assert free.content[0].text == "not billable"
    assert [(e["decision"], e["tool"]) for e in logged] == [("refused", "image-gen-tiny")]
    assert 'mcp_guard_decisions_total{reason="budget_refused"} 1.0' in counted
    assert "hive at dawn" not in server.stderr()
    assert invoked(journal) == ["image-gen-tiny"] * 2 + ["echo"]


def test_32_calls_at_once_at_the_budgets_edge(gateway_sandbox, sandbox, journal):
    """The hosted server at its default workers: 32 billable calls of one key at once against a
    budget of 10 — exactly 10 reach the gateway, whichever worker serves them."""
    with hosted_server(gateway_sandbox.url, billable_calls_per_hour=10, spend_guard="refuse") as server:
        def call(_):
            return modern(server.url, "tools/call", {"name": "image-gen-tiny", "arguments": IMAGE}).json()["result"]

        with concurrent.futures.ThreadPoolExecutor(32) as pool:
            answers = list(pool.map(call, range(32)))
    passed = [a for a in answers if not a.get("isError")]
    refused = [a for a in answers if a.get("isError")]
    assert len(passed) == 10 and len(refused) == 22
    assert all(a["_meta"][LIMIT]["allowed"] == 10 for a in refused)
    assert invoked(journal) == ["image-gen-tiny"] * 10


def test_a_stdio_server_forgets_nothing_spent_when_it_restarts(sandbox, journal, tmp_path):
    """What one start spent counts in the next (a host restarts its servers often), in a directory of
    the user's alone; the demo key's budget is the same for every stdio server of that user."""
    state = tmp_path / "state"
    target = StdioServerParameters(command=sys.executable, args=[
        "-m", "colabhive_mcp", "stdio", "--api-url", sandbox.url, "--billable-calls-per-day", "3",
        "--spend-guard", "refuse"], env=server_env(COLABHIVE_API_KEY=DEMO_KEY, XDG_STATE_HOME=str(state)))
    first = anyio.run(agent_loop, target, "legacy", None, 2)[1]
    second = anyio.run(agent_loop, target, "legacy", None, 2)[1]
    assert [r.is_error for r in first + second] == [False, False, False, True]
    assert "daily budget of 3 billable ColabHive calls is used" in second[1].content[0].text
    assert (state / "colabhive-mcp" / "spend").stat().st_mode & 0o777 == 0o700
    assert invoked(journal).count("image-gen-tiny") == 3


def test_a_2026_client_is_asked_by_whichever_worker_serves_it(gateway_sandbox, sandbox, journal):
    """2026-07-28 over the hosted server at its default workers: past the budget the call comes back
    ``input_required``, the SDK asks its user, and the call with the answer runs wherever it lands."""
    with hosted_server(gateway_sandbox.url, billable_calls_per_hour=1) as server:
        transport = streamable_http_client(server.url, http_client=httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {DEMO_KEY}"}, timeout=60))
        asked, results, _ = anyio.run(agent_loop, transport, "auto", ["yes", "decline"], 3)
    assert len(asked) == 2 and all("hourly budget of 1 billable" in q for q in asked)
    assert [r.is_error for r in results] == [False, False, True]
    assert invoked(journal) == ["image-gen-tiny"] * 2 + ["echo"]


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_every_limit_refusal_reads_alike_through_the_sdk(gateway_sandbox, sandbox, mode):
    """Not only the budget: a key past ``tenant_calls_per_minute`` gets a tool error in words a model
    acts on, with the limit, its figures and ``retryAfter`` in ``_meta``, in either era."""
    with hosted_server(gateway_sandbox.url, tenant_calls_per_minute=2) as server:
        async def three_calls():
            transport = streamable_http_client(server.url, http_client=httpx2.AsyncClient(
                headers={"Authorization": f"Bearer {DEMO_KEY}"}, timeout=60))
            async with Client(transport, mode=mode, read_timeout_seconds=60) as client:
                return [await client.call_tool("echo", {"text": f"call {n}"}) for n in range(3)]

        results = anyio.run(three_calls)
    assert [r.is_error for r in results] == [False, False, True]
    assert "started 2 ColabHive calls in the last minute" in results[2].content[0].text
    facts = results[2].meta[LIMIT]
    assert facts["limit"] == "tenant_calls_per_minute" and facts["allowed"] == 2 and 1 <= facts["retryAfter"] <= 60


@pytest.mark.parametrize("gunicorn_conf", [False, True], ids=["serve", "plain-gunicorn"])
def test_what_a_key_spent_outlives_a_stop_in_the_state_directory(gateway_sandbox, sandbox, journal, tmp_path,
                                                                  gunicorn_conf):
    """The hosted server keeps what keys spend in its state directory (systemd's StateDirectory=): a stop,
    a new runtime directory, a new start, and the budget is where it was (``serve``, and plain gunicorn
    with the shipped config, whose workers read the settings from the environment)."""
    state = tmp_path / "state"
    call = {"name": "image-gen-tiny", "arguments": IMAGE}
    settings = {"COLABHIVE_BILLABLE_CALLS_PER_DAY": "2", "COLABHIVE_SPEND_GUARD": "refuse",
                "COLABHIVE_STATE_DIR": str(state)}
    for expected in ([False, False], [True]):
        server = HttpServer(gateway_sandbox.url, env=settings, gunicorn_conf=gunicorn_conf)
        try:
            answers = [modern(server.url, "tools/call", call).json()["result"] for _ in expected]
        finally:
            server.stop()
        assert [bool(a.get("isError")) for a in answers] == expected
    assert "daily budget of 2" in answers[0]["content"][0]["text"]
    assert state.stat().st_mode & 0o777 == 0o700 and len(journal("invoke")) == 2
    assert {path.name for path in state.iterdir()} <= {"instance.db", "instance.db-wal", "instance.db-shm"}
