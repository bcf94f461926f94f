"""Long-call capacity at default settings: 1,000 concurrent 15 s calls over 100 keys on one instance.

    python scripts/capacity.py                                    # the figure docs/operations.rst quotes
    python scripts/capacity.py --calls 2000 --keys 200 --addresses 200   # twice that, each key from its own address
    python scripts/capacity.py --calls 200 --keys 20 --seconds 5  # a smaller run
    python scripts/capacity.py --json capacity.json

Starts the sandbox gateway in a process of its own and one ``colabhive-mcp serve`` instance with its
default settings, lets the sandbox accept ``--keys`` keys, then starts every call at once: a 2026
``tools/call`` of a job that takes ``--seconds``, the calls spread evenly over the keys, each on a
connection of its own, from one loopback address (``--addresses N``: the keys spread over N, as
keys of different users come from different clients, which the new-key budgets per client address
then tell apart). Meanwhile ``/healthz`` is probed every second, from a process of its own. It
reports how many calls succeeded and how long they took, what was refused, the probes' latency, the
upstream polls per call, and the instance's peak threads and RSS (its process tree, from /proc).
Beside each call's time as its client saw it (``ok_s``) it reports the server's own (``server_s``,
from its ``mcp.tool.invoked`` log lines: from the call's start, its tenant ready, to its result):
on a small machine the load generator and the sandbox gateway, one process each and so one core
each at most, delay the calls too. ``server_started_s`` says how long after the first call the
others began there (the load generator sends them one after another). Exit status 1 unless every
call succeeded within ``--seconds`` + 10 s (as its client saw it), every probe answered within 1 s
and the RSS stayed under 1 GB.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import ROOT, process_stats  # noqa: E402
from bench_sandbox import Sandbox  # noqa: E402
from tests.support.http_server import HttpServer, client, log_events  # noqa: E402

MODERN = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
JOB = {"name": "capacity-job", "description": "Sleeps, then answers.", "kind": "tool", "latencyClass": "medium",
       "sideEffects": [], "stability": "stable", "inputSchema": {"type": "object"}}


def prepare(sandbox: Sandbox, keys: list[str], seconds: float) -> None:
    for key in keys:
        requests.post(sandbox.root_url + "/_sandbox/keys", json={"key": key}, timeout=10).raise_for_status()
    requests.post(sandbox.root_url + "/_sandbox/actions", timeout=10, json={
        "entry": JOB, "result": {"text": "done"}, "seconds": seconds}).raise_for_status()


def call(url: str, key: str, address: str) -> tuple[str, float]:
    """One call on a connection of its own, from ``address``: its outcome and how long it took."""
    started = time.monotonic()
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "capacity-job", "arguments": {}, "_meta": MODERN}}
    try:
        response = client(address).post(url, json=body, timeout=300, headers={
            "Authorization": f"Bearer {key}", "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "capacity-job"})
    except requests.RequestException as exc:
        return type(exc).__name__, time.monotonic() - started
    took = time.monotonic() - started
    if response.status_code != 200:
        return f"HTTP {response.status_code}: {response.text[:160]}", took
    answer = response.json()
    if "error" in answer:
        return f"JSON-RPC {answer['error'].get('code')}", took
    result = answer["result"]
    if result.get("isError") or result.get("content", [{}])[0].get("text") != "done":
        return "not done: " + json.dumps(result)[:120], took
    return "ok", took


PROBE = """
import sys, time, urllib.request
while True:
    time.sleep(1.0)
    started = time.monotonic()
    try:
        ok = urllib.request.urlopen(sys.argv[1], timeout=5).status == 200
    except Exception:
        ok = False
    print(int(ok), time.monotonic() - started, flush=True)
"""


class Watch:
    """Probes /healthz every second from a process of its own, as a load balancer would (a probe
    among this script's 2,000 threads would wait for their interpreter lock), and samples the
    instance's threads and RSS."""

    def __init__(self, server: HttpServer) -> None:
        self.server, self.probes, self.peak_threads, self.peak_rss = server, [], 0, 0.0
        self.prober = subprocess.Popen([sys.executable, "-c", PROBE, server.root + "/healthz"],
                                       stdout=subprocess.PIPE, text=True)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.stop.wait(1.0):
            threads, rss = process_stats(self.server.process.pid)
            self.peak_threads, self.peak_rss = max(self.peak_threads, threads), max(self.peak_rss, rss)

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.prober.terminate()
        answers = self.prober.communicate(timeout=10)[0].split()
        self.probes = [(ok == "1", float(took)) for ok, took in zip(answers[::2], answers[1::2])]


def run(calls: int, keys: int, seconds: float, addresses: int = 1) -> dict:
    api_keys = [f"hive_capacity_{i:04d}" for i in range(keys)]
    with Sandbox(page_size=100, cold_start_s=2, threads=calls + 100) as sandbox:  # the gateway is not the limit
        prepare(sandbox, api_keys, seconds)
        server = HttpServer(sandbox.url, tuned=False)
        try:
            idle_threads, idle_rss = process_stats(server.process.pid)
            watch = Watch(server)
            outcomes: list[tuple[str, float]] = []
            lock = threading.Lock()

            go = threading.Event()

            def one(index: int) -> None:
                key = index % keys
                go.wait()
                outcome = call(server.url, api_keys[key], f"127.0.{key % addresses // 250}.{key % addresses % 250 + 1}")
                with lock:
                    outcomes.append(outcome)

            threads = [threading.Thread(target=one, args=(i,)) for i in range(calls)]
            try:
                for thread in threads:  # each waits for the others: started one by one among busy callers,
                    thread.start()      # the last would start seconds after the first
            finally:
                started = time.monotonic()
                go.set()  # also when a thread could not start: those started must not wait forever
            for thread in threads:
                thread.join()
            wall = time.monotonic() - started
            watch.close()
            polls = Counter(e["route"] for e in sandbox.journal_entries())["poll"]
        finally:
            server.stop()
    took = sorted(t for outcome, t in outcomes if outcome == "ok")
    events = log_events("\n".join(server.lines), "mcp.tool.invoked")
    served = sorted(e["latency_ms"] / 1000 for e in events)
    starts = call_starts(events)
    probe_times = [t for _, t in watch.probes]
    return {
        "calls": calls, "keys": keys, "addresses": addresses, "job_s": seconds, "wall_s": round(wall, 1),
        "outcomes": dict(Counter(outcome for outcome, _ in outcomes)),
        "ok_s": {"p50": round(statistics.median(took), 2), "max": round(took[-1], 2)} if took else None,
        "server_s": {"p50": round(statistics.median(served), 2), "max": round(served[-1], 2)} if served else None,
        "server_started_s": {"p50": round(statistics.median(starts), 2), "max": round(starts[-1], 2)} if starts else None,
        "probes": {"count": len(probe_times), "failed": sum(1 for ok, _ in watch.probes if not ok),
                   "max_s": round(max(probe_times), 3) if probe_times else None},
        "polls_per_call": round(polls / max(calls, 1), 1),
        "idle": {"threads": idle_threads, "rss_mb": idle_rss},
        "peak": {"threads": watch.peak_threads, "rss_mb": watch.peak_rss},
    }


def call_starts(events: list[dict]) -> list[float]:
    """When each call's ``server_s`` began, its key's tenant ready (its log record's time less its latency),
    in seconds after the first one's: how long the calls took to reach the server and be admitted, which
    ``ok_s`` counts and ``server_s`` does not (one load generator sends them all on one interpreter lock)."""
    starts = sorted(datetime.datetime.fromisoformat(e["ts"]).timestamp() - e["latency_ms"] / 1000 for e in events)
    return [round(start - starts[0], 3) for start in starts]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--keys", type=int, default=100)
    parser.add_argument("--addresses", type=int, default=1, help="loopback addresses the keys' calls come from")
    parser.add_argument("--seconds", type=float, default=15.0, help="how long each job takes")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args()
    os.chdir(ROOT)
    results = run(args.calls, args.keys, args.seconds, args.addresses)
    print(json.dumps(results, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    passed = (results["outcomes"] == {"ok": args.calls} and results["ok_s"]["max"] <= args.seconds + 10
              and results["probes"]["failed"] == 0 and (results["probes"]["max_s"] or 0) <= 1.0
              and results["peak"]["rss_mb"] < 1000)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
