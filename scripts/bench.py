"""colabhive-mcp benchmarks: the wrapper's own cost against the gateway call it wraps.

    python scripts/bench.py              # the full run (a few minutes on 2 cores)
    python scripts/bench.py --quick      # a smoke run (what the tests run): small counts
    python scripts/bench.py --json out.json

Starts the sandbox gateway (with a 300-tool, ~1 MB manifest) and the servers itself, measures,
and prints a table and JSON. Figures, not tests: they depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from colabhive_mcp import jsonrpc, logs  # noqa: E402
from colabhive_mcp.config import Config  # noqa: E402
from colabhive_mcp.demo import StdioPeer  # noqa: E402
from colabhive_mcp.protocol import Server, Session  # noqa: E402
from colabhive_mcp.sandbox import DEMO_KEY, Sandbox  # noqa: E402
from colabhive_mcp.tenant import Tenant  # noqa: E402
from tests.http_server import HttpServer  # noqa: E402

BIG_TOOLS = 300
NO_LIMITS = {"COLABHIVE_TENANT_MAX_CONCURRENT": "0", "COLABHIVE_TENANT_CALLS_PER_MINUTE": "0"}  # one key drives it all
MODERN_META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
               "io.modelcontextprotocol/clientCapabilities": {}}


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


def add_big_manifest(sandbox: Sandbox) -> None:
    """300 actions of ~3 KB each: a manifest of about 1 MB, as the contract says is normal."""
    for i in range(BIG_TOOLS):
        properties = {f"field_{j}": {"type": "string", "description": f"Parameter {j} of action {i}. " * 4}
                      for j in range(13)}
        sandbox.add_action({"name": f"bench-action-{i:03d}", "displayName": f"Bench action {i}",
                            "description": f"Benchmark action number {i}. " * 20, "kind": "tool",
                            "sideEffects": [], "latencyClass": "fast", "stability": "stable",
                            "inputSchema": {"type": "object", "properties": properties}})


def direct_invoke(session: requests.Session, url: str) -> None:
    response = session.post(url + "/actions/echo:invoke", json={"input": {"text": "x"}, "sync": True,
                                                               "sync_timeout_s": 1}, timeout=30)
    response.raise_for_status()


def bench_overhead_stdio(sandbox: Sandbox, count: int) -> dict[str, Any]:
    direct = requests.Session()
    direct.headers["X-API-Key"] = DEMO_KEY
    peer = StdioPeer([sys.executable, "-m", "colabhive_mcp", "stdio", "--api-url", sandbox.url,
                      "--log-level", "error"], env={**os.environ, **NO_LIMITS, "COLABHIVE_API_KEY": DEMO_KEY})
    try:
        peer.initialize()
        call = {"name": "echo", "arguments": {"text": "x"}}
        peer.request("tools/call", call)  # warm: manifest, connection
        direct_invoke(direct, sandbox.url)
        through, straight = [], []
        for _ in range(count):  # interleaved, so both see the same machine
            through += timed(lambda: peer.request("tools/call", call), 1)
            straight += timed(lambda: direct_invoke(direct, sandbox.url), 1)
    finally:
        peer.close()
    return compare(through, straight)


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


def bench_overhead_http(sandbox: Sandbox, server: HttpServer, count: int) -> dict[str, Any]:
    through_session, direct = requests.Session(), requests.Session()
    direct.headers["X-API-Key"] = DEMO_KEY
    modern_call(through_session, server.url)
    direct_invoke(direct, sandbox.url)
    through, straight = [], []
    for _ in range(count):
        through += timed(lambda: modern_call(through_session, server.url), 1)
        straight += timed(lambda: direct_invoke(direct, sandbox.url), 1)
    return compare(through, straight)


def bench_tools_list(sandbox: Sandbox, count: int) -> dict[str, Any]:
    config = Config(api_url=sandbox.url, api_key=DEMO_KEY, log_level="error", tenant_calls_per_minute=0)
    server, tenant = Server(config), Tenant(config, DEMO_KEY)
    session = Session(id="bench")
    server.handle({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}},
        tenant=tenant, session=session)
    request = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    answer = server.handle(request, tenant=tenant, session=session)  # warm
    size = len(jsonrpc.encode(answer))

    def listing() -> None:  # what a transport does: handle, then encode
        jsonrpc.encode(server.handle(request, tenant=tenant, session=session))

    result = percentiles(timed(listing, count))
    return {"tools": len(answer["result"]["tools"]), "bytes": size, "server_ms": result}


def bench_throughput(sandbox: Sandbox, server: HttpServer, clients: int, seconds: float) -> dict[str, Any]:
    def drive(call: Callable[[requests.Session], None]) -> dict[str, Any]:
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
        return {"calls_per_s": round(len(latencies) / seconds, 1), "errors": errors, **percentiles(latencies)}

    through = drive(lambda s: modern_call(s, server.url))
    straight = drive(lambda s: direct_invoke(s, sandbox.url))
    return {"server": through, "direct": straight,
            "ratio": round(through["calls_per_s"] / max(straight["calls_per_s"], 0.1), 2)}


def process_stats(pid: int) -> tuple[int, float]:
    """Threads and RSS (MB) of a process and its children, from /proc."""
    pids = [pid] + [int(p) for p in subprocess.run(["pgrep", "-P", str(pid)], capture_output=True,
                                                       text=True).stdout.split()]
    threads, rss = 0, 0.0
    for p in pids:
        for line in Path(f"/proc/{p}/status").read_text().splitlines():
            if line.startswith("Threads:"):
                threads += int(line.split()[1])
            elif line.startswith("VmRSS:"):
                rss += int(line.split()[1]) / 1024
    return threads, round(rss, 1)


def bench_long_polls(server: HttpServer, calls: int, seconds: float) -> dict[str, Any]:
    peak = [0, 0.0]
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.5):
            threads, rss = process_stats(server.process.pid)
            peak[0], peak[1] = max(peak[0], threads), max(peak[1], rss)

    def one() -> bool:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "batch-report", "arguments": {"seconds": seconds}, "_meta": MODERN_META}}
        response = requests.post(server.url, json=body, timeout=seconds * 10, headers={
            "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "batch-report",
            "Accept": "application/json", "Authorization": f"Bearer {DEMO_KEY}"})
        return response.ok and "report ready" in response.text

    threading.Thread(target=watch, daemon=True).start()
    started = time.monotonic()
    with ThreadPoolExecutor(calls) as pool:
        results = list(pool.map(lambda _: one(), range(calls)))
    done.set()
    return {"calls": calls, "succeeded": sum(results), "errors": calls - sum(results),
            "wall_s": round(time.monotonic() - started, 1), "peak_threads": peak[0], "peak_rss_mb": peak[1]}


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
    Tenant(config, DEMO_KEY).call_tool("batch-report", {"seconds": seconds}, version="2025-11-25",
                                       cancelled=threading.Event())
    return {"job_s": seconds, "polls": len([e for e in sandbox.journal_entries() if e["route"] == "poll"]) - before}


def bench_tenancy(sandbox: Sandbox, tenants: int) -> dict[str, Any]:
    """RSS of a process holding ``tenants`` tenants, each with the 1 MB manifest (a snapshot)."""
    snapshot = Path("/tmp/colabhive-bench-manifest.json")
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
        "from colabhive_mcp.config import Config\nfrom colabhive_mcp.tenant import Tenant\n"
        "def rss():\n    return int(open('/proc/self/status').read().split('VmRSS:')[1].split()[0]) / 1024\n"
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


def bench_stdio_startup(runs: int) -> dict[str, Any]:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        peer = StdioPeer([sys.executable, "-m", "colabhive_mcp", "stdio", "--api-url", "http://127.0.0.1:9",
                          "--log-level", "error"], env={**os.environ, "COLABHIVE_API_KEY": "hive_bench_startup"})
        peer.initialize()
        samples.append(time.perf_counter() - started)
        peer.close()
    return percentiles(samples)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts: checks the suite still works")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args()
    logs.configure("error")
    n = 20 if args.quick else 400
    results: dict[str, Any] = {}
    with Sandbox(page_size=100, cold_start_s=2) as sandbox:
        add_big_manifest(sandbox)
        results["stdio_startup_ms"] = bench_stdio_startup(2 if args.quick else 10)
        results["overhead_stdio"] = bench_overhead_stdio(sandbox, n)
        results["tools_list_warm"] = bench_tools_list(sandbox, n)
        results["cold_tools_list_100_threads"] = bench_cold_list(sandbox, 100)
        results["polls_for_job"] = bench_polls(sandbox, 5 if args.quick else 60)
        results["tenancy"] = bench_tenancy(sandbox, 8 if args.quick else 64)
        server = HttpServer(sandbox.url, "--http-workers", "2", "--http-threads", "64" if args.quick else "600",
                            "--log-level", "error", env=NO_LIMITS)
        try:
            results["overhead_http"] = bench_overhead_http(sandbox, server, n)
            results["throughput_8_clients"] = bench_throughput(sandbox, server, 8, 2 if args.quick else 15)
            results["long_polls"] = bench_long_polls(server, 20 if args.quick else 500, 2 if args.quick else 10)
        finally:
            server.stop()
    print_table(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


def print_table(results: dict[str, Any]) -> None:
    for name, value in results.items():
        print(f"{name:<30} {json.dumps(value)}")


if __name__ == "__main__":
    raise SystemExit(main())
