"""Long calls through real clients: the official SDK cancelling mid-call, and the poll budget."""

import sys
import time

import anyio
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from colabhive_mcp.calls.polling import Backoff
from colabhive_mcp.protocol import Server
from colabhive_mcp.sandbox import DEMO_KEY
from colabhive_mcp.tenants.tenant import Tenant

from ..support.core_client import Client as CoreClient
from ..support.environ import server_env
from ..support.waiting import wait_until

pytestmark = pytest.mark.real_clients


async def call_then_abandon(target, mode, seconds_before_cancel):
    """Start a 60 s job with a progress callback; abandon the call once progress arrived."""
    progressed = anyio.Event()

    async def on_progress(value, total, message):
        progressed.set()

    async with Client(target, mode=mode, read_timeout_seconds=60) as client:
        async with anyio.create_task_group() as group:
            async def call():
                await client.call_tool("batch-report", {"seconds": 60}, progress_callback=on_progress)

            group.start_soon(call)
            with anyio.fail_after(20):
                await progressed.wait()
            await anyio.sleep(seconds_before_cancel)
            group.cancel_scope.cancel()
        abandoned_at = time.time()
        await anyio.sleep(2)  # the session stays open: a cancelled call must not answer
    return abandoned_at


def assert_cancelled_upstream(journal, abandoned_at):
    wait_until(lambda: journal("cancel"), every=0.05)
    cancels = journal("cancel")
    assert len(cancels) == 1 and cancels[0]["t"] - abandoned_at < 1.5


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_sdk_cancellation_over_stdio_reaches_the_gateway(sandbox, journal, mode):
    target = StdioServerParameters(command=sys.executable, args=[
        "-m", "colabhive_mcp", "stdio", "--api-url", sandbox.url, "--poll-initial", "0.05",
        "--poll-max-interval", "0.3"], env=server_env(COLABHIVE_API_KEY=DEMO_KEY))
    abandoned_at = anyio.run(call_then_abandon, target, mode, 0.2)
    assert_cancelled_upstream(journal, abandoned_at)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_sdk_cancellation_over_hosted_http_reaches_the_gateway(hosted, sandbox, journal, mode):
    target = streamable_http_client(hosted.url, http_client=httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {DEMO_KEY}"}, timeout=60))
    abandoned_at = anyio.run(call_then_abandon, target, mode, 0.2)
    assert_cancelled_upstream(journal, abandoned_at)


def promised_polls(backoff, seconds):
    """The most polls the backoff allows in ``seconds`` (every interval at its lowest jitter, and cut to
    its share of the time waited)."""
    elapsed, polls, delay = 0.0, 0, backoff.initial
    while elapsed <= seconds:
        elapsed += min(delay, max(backoff.initial, backoff.share * elapsed)) * (1 - backoff.jitter)
        polls += 1
        delay = min(backoff.maximum, delay * backoff.factor)
    return polls


def test_polls_for_a_job_past_the_longest_interval_stay_within_the_backoff_bound(config, journal):
    production = config.replace(poll_initial=0.25, poll_max_interval=5.0)
    client = CoreClient(Server(production), Tenant(production, production.api_key))
    client.initialize()
    started = time.monotonic()
    answer = client.call("batch-report", {"seconds": 10})  # the interval grows to its 5 s ceiling
    took = time.monotonic() - started
    assert "report ready" in answer["result"]["content"][0]["text"]
    polls = len(journal("poll"))
    backoff = Backoff(0.25, 5.0)
    assert 3 <= polls <= promised_polls(backoff, took)
    assert took < 10 * (1 + backoff.share * (1 + backoff.jitter)) + 1  # noticed within a share of the job's time
