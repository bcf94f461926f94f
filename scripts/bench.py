"""colabhive-mcp benchmarks: the wrapper's own cost against the gateway call it wraps.

    python scripts/bench.py              # the full run (a few minutes on 2 cores)
    python scripts/bench.py --quick      # a smoke run (what the tests run): small counts
    python scripts/bench.py --json out.json --repeat 5 --only overhead_http,throughput_8_clients
    python scripts/bench.py --table scripts/results/bench.json   # the performance table in docs/performance.rst, from a results file
    python scripts/bench.py --json new.json --compare scripts/results/bench.json   # and what changed
    python scripts/bench.py --baseline /tmp/colabhive-0.3.4/bin/python   # and an older release, same run

Starts the sandbox gateway in a process of its own (with a 300-tool, ~1 MB manifest) and the
servers with their default settings, measures, and prints a table and JSON. The cold paths (a
first tool list) are measured on the sandbox and again on a gateway stub with the same manifest
ready in memory as one page (``stub_gateway.py``), where nothing of the server's work hides behind
the gateway's. Next to each latency it counts the server's CPU per call (user + system time of its
process tree, from /proc), which a busy machine disturbs far less than it disturbs latencies. The comparisons with the direct gateway call run
``--repeat`` times: the table shows the median run and every run's headline figure (the spread).
Figures, not tests: they depend on the machine. The JSON records the settings the servers ran
with and the machine; ``--table`` renders the performance table of docs/performance.rst from it, and a figure
measured with non-default settings says so there. ``--baseline PYTHON`` also measures the release
of colabhive-mcp that PYTHON has installed (``baseline.py`` says how to install 0.3.4), against
the same gateway in the same run: its figures get a column of their own. The throughput is also
measured for the stack's floor (``floor_app.py``: a minimal app on the same gunicorn settings that
forwards the call with ``requests``), so the table shows what the project's own work costs.
"""

from __future__ import annotations

import argparse
import compileall
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Union

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from colabhive_mcp import logs  # noqa: E402
from colabhive_mcp.calls.call import CallOptions  # noqa: E402
from colabhive_mcp.cli.demo import StdioPeer  # noqa: E402
from colabhive_mcp.protocol import Server, Session, jsonrpc  # noqa: E402
from colabhive_mcp.sandbox import DEMO_KEY  # noqa: E402
from colabhive_mcp.settings.config import Config  # noqa: E402
from colabhive_mcp.tenants.tenant import Tenant  # noqa: E402
from tests.support.http_server import HttpServer, free_port, rpc_messages  # noqa: E402

sys.path.insert(0, str(ROOT / "scripts"))
from baseline import BaselineServer, FloorServer, ServerProcess, version  # noqa: E402
from baseline import stdio_command as baseline_stdio  # noqa: E402
from bench_report import render_comparison, render_table  # noqa: E402
from bench_sandbox import Sandbox, add_big_manifest, add_rich_manifest  # noqa: E402
from stub_gateway import StubGateway  # noqa: E402

Served = Union[HttpServer, ServerProcess]  # a server measured: its ``url`` and its ``process``

MODERN_META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
               "io.modelcontextprotocol/clientCapabilities": {}}


Upstream = Union[Sandbox, StubGateway]  # a gateway the cold paths are measured on: its ``url`` and ``root_url``


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"p50": round(statistics.median(ordered) * 1000, 3),
            "p99": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 3)}


def timed(fn: Callable[[], Any], count: int) -> list[float]:
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return samples


def direct_invoke(session: requests.Session, url: str) -> None:
    response = session.post(url + "/actions/echo:invoke", json={"input": {"text": "x"}, "sync": True,
                                                               "sync_timeout_s": 1}, timeout=30)
    response.raise_for_status()


def bench_overhead_stdio(sandbox: Sandbox, count: int) -> dict[str, Any]:
    direct = requests.Session()
    direct.headers["X-API-Key"] = DEMO_KEY
    peer = StdioPeer([sys.executable, "-m", "colabhive_mcp", "stdio", "--api-url", sandbox.url],
                     env={**os.environ, "COLABHIVE_API_KEY": DEMO_KEY})
    try:
        peer.initialize()
        call = {"name": "echo", "arguments": {"text": "x"}}
        peer.request("tools/call", call)  # warm: manifest, connection
        direct_invoke(direct, sandbox.url)
        through, straight = [], []
        cpu = cpu_seconds(peer.process.pid)
        for _ in range(count):  # interleaved, so both see the same machine
            through += timed(lambda: peer.request("tools/call", call), 1)
            straight += timed(lambda: direct_invoke(direct, sandbox.url), 1)
        cpu = cpu_seconds(peer.process.pid) - cpu
    finally:
        peer.close()
    return {**compare(through, straight), "server_cpu_ms_per_call": round(cpu / count * 1000, 3)}


def compare(through: list[float], straight: list[float]) -> dict[str, Any]:
    a, b = percentiles(through), percentiles(straight)
    return {"server_ms": a, "direct_ms": b, "added_p50_ms": round(a["p50"] - b["p50"], 3),
            "added_p99_ms": round(a["p99"] - b["p99"], 3), "ratio_p50": round(a["p50"] / b["p50"], 2)}


def modern_call(session: requests.Session, url: str) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "x"}, "_meta": MODERN_META}}
    response = session.post(url, json=body, timeout=30, headers={
        "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "echo",
        "Accept": "application/json, text/event-stream", "Authorization": f"Bearer {DEMO_KEY}"})
    response.raise_for_status()


def bench_overhead_http(sandbox: Sandbox, server: Served, count: int) -> dict[str, Any]:
    through_session, direct = requests.Session(), requests.Session()
    direct.headers["X-API-Key"] = DEMO_KEY
    modern_call(through_session, server.url)
    direct_invoke(direct, sandbox.url)
    through, straight = [], []
    cpu = cpu_seconds(server.process.pid)
    for _ in range(count):
        through += timed(lambda: modern_call(through_session, server.url), 1)
        straight += timed(lambda: direct_invoke(direct, sandbox.url), 1)
    cpu = cpu_seconds(server.process.pid) - cpu
    return {**compare(through, straight), "server_cpu_ms_per_call": round(cpu / count * 1000, 3)}


def bench_tools_list(sandbox: Sandbox, count: int) -> dict[str, Any]:
    config = Config(api_url=sandbox.url, api_key=DEMO_KEY, log_level="error", tenant_calls_per_minute=0)
    server, tenant = Server(config), Tenant(config, DEMO_KEY)
    session = Session(id="bench")
    server.handle(jsonrpc.frame_of({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}}),
        tenant=tenant, session=session)
    request = jsonrpc.frame_of({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    answer = server.handle(request, tenant=tenant, session=session)  # warm
    size = len(jsonrpc.encode(answer))

    def listing() -> None:  # what a transport does: handle, then encode
        jsonrpc.encode(server.handle(request, tenant=tenant, session=session))

    cpu = time.process_time()
    result = percentiles(timed(listing, count))
    return {"tools": len(answer["result"]["tools"]), "bytes": size, "server_ms": result,
            "server_cpu_ms_per_call": round((time.process_time() - cpu) / count * 1000, 3)}


def bench_throughput(sandbox: Sandbox, server: Served, clients: int, seconds: float) -> dict[str, Any]:
    """Calls/s of ``clients`` threads for ``seconds``, through the server and direct; and the CPU
    each call costs the clients, the server and the gateway (what bounds the ratio on 2 cores)."""
    def drive(call: Callable[[requests.Session], None]) -> dict[str, Any]:
        processes = {"clients": None, "server": server.process.pid, "gateway": sandbox.process.pid}
        cpu_before = {name: cpu_seconds(pid) for name, pid in processes.items()}
        stop = time.monotonic() + seconds
        latencies: list[float] = []
        errors = 0
        lock = threading.Lock()

        def client() -> None:
            nonlocal errors
            session = requests.Session()
            session.headers["X-API-Key"] = DEMO_KEY
            while time.monotonic() < stop:
                started = time.perf_counter()
                try:
                    call(session)
                    with lock:
                        latencies.append(time.perf_counter() - started)
                except requests.RequestException:
                    with lock:
                        errors += 1

        with ThreadPoolExecutor(clients) as pool:
            for _ in range(clients):
                pool.submit(client)
        cpu_us = {name: round((cpu_seconds(pid) - cpu_before[name]) / max(len(latencies), 1) * 1e6)
                  for name, pid in processes.items()}
        return {"calls_per_s": round(len(latencies) / seconds, 1), "errors": errors, **percentiles(latencies),
                "cpu_us_per_call": cpu_us}

    through = drive(lambda s: modern_call(s, server.url))
    straight = drive(lambda s: direct_invoke(s, sandbox.url))
    return {"server": through, "direct": straight,
            "ratio": round(through["calls_per_s"] / max(straight["calls_per_s"], 0.1), 2)}


def throughput_runs(sandbox: Sandbox, server: Served, repeat: int, quick: bool) -> dict[str, Any]:
    """:func:`bench_throughput` of 8 clients, ``repeat`` times: the median run, with every run's ratio."""
    return median_run([bench_throughput(sandbox, server, 8, 2 if quick else 15) for _ in range(repeat)], "ratio")


def family(pid: int) -> list[int]:
    """A process and its children (gunicorn's master and workers)."""
    return [pid] + [int(p) for p in subprocess.run(["pgrep", "-P", str(pid)], capture_output=True,
                                                   text=True).stdout.split()]


def cpu_seconds(pid: int | None = None) -> float:
    """CPU time (user + system) used so far by a process and its children; None: this process."""
    if pid is None:
        times = os.times()
        return times.user + times.system
    total = 0
    for p in family(pid):
        fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def process_stats(pid: int) -> tuple[int, float]:
    """Threads and RSS (MB) of a process and its children, from /proc."""
    threads, rss = 0, 0.0
    for p in family(pid):
        for line in Path(f"/proc/{p}/status").read_text().splitlines():
            if line.startswith("Threads:"):
                threads += int(line.split()[1])
            elif line.startswith("VmRSS:"):
                rss += int(line.split()[1]) / 1024
    return threads, round(rss, 1)


def bench_long_polls(sandbox: Sandbox, server: HttpServer, calls: int, seconds: float) -> dict[str, Any]:
    """``calls`` concurrent calls of a ``seconds`` job, 20 per key (within the default per-key limit)."""
    keys = [f"hive_bench_long_{i:03d}" for i in range(max(1, calls // 20))]
    for key in keys:
        requests.post(sandbox.root_url + "/_sandbox/keys", json={"key": key}, timeout=10).raise_for_status()
    peak = [0, 0.0]
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.5):
            threads, rss = process_stats(server.process.pid)
            peak[0], peak[1] = max(peak[0], threads), max(peak[1], rss)

    def one(index: int) -> bool:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "batch-report", "arguments": {"seconds": seconds}, "_meta": MODERN_META}}
        response = requests.post(server.url, json=body, timeout=seconds * 10, headers={
            "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "batch-report",
            "Accept": "application/json", "Authorization": f"Bearer {keys[index % len(keys)]}"})
        return response.ok and "report ready" in response.text

    threading.Thread(target=watch, daemon=True).start()
    started, cpu = time.monotonic(), cpu_seconds(server.process.pid)
    with ThreadPoolExecutor(calls) as pool:
        results = list(pool.map(one, range(calls)))
    done.set()
    return {"calls": calls, "succeeded": sum(results), "errors": calls - sum(results),
            "wall_s": round(time.monotonic() - started, 1), "peak_threads": peak[0], "peak_rss_mb": peak[1],
            "server_cpu_s": round(cpu_seconds(server.process.pid) - cpu, 2)}


def modern_list(url: str, key: str) -> int:
    """A 2026 ``tools/list`` with ``key``, on a connection of its own: how many tools it lists."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": MODERN_META}}
    response = requests.post(url, json=body, timeout=60, headers={
        "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list", "Accept": "application/json",
        "Authorization": f"Bearer {key}"})
    response.raise_for_status()
    return len(response.json()["result"]["tools"])


def bench_churn(sandbox: Sandbox, keys: int, laps: int, batch: int) -> dict[str, Any]:
    """``keys`` distinct keys, ``laps`` times over, each making one ``tools/list``, through a server at its
    defaults (far more keys than its pools hold: each list is a new tenant, most evicting another): the
    server's CPU per new tenant and its RSS, batch by batch. Flat is the figure: no batch costs more
    than the first, nor holds more memory once the pools are full."""
    names = [f"hive_churn_{i:05d}" for i in range(keys)]
    for key in names:
        requests.post(sandbox.root_url + "/_sandbox/keys", json={"key": key}, timeout=10).raise_for_status()
    runtime = Path(tempfile.mkdtemp(prefix="colabhive-bench-churn-"))
    server = HttpServer(sandbox.url, env={"COLABHIVE_RUNTIME_DIR": str(runtime)}, tuned=False)
    batches: list[dict[str, float]] = []
    try:
        for _lap in range(laps):
            for start in range(0, keys, batch):
                cpu = cpu_seconds(server.process.pid)
                for key in names[start:start + batch]:
                    modern_list(server.url, key)
                batches.append({"cpu_ms_per_tenant": round((cpu_seconds(server.process.pid) - cpu) / batch * 1000, 2),
                                "rss_mb": process_stats(server.process.pid)[1], "store_mb": files_mb(runtime)})
    finally:
        server.stop()
        shutil.rmtree(runtime, ignore_errors=True)
    cpu = [b["cpu_ms_per_tenant"] for b in batches]
    return {"keys": keys, "laps": laps, "batch": batch, "pool_size": Config().pool_size, "batches": batches,
            "cpu_ms_per_tenant": {"first": cpu[0], "median": statistics.median(cpu), "last": cpu[-1]},
            "rss_mb": {"first": batches[0]["rss_mb"], "last": batches[-1]["rss_mb"],
                       "max": max(b["rss_mb"] for b in batches)},
            "store_mb": {"first": batches[0]["store_mb"], "last": batches[-1]["store_mb"]}}


def files_mb(directory: Path) -> float:
    """What the files in ``directory`` hold (the instance store: in production, a tmpfs, so memory too)."""
    return round(sum(f.stat().st_size for f in directory.rglob("*") if f.is_file()) / 1e6, 1)


def bench_cold_list(sandbox: Sandbox, threads: int) -> dict[str, Any]:
    config = Config(api_url=sandbox.url, api_key=DEMO_KEY, log_level="error")
    tenant = Tenant(config, DEMO_KEY)
    before = len([e for e in sandbox.journal_entries() if e["route"] == "manifest" and e["cursor"] is None])
    barrier = threading.Barrier(threads)

    def cold() -> None:
        barrier.wait()
        tenant.catalog()

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda _: cold(), range(threads)))
    after = len([e for e in sandbox.journal_entries() if e["route"] == "manifest" and e["cursor"] is None])
    return {"threads": threads, "manifest_gets": after - before}


def bench_polls(sandbox: Sandbox, seconds: float) -> dict[str, Any]:
    config = Config(api_url=sandbox.url, api_key=DEMO_KEY, log_level="error")
    before = len([e for e in sandbox.journal_entries() if e["route"] == "poll"])
    Tenant(config, DEMO_KEY).call_tool("batch-report", {"seconds": seconds}, CallOptions("2025-11-25", threading.Event()))
    return {"job_s": seconds, "polls": len([e for e in sandbox.journal_entries() if e["route"] == "poll"]) - before}


def bench_tenancy(sandbox: Sandbox, tenants: int) -> dict[str, Any]:
    """RSS of a process holding ``tenants`` tenants, each with the 1 MB manifest (a snapshot)."""
    with tempfile.TemporaryDirectory(prefix="colabhive-bench-") as scratch:  # (this run's own: any user, in parallel)
        return _tenancy_with(sandbox, tenants, Path(scratch) / "manifest.json")


def _tenancy_with(sandbox: Sandbox, tenants: int, snapshot: Path) -> dict[str, Any]:
    manifest = requests.get(sandbox.url + "/mcp/manifest", headers={"X-API-Key": DEMO_KEY}).json()
    entries = list(manifest["tools"])
    cursor = manifest.get("nextCursor")
    while cursor:
        page = requests.get(sandbox.url + "/mcp/manifest", params={"cursor": cursor},
                            headers={"X-API-Key": DEMO_KEY}).json()
        entries += page["tools"]
        cursor = page.get("nextCursor")
    snapshot.write_text(json.dumps({"tools": entries}))
    code = (
        "import resource, sys, time\n"
        "from colabhive_mcp.settings.config import Config\nfrom colabhive_mcp.tenants.tenant import Tenant\n"
        "def rss():\n    return int(open('/proc/self/status').read().split('VmRSS:')[1].split()[0]) / 1024\n"
        "import os\nfrom colabhive_mcp import logs\nlogs.configure('error', 'json', open(os.devnull, 'w'))\n"
        "import jsonschema, prometheus_client, requests  # a serving process has them: count the tenants only\n"
        "base = rss()\n"
        f"config = Config(api_url='http://127.0.0.1:9', manifest_snapshot='{snapshot}', log_level='error')\n"
        "started = time.perf_counter()\n"
        "first = Tenant(config, 'hive_bench_key_0'); first.catalog()\n"
        "cold_ms = (time.perf_counter() - started) * 1000\n"
        f"held = [Tenant(config, f'hive_bench_key_{{i}}') for i in range(1, {tenants})]\n"
        "[t.catalog() for t in held]\n"
        "print(round(rss() - base, 1), round(rss(), 1), round(cold_ms, 1))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=600)
    added, total, cold_ms = out.stdout.split()
    return {"tenants": tenants, "manifest_bytes": snapshot.stat().st_size, "rss_added_mb": float(added),
            "rss_total_mb": float(total), "tenant_cold_start_ms": float(cold_ms)}


DISTINCT_MANIFEST = """
import json, sys
from colabhive_mcp.catalog import tools
from colabhive_mcp.catalog.builtin_tools import ENTRIES
from colabhive_mcp.manifest.version import Manifest
from colabhive_mcp.catalog.policy import Policy
from colabhive_mcp.catalog.profiles import UNKNOWN
import jsonschema, prometheus_client, requests  # a serving process has them: count the manifests only

def rss():
    return int(open('/proc/self/status').read().split('VmRSS:')[1].split()[0]) / 1024

def entries(k):  # the big manifest's shape, each entry its own (as if every key had private actions)
    for i in range(300):
        properties = {f"field_{j}": {"type": "string", "description": f"Parameter {j} of action {i}/{k}. " * 4}
                      for j in range(13)}
        yield json.loads(json.dumps({"name": f"bench-action-{i:03d}", "displayName": f"Bench action {i}",
            "description": f"Benchmark action number {i} of manifest {k}. " * 20, "kind": "tool",
            "sideEffects": [], "latencyClass": "fast", "stability": "stable",
            "inputSchema": {"type": "object", "properties": properties}}))

base, count, steps = rss(), int(sys.argv[1]), []
for k in range(count):
    prepared = [tools.prepared(e) for e in entries(k)]  # as a fetch does, page by page
    manifest = Manifest(tuple(e for _, e in prepared), f'"{k}"', tuple(d for d, _ in prepared))
    tools.Catalog(manifest, Policy(), UNKNOWN, ENTRIES).listing("2025-11-25")  # a first list; then let go
    del prepared, manifest
    if (k + 1) % max(1, count // 5) == 0:
        steps.append([k + 1, round(rss() - base, 1)])
print(json.dumps(steps))
"""


def bench_distinct_manifests(count: int) -> dict[str, Any]:
    """RSS a process keeps for ``count`` different 1 MB manifests (300 entries each, no two alike) that
    were each fetched, listed and let go, as keys with manifests of their own pass through a pool: what
    the process keeps to share with the next tenant is bounded, not one more manifest per key."""
    out = subprocess.run([sys.executable, "-c", DISTINCT_MANIFEST, str(count)], capture_output=True, text=True,
                         cwd=ROOT, timeout=600, check=True)
    steps = json.loads(out.stdout)
    return {"manifests": count, "entries_each": 300, "rss_added_mb": [mb for _, mb in steps],
            "after": [n for n, _ in steps]}


def bench_stdio_startup(runs: int, baseline: str | None = None) -> dict[str, Any]:
    """Spawn to the initialize answer: this package's stdio server, or the ``baseline`` Python's. The
    gateway is unreachable, so what is measured is what each imports and does to answer."""
    nowhere = "http://127.0.0.1:9"
    argv, env, cwd = (baseline_stdio(baseline, nowhere) if baseline else
                      ([sys.executable, "-m", "colabhive_mcp", "stdio", "--api-url", nowhere, "--log-level", "error"],
                       dict(os.environ), None))
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        peer = StdioPeer(argv, env={**env, "COLABHIVE_API_KEY": DEMO_KEY}, cwd=cwd)
        peer.initialize()
        samples.append(time.perf_counter() - started)
        peer.close()
    return percentiles(samples)


def new_key(sandbox: Upstream) -> str:
    """A key the gateway accepts and no server has seen."""
    key = f"hive_bench_new_{os.urandom(6).hex()}"
    requests.post(sandbox.root_url + "/_sandbox/keys", json={"key": key}, timeout=10).raise_for_status()
    return key


NEXT_LISTS = 6  # the same key's lists after its first, each on a new connection: some reach the other worker
PAST_TTL_S = 3600.0  # how long ago the gateway confirmed a saved manifest that must be asked about first


def legacy_request(url: str, key: str, method: str, request_id: int | None, session_id: str | None = None,
                   params: dict[str, Any] | None = None) -> requests.Response:
    """One 2025-11-25 request (a notification when ``request_id`` is None) to an HTTP server, with its
    session id once it has one, on a connection of its own, as a host's first contact is (behind a
    balancer, or with a worker per connection, consecutive requests seldom share one)."""
    body: dict[str, Any] = {"jsonrpc": "2.0", "method": method, **({"params": params} if params else {}),
                            **({"id": request_id} if request_id is not None else {})}
    headers = {"Authorization": f"Bearer {key}", "Accept": "application/json, text/event-stream",
               "Connection": "close"}
    if session_id:
        headers.update({"Mcp-Session-Id": session_id, "MCP-Protocol-Version": "2025-11-25"})
    response = requests.post(url, json=body, headers=headers, timeout=60)
    response.raise_for_status()
    return response


def first_list(url: str, key: str) -> tuple[int, str | None]:
    """``initialize``, ``notifications/initialized`` and the first ``tools/list``, each on a new
    connection: how many tools it lists, and the session they share."""
    hello = legacy_request(url, key, "initialize", 0, params={
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}})
    session_id = hello.headers.get("Mcp-Session-Id")
    legacy_request(url, key, "notifications/initialized", None, session_id)
    return listed(url, key, session_id), session_id


def listed(url: str, key: str, session_id: str | None) -> int:
    """One ``tools/list`` on a new connection: how many tools it lists."""
    answer = rpc_messages(legacy_request(url, key, "tools/list", 1, session_id))[-1]
    return len(answer["result"]["tools"])


def warm_without_key(url: str) -> None:
    """What any request does first (imports, connections): keyless requests, each answered 401, on a
    few connections (some reach each worker)."""
    for _ in range(8):
        response = requests.post(url, json={"jsonrpc": "2.0", "id": 0, "method": "ping"}, timeout=30,
                                 headers={"Accept": "application/json, text/event-stream", "Connection": "close"})
        assert response.status_code == 401, response.status_code


def new_tenant_trial(sandbox: Upstream, baseline: str | None = None) -> dict[str, Any]:
    """A new tenant's ``initialize`` → ``initialized`` → first ``tools/list`` answer in a fresh server
    process at its defaults (this package's, with its default workers, or the ``baseline`` Python's)
    warmed with keyless requests, each request on a new connection: the wall time and the server's CPU
    for it; then the slowest of the key's next :data:`NEXT_LISTS` lists (the other worker's first, where
    it has one to make)."""
    server: Served = BaselineServer(baseline, sandbox.root_url, free_port()) if baseline else HttpServer(sandbox.url, tuned=False)
    try:
        warm_without_key(server.url)
        key = new_key(sandbox)
        time.sleep(0.5)  # the server settles: its CPU counted below is this tenant's
        before, started = cpu_seconds(server.process.pid), time.perf_counter()
        tools, session_id = first_list(server.url, key)
        took, cpu = time.perf_counter() - started, cpu_seconds(server.process.pid) - before
        return {"s": took, "cpu_s": cpu, "tools": tools, "next_s": max(
            timed(lambda: listed(server.url, key, session_id), NEXT_LISTS))}
    finally:
        server.stop()


def stdio_list_trial(sandbox: Upstream, baseline: str | None = None, cache_home: str | None = None) -> dict[str, Any]:
    """Spawn → the first ``tools/list`` answer of a stdio server (this package's, or the ``baseline``
    Python's) on the gateway with the 1 MB manifest, as a host does: ``initialize``, then the list.
    ``cache_home``: where this package finds the manifest an earlier start saved (by default, a new
    directory: nothing saved, as at the very first start)."""
    argv, env, cwd = (baseline_stdio(baseline, sandbox.root_url) if baseline else
                      ([sys.executable, "-m", "colabhive_mcp", "stdio", "--api-url", sandbox.url, "--log-level",
                        "error"], dict(os.environ), None))
    env["XDG_CACHE_HOME"] = cache_home or new_cache_home()
    started = time.perf_counter()
    peer = StdioPeer(argv, env={**env, "COLABHIVE_API_KEY": DEMO_KEY}, cwd=cwd)
    try:
        peer.initialize()
        tools = len(peer.request("tools/list")["result"]["tools"])
        return {"s": time.perf_counter() - started, "tools": tools}
    finally:
        peer.close()


def new_cache_home() -> str:
    """An empty ``XDG_CACHE_HOME`` for a stdio server, in the run's own (see :func:`main`)."""
    return tempfile.mkdtemp(dir=os.environ["XDG_CACHE_HOME"])


def saved_manifest(sandbox: Upstream) -> str:
    """A cache directory holding the manifest a stdio server saved (it started once, and listed its tools)."""
    cache_home = new_cache_home()
    stdio_list_trial(sandbox, cache_home=cache_home)
    return cache_home


def saved_list_trial(cache_home: str, age: float = 0.0) -> Callable[..., dict[str, Any]]:
    """:func:`stdio_list_trial` of a later start: the manifest saved in ``cache_home`` by an earlier one,
    which the gateway last confirmed ``age`` seconds before (within the TTL, its list answers the first
    ``tools/list``; past it, the gateway is asked about it first)."""
    def trial(sandbox: Upstream, baseline: str | None = None) -> dict[str, Any]:
        for path in Path(cache_home, "colabhive-mcp").iterdir():
            os.utime(path, (time.time() - age,) * 2)
        return stdio_list_trial(sandbox, baseline, cache_home)

    return trial


def cold_runs(trial: Callable[..., dict[str, Any]], sandbox: Upstream, trials: int,
              baseline: str | None) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """``trials`` trials of a cold path for this package and, alternating with them, for the
    ``baseline`` Python's release (so that both see the same machine): each side's figures."""
    ours: list[dict[str, Any]] = []
    theirs: list[dict[str, Any]] = []
    for _ in range(trials):
        ours.append(trial(sandbox))
        if baseline:
            theirs.append(trial(sandbox, baseline))
    if not baseline:
        return summary(ours), None
    ratios = [round(a["s"] / b["s"], 2) for a, b in zip(ours, theirs)]  # each trial over the one beside it
    return {**summary(ours), "ratio": statistics.median(ratios), "ratio_runs": ratios}, summary(theirs)


def summary(trials: list[dict[str, Any]]) -> dict[str, Any]:
    figures = {**percentiles([t["s"] for t in trials]), "runs_ms": [round(t["s"] * 1000, 1) for t in trials],
               "tools": trials[-1]["tools"]}
    if "cpu_s" in trials[0]:
        figures["server_cpu_ms"] = round(statistics.median(t["cpu_s"] for t in trials) * 1000, 1)
    if "next_s" in trials[0]:  # the slowest of the key's next lists, in each trial
        figures["next"] = {**percentiles([t["next_s"] for t in trials]),
                           "runs_ms": [round(t["next_s"] * 1000, 1) for t in trials]}
    return figures


def installed_bytecode() -> None:
    """Compile the package's bytecode, as installing a wheel does (0.3.4's was, when pip installed it):
    a checkout run with PYTHONDONTWRITEBYTECODE would compile every module at every start."""
    compileall.compile_dir(str(ROOT / "colabhive_mcp"), quiet=1)


def median_run(runs: list[dict[str, Any]], figure: str) -> dict[str, Any]:
    """The run whose ``figure`` is the median, with every run's ``figure`` beside it."""
    value = (lambda run: run[figure]) if figure in runs[0] else (lambda run: run["server"][figure])
    chosen = dict(sorted(runs, key=value)[len(runs) // 2])
    chosen[f"{figure}_runs"] = [value(run) for run in runs]
    return chosen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts: checks the suite still works")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    parser.add_argument("--repeat", type=int, default=None, metavar="N",
                        help="runs of each comparison with the direct call (default 3, 1 with --quick)")
    parser.add_argument("--only", metavar="NAMES", help="comma-separated figures to measure (default: all)")
    parser.add_argument("--table", metavar="FILE", help="print the performance table (docs/performance.rst) from a results file, and stop")
    parser.add_argument("--compare", metavar="OLD", help="then print each headline figure beside the one in OLD")
    parser.add_argument("--manifest", choices=("big", "rich"), default="big",
                        help="the 1 MB manifest the gateway publishes: 300 plain actions (big), or 300 shaped like "
                        "real ones, with $defs/$ref, anyOf, formats, patterns and output schemas (rich)")
    parser.add_argument("--baseline", metavar="PYTHON", help="also measure the colabhive-mcp release this Python has "
                        "installed (stdio start-up, HTTP added latency and throughput), in the same run")
    args = parser.parse_args()
    if args.table:
        print(render_table(json.loads(Path(args.table).read_text()), args.table))
        return 0
    logs.configure("error")
    installed_bytecode()
    with tempfile.TemporaryDirectory(prefix="colabhive-bench-") as caches:
        os.environ["XDG_CACHE_HOME"] = caches  # what the stdio servers started save: the run's, and gone after it
        return measure(args, parser)


def measure(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Measure what ``args`` asks for, print the table, and write and compare the JSON it asks for."""
    mode = "quick" if args.quick else "full"
    n, repeat = (20, args.repeat or 1) if args.quick else (400, args.repeat or 3)
    cold_trials = 2 if args.quick else 11
    results: dict[str, Any] = {"run": run_facts(mode, repeat)}
    cold_baseline: dict[str, Any] = {}  # the older release's figures of the cold paths, measured alternately

    def cold(name: str, trial: Callable[..., dict[str, Any]], gateway: Upstream) -> dict[str, Any]:
        ours, theirs = cold_runs(trial, gateway, cold_trials, args.baseline)
        if theirs is not None:
            cold_baseline[name] = theirs
        return ours

    with Sandbox(page_size=100, cold_start_s=2) as sandbox:
        (add_rich_manifest if args.manifest == "rich" else add_big_manifest)(sandbox)
        results["run"]["manifest"] = args.manifest
        stub = StubGateway.of(sandbox.url)  # the same manifest, as one page ready in memory
        server = HttpServer(sandbox.url, tuned=False)  # its default settings
        benches: dict[str, Callable[[], Any]] = {
            "stdio_startup_ms": lambda: bench_stdio_startup(2 if args.quick else 10),
            "overhead_stdio": lambda: median_run([bench_overhead_stdio(sandbox, n) for _ in range(repeat)],
                                                 "added_p50_ms"),
            "tools_list_warm": lambda: bench_tools_list(sandbox, n),
            "hosted_first_list": lambda: cold("hosted_first_list", new_tenant_trial, sandbox),
            "stdio_first_list_fresh": lambda: cold("stdio_first_list_fresh", saved_list_trial(saved_manifest(sandbox)),
                                                   sandbox),
            "stdio_first_list_aged": lambda: cold("stdio_first_list_aged", saved_list_trial(saved_manifest(sandbox),
                                                                                            PAST_TTL_S), sandbox),
            "stdio_first_list_unsaved": lambda: cold("stdio_first_list_unsaved", stdio_list_trial, sandbox),
            "hosted_first_list_stub": lambda: cold("hosted_first_list_stub", new_tenant_trial, stub),
            "stdio_first_list_fresh_stub": lambda: cold("stdio_first_list_fresh_stub",
                                                        saved_list_trial(saved_manifest(stub)), stub),
            "stdio_first_list_aged_stub": lambda: cold("stdio_first_list_aged_stub",
                                                       saved_list_trial(saved_manifest(stub), PAST_TTL_S), stub),
            "stdio_first_list_unsaved_stub": lambda: cold("stdio_first_list_unsaved_stub", stdio_list_trial, stub),
            "cold_tools_list_100_threads": lambda: bench_cold_list(sandbox, 100),
            "churn": lambda: bench_churn(sandbox, 40 if args.quick else 1000, 2, 10 if args.quick else 100),
            "polls_for_job": lambda: bench_polls(sandbox, 5 if args.quick else 60),
            "tenancy": lambda: bench_tenancy(sandbox, 8 if args.quick else 64),
            "distinct_manifests": lambda: bench_distinct_manifests(10 if args.quick else 100),
            "overhead_http": lambda: median_run([bench_overhead_http(sandbox, server, n) for _ in range(repeat)],
                                                "added_p50_ms"),
            "throughput_8_clients": lambda: throughput_runs(sandbox, server, repeat, args.quick),
            "long_polls": lambda: bench_long_polls(sandbox, server, 20 if args.quick else 500, 2 if args.quick else 10),
        }
        chosen = args.only.split(",") if args.only else list(benches)
        unknown = set(chosen) - set(benches)
        if unknown:
            parser.error(f"unknown figures {sorted(unknown)}; choose from {', '.join(benches)}")
        try:
            for name in chosen:
                results[name] = benches[name]()
        finally:
            server.stop()
            stub.stop()
        if "throughput_8_clients" in chosen:
            results["floor"] = measure_floor(sandbox, repeat, args.quick)
        if args.baseline:
            results["baseline"] = measure_baseline(args.baseline, sandbox, chosen, n, repeat, args.quick)
            results["baseline"].update(cold_baseline)
    print_table(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    if args.compare:
        print(render_comparison(json.loads(Path(args.compare).read_text()), results))
    return 0


def measure_baseline(python: str, sandbox: Sandbox, chosen: list[str], n: int, repeat: int,
                     quick: bool) -> dict[str, Any]:
    """The figures an older release has too, measured the same way against the same gateway."""
    measured: dict[str, Any] = {"version": version(python)}
    if "stdio_startup_ms" in chosen:
        measured["stdio_startup_ms"] = bench_stdio_startup(2 if quick else 10, python)
    server = BaselineServer(python, sandbox.root_url, free_port())
    try:
        if "overhead_http" in chosen:
            measured["overhead_http"] = median_run([bench_overhead_http(sandbox, server, n) for _ in range(repeat)],
                                                   "added_p50_ms")
        if "throughput_8_clients" in chosen:
            measured["throughput_8_clients"] = throughput_runs(sandbox, server, repeat, quick)
    finally:
        server.stop()
    return measured


def measure_floor(sandbox: Sandbox, repeat: int, quick: bool) -> dict[str, Any]:
    """The throughput of the stack's floor (``floor_app.py``): what the server's CPU per call is above."""
    server = FloorServer(sandbox.url, free_port())
    try:
        return {"throughput_8_clients": throughput_runs(sandbox, server, repeat, quick)}
    finally:
        server.stop()


def print_table(results: dict[str, Any]) -> None:
    for name, value in results.items():
        print(f"{name:<30} {json.dumps(value)}")


def run_facts(mode: str, repeat: int) -> dict[str, Any]:
    """What a results file must say about how its figures were made (the servers: their defaults)."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    defaults = Config()
    return {"date": datetime.date.today().isoformat(), "commit": commit.stdout.strip() or None, "mode": mode,
            "repeat": repeat, "cpus": os.cpu_count(), "python": platform.python_version(),
            "http_server": {"workers": defaults.http_workers, "threads": defaults.http_threads, "environment": {}}}


if __name__ == "__main__":
    raise SystemExit(main())
