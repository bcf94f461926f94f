"""Cold calls through real hosts' clients with real cutoffs: the official TypeScript SDK (what most
desktop hosts embed) and the official Python SDK, over stdio and the hosted server (two workers).

Each host gives up on a call at its cutoff without resetting its timer on progress, retries a call
that timed out, and follows any continuation a result names. Whether the server knows the cutoff
(it answers just before it) or not (the host times out and retries), the job's result reaches the
host and the gateway sees exactly one invocation. A user's stop still reaches the gateway's cancel.
"""

import sys
import time

import anyio
import pytest
from mcp import Client, StdioServerParameters

from colabhive_mcp.sandbox import DEMO_KEY

from ..support.http_server import HttpServer
from ..support.environ import server_env

pytestmark = pytest.mark.real_clients

CUTOFF_MS = 4000
JOB_S = 10


@pytest.fixture
def ts_host(ts_sdk):
    """``ts_host(scenario)``: run tests/ts_host.mjs with the TypeScript SDK and return its JSON lines."""
    return lambda scenario, timeout=180: ts_sdk("ts_host.mjs", scenario, timeout)


def stdio_scenario(sandbox, *flags):
    return {"transport": "stdio", "command": sys.executable,
            "args": ["-m", "colabhive_mcp", "stdio", "--api-url", sandbox.url, "--poll-initial", "0.05",
                     "--poll-max-interval", "0.3", *flags], "env": server_env(COLABHIVE_API_KEY=DEMO_KEY)}


def http_scenario(server):
    return {"transport": "http", "url": server.url, "key": DEMO_KEY}


def cold_job(seconds=JOB_S):
    # a distinct job per scenario: the argument makes it a call of its own
    return {"tool": "batch-report", "arguments": {"seconds": seconds + time.monotonic() % 1 / 1000},
            "cutoff_ms": CUTOFF_MS, "attempts": 12}


def assert_the_result_reached_the_host_once(lines, journal):
    outcome = lines[-1]
    assert outcome["outcome"] == "result", lines
    assert "report ready" in outcome["result"]["content"][0]["text"] and not outcome["result"].get("isError")
    assert len(journal("invoke")) == 1, journal("invoke")  # every retry and continuation: the same work
    assert not journal("cancel")


@pytest.fixture(scope="module")
def knowing(gateway_sandbox):
    """A hosted server (default two workers) told that its hosts give up after 4 s."""
    server = HttpServer(gateway_sandbox.url, env={"COLABHIVE_HOST_DEADLINE": str(CUTOFF_MS / 1000)})
    yield server
    server.stop()


def test_ts_host_over_stdio_that_times_out_and_retries_gets_the_result_of_one_invocation(ts_host, sandbox, journal):
    lines = ts_host({**stdio_scenario(sandbox), **cold_job()})
    assert any(line.get("code") == -32001 for line in lines[:-1]), lines  # the host did give up, and retried
    assert_the_result_reached_the_host_once(lines, journal)


def test_ts_host_over_stdio_follows_the_continuation_when_the_server_knows_its_cutoff(ts_host, sandbox, journal):
    lines = ts_host({**stdio_scenario(sandbox, "--host-deadline", str(CUTOFF_MS / 1000)), **cold_job()})
    # answered before every cutoff, as the host itself judged it (its own timer, not this machine's speed)
    assert not [line for line in lines[:-1] if "error" in line], lines
    assert [line for line in lines if line.get("continuation")], lines
    assert_the_result_reached_the_host_once(lines, journal)


def test_ts_host_over_http_that_times_out_and_retries_gets_the_result_of_one_invocation(ts_host, hosted, journal):
    lines = ts_host({**http_scenario(hosted), **cold_job()})
    assert any(line.get("code") == -32001 for line in lines[:-1]), lines
    assert_the_result_reached_the_host_once(lines, journal)


def test_ts_host_over_http_follows_the_continuation_when_the_server_knows_its_cutoff(ts_host, knowing, journal):
    lines = ts_host({**http_scenario(knowing), **cold_job()})
    assert [line for line in lines if line.get("continuation")], lines
    assert not [line for line in lines[:-1] if "error" in line], lines  # the host never gave up on a call
    assert_the_result_reached_the_host_once(lines, journal)


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_a_users_stop_in_a_ts_host_still_reaches_the_gateways_cancel(ts_host, sandbox, hosted, journal, transport):
    scenario = stdio_scenario(sandbox) if transport == "stdio" else http_scenario(hosted)
    lines = ts_host({**scenario, **cold_job(30), "abort_after_ms": 1500})
    assert lines[-1]["outcome"] == "aborted", lines
    deadline = time.monotonic() + 5
    while not journal("cancel") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(journal("cancel")) == 1 and len(journal("invoke")) == 1


async def python_host(target, seconds):
    """The official Python SDK with a 3 s read timeout: it times out, says so, and the host retries."""
    attempts = []
    async with Client(target, mode="legacy", read_timeout_seconds=3) as client:
        for _ in range(8):
            try:
                result = await client.call_tool("batch-report", {"seconds": seconds})
            except Exception as exc:  # noqa: BLE001 - the SDK's timeout error
                attempts.append(str(exc))
                continue
            return attempts, result.content[0].text
    return attempts, None


def test_python_sdk_host_that_times_out_and_retries_gets_the_result_of_one_invocation(sandbox, journal):
    target = StdioServerParameters(command=sys.executable, args=[
        "-m", "colabhive_mcp", "stdio", "--api-url", sandbox.url, "--poll-initial", "0.05",
        "--poll-max-interval", "0.3"], env=server_env(COLABHIVE_API_KEY=DEMO_KEY))
    attempts, text = anyio.run(python_host, target, 7.5)
    assert attempts and all("timed out" in a for a in attempts) and text and "report ready" in text
    assert len(journal("invoke")) == 1 and not journal("cancel")
