"""Operating the hosted server: metrics across gunicorn workers, probes, and the refresh endpoint."""

import concurrent.futures
import hashlib
import re
import socket
import time

import requests

import pytest

from colabhive_mcp.sandbox import DEMO_KEY, DEMO_KEY_B

from ...support.http_server import HttpServer, free_port
from ...support.http_client import modern

pytestmark = pytest.mark.slow


def metric(text, name, **labels):
    """The sum of a metric's samples whose labels include ``labels``."""
    total = 0.0
    for line in text.splitlines():
        match = re.match(r"^" + re.escape(name) + r"(\{(.*)\})? (\S+)$", line)
        if match and all(f'{k}="{v}"' in (match.group(2) or "") for k, v in labels.items()):
            total += float(match.group(3))
    return total


def test_metrics_add_up_over_two_workers_and_carry_no_key(gateway_sandbox, tmp_path):
    server = HttpServer(gateway_sandbox.url, "--http-workers", "2", env={"COLABHIVE_METRICS_TOKEN": "m-token-1",
                                                                          "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)})
    try:
        calls = 0  # a new connection each time: gunicorn spreads them over its workers, as the kernel wakes them
        while calls < 12 or len(list(tmp_path.glob("counter_*.db"))) < 2:  # until both workers have served calls
            assert calls < 300, "every connection went to the same worker"
            assert modern(server.url, "tools/call", {"name": "echo", "arguments": {"text": str(calls)}},
                          key=DEMO_KEY if calls % 2 else DEMO_KEY_B, Connection="close").status_code == 200
            calls += 1
        modern(server.url, "tools/call", {"name": "flaky-translate", "arguments": {"text": "x"}})
        assert requests.get(server.root + "/metrics", timeout=10).status_code == 401
        text = requests.get(server.root + "/metrics", headers={"Authorization": "Bearer m-token-1"}, timeout=10).text
    finally:
        server.stop()
    assert metric(text, "mcp_tool_calls_total", tool="echo", status="succeeded") == calls
    assert metric(text, "mcp_tool_calls_total", tool="flaky-translate", status="failed") == 1
    assert metric(text, "mcp_tool_latency_seconds_count") == calls + 1
    assert metric(text, "colabhive_upstream_requests_total", route="invoke") == calls + 1
    assert metric(text, "mcp_manifest_requests_total", result="fetched") >= 2  # one per tenant and worker
    assert metric(text, "mcp_tenants_resident") >= 2
    assert DEMO_KEY not in text and DEMO_KEY_B not in text
    assert len(list(tmp_path.glob("counter_*.db"))) == 2  # both workers served calls, and no other process counted


def test_probes_and_refresh(gateway_sandbox, sandbox):
    server = HttpServer(gateway_sandbox.url, "--http-workers", "1")
    try:
        ready = requests.get(server.root + "/readyz", timeout=10)
        assert ready.status_code == 200 and ready.json() == {"status": "ready"}  # and nothing else about the server
        assert requests.get(server.root + "/healthz", timeout=10).json() == {"status": "ok"}
        before = requests.post(server.root + "/refresh", headers={"X-API-Key": DEMO_KEY}, timeout=10).json()
        sandbox.add_action({"name": "published-now", "description": "new", "inputSchema": {"type": "object"}})
        after = requests.post(server.root + "/refresh", headers={"X-API-Key": DEMO_KEY}, timeout=10).json()
        assert after["actions"] == before["actions"] + 1 and after["etag"] != before["etag"]
        assert requests.post(server.root + "/refresh", timeout=10).status_code == 401
    finally:
        server.stop()
    dead = HttpServer(f"http://127.0.0.1:{free_port()}/api/builder/v1", "--http-workers", "1")
    try:
        unavailable = requests.get(dead.root + "/readyz", timeout=10)
        assert unavailable.status_code == 503 and unavailable.json() == {"status": "unavailable"}
    finally:
        dead.stop()


def test_readiness_probes_of_a_gateway_that_never_answers_hold_one_thread_not_all():
    """The gateway accepts connections and never answers: one /readyz at a time waits for it (2 s),
    the others answer at once (503: not known to be ready), and /healthz meanwhile too."""
    with socket.socket() as silent:  # connections wait in its backlog, never read
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        server = HttpServer(f"http://127.0.0.1:{silent.getsockname()[1]}/api/builder/v1", "--http-workers", "1",
                            "--http-threads", "8")
        try:
            with concurrent.futures.ThreadPoolExecutor(24) as pool:
                probes = [pool.submit(requests.get, server.root + "/readyz", timeout=30) for _ in range(24)]
                time.sleep(0.5)
                health = time.perf_counter()
                assert requests.get(server.root + "/healthz", timeout=30).status_code == 200
                assert time.perf_counter() - health < 2
                answers = [p.result() for p in probes]
                assert [a.status_code for a in answers] == [503] * 24
                waits = sorted(a.elapsed.total_seconds() for a in answers)
                assert waits[-1] >= 2 and waits[-2] < 1.5, waits  # one asked; the others did not wait for it
        finally:
            server.stop()


def test_metrics_on_an_address_others_can_reach_need_the_metrics_token(gateway_sandbox):
    server = HttpServer(gateway_sandbox.url, "--http-workers", "1", host="0.0.0.0")
    try:
        refused = requests.get(server.root + "/metrics", timeout=10)
        assert refused.status_code == 403 and b"metrics_token" in refused.content
    finally:
        server.stop()


def test_without_the_metrics_token_a_tenants_slugs_are_not_in_the_metrics(hosted, sandbox):
    """Any local user may read /metrics on a loopback bind without the token: a tenant's private
    slug shows there only as a digest (the server's own tools keep their names)."""
    key, slug = "hive_private_tenant_0001", "acme-payroll-export-7f3a"
    sandbox.add_key(key)
    sandbox.add_action({"name": slug, "description": "private", "inputSchema": {"type": "object"}}, [key])
    called = modern(hosted.url, "tools/call", {"name": slug, "arguments": {}}, key=key).json()
    assert not called["result"].get("isError"), called
    modern(hosted.url, "tools/call", {"name": "colabhive__wait_for_result", "arguments": {"invocation_id": "inv_x"}},
           key=key)
    text = requests.get(hosted.root + "/metrics", timeout=10).text
    assert slug not in text and "acme" not in text
    digest = "sha256:" + hashlib.sha256(slug.encode()).hexdigest()[:12]
    assert metric(text, "mcp_tool_calls_total", tool=digest, status="succeeded") == 1
    assert metric(text, "mcp_tool_calls_total", tool="colabhive__wait_for_result") >= 1
