"""colabhive-mcp load and soak: many keys, both protocol eras, a mix of calls, for a while.

    python scripts/soak.py                    # 8 clients, 60 s, 24 keys, a pool of 8 per worker
    python scripts/soak.py --clients 32 --seconds 600 --keys 100 --pool-size 16
    python scripts/soak.py --json soak.json

Starts the sandbox gateway and ``colabhive-mcp serve`` (gunicorn) itself. Every key is registered
in the sandbox with a private action whose result names the key; with fewer pool slots than keys,
tenants are evicted all the time. ``--clients`` threads then call for ``--seconds`` with random
keys in both protocol eras (legacy sessions and stateless 2026-07-28): fast (echo), private (the
key's own action), list (tools/list), slow (a batch job with SSE progress), failing (must come back
as an ``isError`` result: expected, not an error), cancelled (a legacy call cancelled with
``notifications/cancelled`` mid-flight: its stream must end unanswered) and hangup (a 2026 call
whose client closes the connection mid-flight). Every answer is checked: its id, its content, and
that nothing in it names another key (a cross-tenant answer).

The server's RSS and threads (master + workers, from /proc) are sampled every second. gthread
thread pools grow on demand and never shrink, so a burst of concurrent calls first fills them: the
idle thread count after it is the baseline the server must come back to once the load ends. At
the end the gateway's journal is audited: every invocation must have finished or been cancelled.

Exit status 1 on an unexpected error, a cross-tenant answer, an invocation left running, leaked
threads or a restarted worker.
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import os
import random
import re
import secrets
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlsplit

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

from bench import MODERN_META, family, percentiles, process_stats  # noqa: E402
from colabhive_mcp.sandbox import Sandbox  # noqa: E402
from colabhive_mcp.sandbox.contract import fingerprint  # noqa: E402
from tests.support.http_server import HttpServer, rpc_messages  # noqa: E402

MODERN = "2026-07-28"
LEGACY_VERSIONS = ("2025-03-26", "2025-06-18", "2025-11-25")
ERAS = ("legacy", "modern")
ACCEPT_BOTH = "application/json, text/event-stream"
KINDS = {"fast": 35, "private": 10, "list": 5, "slow": 20, "failing": 15, "cancelled": 10, "hangup": 5}  # odds
ERA_OF = {"cancelled": "legacy", "hangup": "modern"}  # the others: either, at random
FAILING = (("flaky-translate", {"text": "bonjour"}), ("batch-report", {"seconds": 1, "fail": True}))
TAG = re.compile(r"soak-k\d{4}")  # how answers name a key
CANCEL_JOB_S = 60  # long enough that only a cancellation ends it within a run
CANCEL_DEADLINE_S = 10  # a cancelled call's stream must end this soon after the cancellation
NEW_SESSION_ODDS = 0.1  # how often a legacy call starts a fresh session
HTTP_TIMEOUT = (5, 60)
FILL_JOB_S = 1.0  # each call of the pool-filling burst holds a server thread this long
POLL_SLACK_S = 1.0  # a poll that started this close to a job's end may have seen it finish


class Unexpected(Exception):
    """An answer the server should not have given."""


class CrossTenant(Unexpected):
    """An answer that names another key."""


@dataclass(frozen=True)
class Key:
    """One tenant of the run: its API key and the tag its private action answers with."""

    api_key: str
    tag: str

    @property
    def tool(self) -> str:
        return f"whoami-{self.tag}"


@dataclass
class Outcome:
    """How one call went; ``problem`` is None when the answer was the expected one."""

    kind: str
    era: str
    seconds: float
    problem: str | None = None
    cross_tenant: bool = False


def make_keys(count: int) -> list[Key]:
    run = secrets.token_hex(4)
    return [Key(f"hive_soak_{run}_{i:04d}", f"soak-k{i:04d}") for i in range(count)]


def register(sandbox: Sandbox, keys: list[Key]) -> None:
    """Accept every key, each with a private action that answers with the key's tag."""
    for key in keys:
        sandbox.add_key(key.api_key)
        entry = {"name": key.tool, "displayName": f"Who am I ({key.tag})", "description": "Names the calling key.",
                 "kind": "tool", "inputSchema": {"type": "object", "properties": {}}, "sideEffects": [],
                 "stability": "stable", "latencyClass": "fast"}
        sandbox.add_action(entry, keys=[key.api_key], result={"text": f"tenant {key.tag}"})


# -- reading and checking answers ---------------------------------------------------------------

def stream_messages(response: requests.Response) -> Iterator[dict[str, Any] | None]:
    """The messages of an SSE body as they arrive; None for every other line (keep-alives too)."""
    for line in response.iter_lines(chunk_size=None, decode_unicode=True):
        yield json.loads(line[6:]) if line.startswith("data: ") and line[6:] else None


def check_tenant(message: dict[str, Any], key: Key) -> None:
    others = set(TAG.findall(json.dumps(message))) - {key.tag}
    if others:
        raise CrossTenant(f"a message to {key.tag} names {sorted(others)}: {json.dumps(message)[:300]}")


def check_answer(messages: list[dict[str, Any]], request_id: Any, key: Key) -> dict[str, Any]:
    """The result of the one answer among ``messages``, which must be for ``request_id``."""
    for message in messages:
        check_tenant(message, key)
    answers = [m for m in messages if "method" not in m]
    if len(answers) != 1:
        raise Unexpected(f"{len(answers)} answers to request {request_id!r}")
    answer = answers[0]
    if answer.get("id") != request_id:
        raise Unexpected(f"the answer to request {request_id!r} has id {answer.get('id')!r}")
    if "error" in answer:
        raise Unexpected(f"JSON-RPC error {json.dumps(answer['error'])[:300]}")
    return answer["result"]


def expect_text(result: dict[str, Any], text: str) -> None:
    got = (result.get("content") or [{}])[0].get("text")
    if got != text or result.get("isError"):
        raise Unexpected(f"expected {text!r}, got {json.dumps(result)[:300]}")


def await_progress(stream: Iterator[dict[str, Any] | None], count: int, request_id: Any) -> None:
    """Read ``stream`` until ``count`` progress notifications have come."""
    seen = 0
    for message in stream:
        if message and message.get("id") == request_id:
            raise Unexpected("the call ended before it could be cancelled")
        if message and message.get("method") == "notifications/progress":
            seen += 1
            if seen >= count:
                return
    raise Unexpected("the stream ended before the call made progress")


def read_until_closed(stream: Iterator[dict[str, Any] | None], deadline: float) -> list[dict[str, Any]]:
    """The rest of ``stream``; it must end before ``deadline`` (perf_counter)."""
    messages = []
    for message in stream:
        if message is not None:
            messages.append(message)
        if time.perf_counter() > deadline:
            raise Unexpected(f"the stream was still open {CANCEL_DEADLINE_S} s after the cancellation")
    return messages


# -- one simulated client -------------------------------------------------------------------------

class Client:
    """One MCP client: its own connections, legacy sessions and request ids."""

    def __init__(self, url: str, keys: list[Key], rng: random.Random, slow_s: float) -> None:
        self.url, self.keys, self.rng, self.slow_s = url, keys, rng, slow_s
        self.http = requests.Session()
        self.side = requests.Session()  # cancellations, while ``http`` reads a stream
        self.sessions: dict[str, tuple[str, str]] = {}  # API key -> (session id, version)
        self.ids = itertools.count(1)

    def run(self, until: float, first: int, outcomes: list[Outcome]) -> None:
        """Call until ``until`` (monotonic): every kind once, starting at kind ``first``, then at random."""
        names = list(KINDS)
        opening = names[first % len(names):] + names[:first % len(names)]
        randomly = iter(lambda: self.rng.choices(names, list(KINDS.values()))[0], None)
        try:
            for kind in itertools.chain(opening, randomly):
                if time.monotonic() >= until:
                    return
                era = ERA_OF.get(kind) or self.rng.choice(ERAS)
                outcomes.append(self.call(kind, self.rng.choice(self.keys), era))
        finally:
            self.http.close()
            self.side.close()

    def call(self, kind: str, key: Key, era: str) -> Outcome:
        """One call of ``kind``, timed; anything but the expected answer is its problem."""
        outcome = Outcome(kind, era, 0.0)
        started = time.perf_counter()
        measured = None
        try:
            measured = getattr(self, "call_" + kind)(key, era)
        except CrossTenant as exc:
            outcome.problem, outcome.cross_tenant = str(exc), True
        except Exception as exc:  # a malformed answer fails the checks in any way
            outcome.problem = str(exc) if isinstance(exc, Unexpected) else f"{type(exc).__name__}: {exc}"
        outcome.seconds = time.perf_counter() - started if measured is None else measured
        return outcome

    # -- the kinds of call (each returns the latency to record, or None for the whole call) --

    def call_fast(self, key: Key, era: str) -> None:
        text = f"{key.tag}:{secrets.token_hex(4)}"
        expect_text(self.exchange(key, era, "tools/call", {"name": "echo", "arguments": {"text": text}})[0], text)

    def call_private(self, key: Key, era: str) -> None:
        result, _ = self.exchange(key, era, "tools/call", {"name": key.tool, "arguments": {}})
        expect_text(result, f"tenant {key.tag}")

    def call_list(self, key: Key, era: str) -> None:
        names = {tool["name"] for tool in self.exchange(key, era, "tools/list", {})[0]["tools"]}
        if key.tool not in names or "echo" not in names:
            raise Unexpected(f"tools/list for {key.tag} lacks its own tools: {sorted(names)}")

    def call_slow(self, key: Key, era: str) -> None:
        """A job of a few seconds: mostly with a progress token (an SSE answer), else a plain JSON one."""
        params = {"name": "batch-report", "arguments": {"seconds": self.slow_s}}
        streamed = self.rng.random() < 0.75
        result, notes = self.exchange(key, era, "tools/call", params, progress=streamed)
        expect_text(result, f"report ready after {self.slow_s:g} s")
        progress = [n["params"]["progress"] for n in notes if n.get("method") == "notifications/progress"]
        if streamed and (len(progress) < 2 or progress != sorted(progress)):
            raise Unexpected(f"progress of a {self.slow_s:g} s job: {progress}")

    def call_failing(self, key: Key, era: str) -> None:
        name, arguments = self.rng.choice(FAILING)
        result, _ = self.exchange(key, era, "tools/call", {"name": name, "arguments": arguments})
        if result.get("isError") is not True:
            raise Unexpected(f"{name} {arguments} did not come back as isError: {json.dumps(result)[:300]}")

    def call_cancelled(self, key: Key, era: str) -> float:
        """A legacy call cancelled mid-flight; its latency is from the cancellation to the stream's end."""
        params = {"name": "batch-report", "arguments": {"seconds": CANCEL_JOB_S}}
        request_id, body, headers = self.prepare(key, era, "tools/call", params, progress=True)
        with self.http.post(self.url, data=json.dumps(body), headers=headers, stream=True,
                            timeout=HTTP_TIMEOUT) as response:
            if response.status_code != 200 or not response.headers.get("Content-Type", "").startswith(
                    "text/event-stream"):
                raise Unexpected(f"tools/call with a progress token: HTTP {response.status_code}, "
                                 f"{response.headers.get('Content-Type')}")
            stream = stream_messages(response)
            await_progress(stream, 2, request_id)  # the second comes after the invoke
            time.sleep(self.rng.uniform(0, 1))
            sent = time.perf_counter()
            self.cancel(key, headers["Mcp-Session-Id"], request_id)
            rest = read_until_closed(stream, sent + CANCEL_DEADLINE_S)
            closed = time.perf_counter() - sent
        for message in rest:
            check_tenant(message, key)
            if message.get("id") == request_id:
                raise Unexpected(f"a cancelled call was answered: {json.dumps(message)[:300]}")
        return closed

    def call_hangup(self, key: Key, era: str) -> None:
        """A 2026 call whose client hangs up mid-flight, from an SSE or a plain JSON answer: the
        server must cancel the work upstream (the journal audit checks it)."""
        streamed = self.rng.random() < 0.5
        params = {"name": "batch-report", "arguments": {"seconds": CANCEL_JOB_S}}
        request_id, body, headers = self.prepare(key, era, "tools/call", params, progress=streamed)
        headers["Accept"] = ACCEPT_BOTH if streamed else "application/json"
        address = urlsplit(self.url)
        connection = http.client.HTTPConnection(address.hostname, address.port, timeout=HTTP_TIMEOUT[1])
        try:
            connection.request("POST", address.path, body=json.dumps(body), headers=headers)
            if not streamed:
                time.sleep(self.rng.uniform(0.3, 1.5))
                return
            with connection.getresponse() as response:
                if response.status != 200:
                    raise Unexpected(f"tools/call with a progress token: HTTP {response.status}")
                lines = (line.decode() for line in response)
                messages = (json.loads(line[6:]) if line.startswith("data: ") and line[6:].strip() else None
                            for line in lines)
                await_progress(messages, 2, request_id)
        finally:
            connection.close()

    # -- plumbing -------------------------------------------------------------------------------

    def exchange(self, key: Key, era: str, method: str, params: dict[str, Any],
                 progress: bool = False) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """One request: its checked result, and the notifications that came with it."""
        request_id, body, headers = self.prepare(key, era, method, params, progress)
        response = self.http.post(self.url, data=json.dumps(body), headers=headers, timeout=HTTP_TIMEOUT)
        if response.status_code != 200:
            raise Unexpected(f"{method} ({era}): HTTP {response.status_code}: {response.text[:200]}")
        messages = rpc_messages(response)
        return check_answer(messages, request_id, key), [m for m in messages if "method" in m]

    def prepare(self, key: Key, era: str, method: str, params: dict[str, Any],
                progress: bool = False) -> tuple[Any, dict[str, Any], dict[str, str]]:
        """The id, body and headers of a request in ``era`` (a legacy one gets a session)."""
        meta: dict[str, Any] = {}
        headers = self.headers(key)
        if era == "modern":
            request_id: Any = f"m{next(self.ids)}"
            meta.update(MODERN_META)
            headers.update({"MCP-Protocol-Version": MODERN, "Mcp-Method": method})
            if method == "tools/call":
                headers["Mcp-Name"] = params["name"]
        else:
            request_id = next(self.ids)
            session_id, version = self.session(key)
            headers.update({"Mcp-Session-Id": session_id, "MCP-Protocol-Version": version})
        if progress:
            meta["progressToken"] = f"p-{request_id}"
        params = {**params, "_meta": meta} if meta else params
        return request_id, {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}, headers

    def headers(self, key: Key) -> dict[str, str]:
        """Both ways of presenting a key, at random."""
        auth = {"Authorization": f"Bearer {key.api_key}"} if self.rng.random() < 0.5 else {"X-API-Key": key.api_key}
        return {"Accept": ACCEPT_BOTH, "Content-Type": "application/json", **auth}

    def session(self, key: Key) -> tuple[str, str]:
        """This client's legacy session for ``key`` (now and then a fresh one)."""
        known = self.sessions.get(key.api_key)
        if known is None or self.rng.random() < NEW_SESSION_ODDS:
            known = self.sessions[key.api_key] = self.initialize(key)
        return known

    def initialize(self, key: Key) -> tuple[str, str]:
        version = self.rng.choice(LEGACY_VERSIONS)
        body = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "soak", "version": "1"}}}
        response = self.http.post(self.url, data=json.dumps(body), headers=self.headers(key), timeout=HTTP_TIMEOUT)
        session_id = response.headers.get("Mcp-Session-Id")
        if response.status_code != 200 or not session_id:
            raise Unexpected(f"initialize: HTTP {response.status_code}, session {session_id!r}: {response.text[:200]}")
        negotiated = check_answer(rpc_messages(response), 0, key).get("protocolVersion")
        if negotiated != version:
            raise Unexpected(f"initialize asked for {version}, got {negotiated}")
        self.notify(key, session_id, version, "notifications/initialized", {})
        return session_id, version

    def cancel(self, key: Key, session_id: str, request_id: Any) -> None:
        self.notify(key, session_id, self.sessions[key.api_key][1], "notifications/cancelled",
                    {"requestId": request_id, "reason": "soak"})

    def notify(self, key: Key, session_id: str, version: str, method: str, params: dict[str, Any]) -> None:
        headers = {**self.headers(key), "Mcp-Session-Id": session_id, "MCP-Protocol-Version": version}
        body = {"jsonrpc": "2.0", "method": method, "params": params}
        response = self.side.post(self.url, data=json.dumps(body), headers=headers, timeout=HTTP_TIMEOUT)
        if response.status_code != 202:
            raise Unexpected(f"{method}: HTTP {response.status_code}: {response.text[:200]}")


def drive(url: str, keys: list[Key], clients: int, seconds: float, slow_s: float,
          rng: random.Random) -> list[Outcome]:
    """Run ``clients`` clients for ``seconds``; returns once every call in flight has ended."""
    outcomes: list[Outcome] = []
    until = time.monotonic() + seconds
    with ThreadPoolExecutor(clients) as pool:
        runs = [pool.submit(Client(url, keys, random.Random(rng.random()), slow_s).run, until, i, outcomes)
                for i in range(clients)]
    for run in runs:
        run.result()  # a client that crashed is a bug of this script: say so
    return outcomes


# -- the server: its threads, memory and log --------------------------------------------------------

def server_stats(pid: int) -> tuple[int, float]:
    """Threads and RSS (MB) of the master and its workers (bench's reading, retried while a worker
    comes or goes)."""
    for _ in range(5):
        try:
            return process_stats(pid)
        except OSError:
            time.sleep(0.1)
    return process_stats(pid)


def worker_pids(pid: int) -> set[int]:
    return set(family(pid)[1:])


class Sampler:
    """The server's (threads, RSS MB) every ``every`` seconds, on a thread, as (t, threads, rss) rows."""

    def __init__(self, pid: int, every: float = 1.0) -> None:
        self.pid, self.every = pid, every
        self.rows: list[tuple[float, int, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-sampler", daemon=True)
        self._started = time.monotonic()

    def start(self) -> Sampler:
        self._started = time.monotonic()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            threads, rss = server_stats(self.pid)
            self.rows.append((round(time.monotonic() - self._started, 1), threads, rss))


def idle_threads(pid: int, timeout: float = 10.0) -> tuple[int, float]:
    """Threads and RSS once the thread count holds still (per-call threads have ended)."""
    last = server_stats(pid)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.3)
        now = server_stats(pid)
        if now[0] == last[0]:
            return now
        last = now
    return last


def fill_pools(url: str, key: Key, calls: int) -> None:
    """Hold ``calls`` calls at once, so every worker's thread pool grows to its full size."""
    def hold(i: int) -> None:
        body = {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {
            "name": "batch-report", "arguments": {"seconds": FILL_JOB_S}, "_meta": MODERN_META}}
        requests.post(url, data=json.dumps(body), timeout=HTTP_TIMEOUT, headers={
            "Accept": "application/json", "Content-Type": "application/json", "MCP-Protocol-Version": MODERN,
            "Mcp-Method": "tools/call", "Mcp-Name": "batch-report", "X-API-Key": key.api_key})

    with ThreadPoolExecutor(calls) as pool:
        list(pool.map(hold, range(calls)))


def thread_baseline(url: str, pid: int, key: Key, calls: int, rounds: int = 4) -> int:
    """The idle thread count with full pools: bursts until every worker has as many threads
    (one of them surely got a full pool's worth of calls) or a burst adds none."""
    baseline = -1
    for _ in range(rounds):
        fill_pools(url, key, calls)
        threads, _ = idle_threads(pid)
        per_worker = {len(os.listdir(f"/proc/{worker}/task")) for worker in worker_pids(pid)}
        if threads <= baseline or len(per_worker) == 1:
            return max(threads, baseline)
        baseline = threads
    return baseline


# -- the gateway's side ------------------------------------------------------------------------------

def audit(sandbox: Sandbox, keys: list[Key]) -> dict[str, Any]:
    """Every invocation the server made, by fate: finished (the server saw it end), cancelled,
    abandoned (ended upstream after the server stopped following it) or running."""
    owners = {fingerprint(k.api_key): k.api_key for k in keys}
    invoked: dict[str, str] = {}  # invocation id -> owner key
    last_seen: dict[str, float] = {}
    seen_done, cancelled = set(), set()
    for entry in sandbox.journal_entries():
        invocation_id, route = entry["invocation_id"], entry["route"]
        if not invocation_id or entry["status"] not in (200, 202):
            continue
        if route == "invoke":
            invoked[invocation_id] = owners[entry["key"]]
            if entry["status"] == 200:  # a sync invoke that answered with the end of the work
                seen_done.add(invocation_id)
        if route == "cancel":
            cancelled.add(invocation_id)
        else:
            last_seen[invocation_id] = max(last_seen.get(invocation_id, 0.0), entry["t"])
    now = time.time()
    fates: Counter[str] = Counter()
    stray = []
    for invocation_id, owner in invoked.items():
        invocation = sandbox.app.state.invocations.get(owner, invocation_id)
        if invocation_id in cancelled:
            fate = "cancelled"
        elif invocation_id in seen_done or invocation.is_terminal(last_seen[invocation_id] + POLL_SLACK_S):
            fate = "finished"
        else:
            fate = "abandoned" if invocation.is_terminal(now) else "running"
            stray.append(f"{invocation_id} ({invocation.slug}, {fate})")
        fates[fate] += 1
    return {"invocations": len(invoked), **{f: fates[f] for f in ("finished", "cancelled", "abandoned", "running")},
            "cancel_requests": len(cancelled), "stray_samples": stray[:5]}


def late_requests(sandbox: Sandbox, after: float) -> int:
    """Invokes and polls the gateway received after ``after`` (epoch): nobody was waiting for them."""
    return sum(1 for e in sandbox.journal_entries() if e["route"] in ("invoke", "poll") and e["t"] > after)


def settle(pid: int, baseline: int, sandbox: Sandbox, keys: list[Key], timeout: float) -> dict[str, Any]:
    """Wait (polling) until the server is back to its idle thread baseline with nothing running upstream."""
    started = time.monotonic()
    while True:
        threads, rss = server_stats(pid)
        fates = audit(sandbox, keys)
        done = threads <= baseline and fates["running"] == 0
        if done or time.monotonic() - started > timeout:
            return {"threads": threads, "rss_mb": rss, "seconds": round(time.monotonic() - started, 1),
                    "settled": done, "gateway": fates}
        time.sleep(0.25)


# -- the run -----------------------------------------------------------------------------------------

def soak(args: argparse.Namespace, sandbox: Sandbox, server: HttpServer, keys: list[Key]) -> dict[str, Any]:
    pid = server.process.pid
    workers = worker_pids(pid)
    start_threads, start_rss = server_stats(pid)
    baseline = thread_baseline(server.url, pid, keys[0], 2 * args.workers * args.threads)
    sampler = Sampler(pid).start()
    outcomes = drive(server.url, keys, args.clients, args.seconds, args.slow_seconds, random.Random(args.seed))
    load_ended = time.time()
    sampler.stop()
    after = settle(pid, baseline, sandbox, keys, args.settle)
    rows = sampler.rows or [(0.0, start_threads, start_rss)]
    warm = next((r for r in rows if r[0] >= args.warmup), rows[-1])
    end = ([r for r in rows if r[0] <= args.seconds] or rows[:1])[-1]
    return {
        "calls": by_kind(outcomes),
        "errors": errors(outcomes),
        "memory_mb": {"start": start_rss, "after_warmup": warm[2], "end": end[2], "max": max(r[2] for r in rows),
                      "idle_after": after["rss_mb"], "growth": round(end[2] - warm[2], 1)},
        "threads": {"start": start_threads, "idle_baseline": baseline, "after_warmup": warm[1], "end": end[1],
                    "max": max(r[1] for r in rows), "idle_after": after["threads"], "settle_s": after["seconds"],
                    "settled": after["settled"]},
        "workers_restarted": len(workers - worker_pids(pid)),
        "gateway": {**after["gateway"], "late_requests": late_requests(sandbox, load_ended + 1.0)},
        "series": [list(r) for r in rows],
    }


def by_kind(outcomes: list[Outcome]) -> dict[str, dict[str, Any]]:
    """Calls, eras, unexpected answers and latency (of the expected answers) per kind."""
    table = {}
    for kind in KINDS:
        mine = [o for o in outcomes if o.kind == kind]
        good = [o.seconds for o in mine if o.problem is None]
        table[kind] = {"calls": len(mine), **{era: sum(o.era == era for o in mine) for era in ERAS},
                       "unexpected": len(mine) - len(good), **_latency(good)}
    return table


def _latency(samples: list[float]) -> dict[str, float | None]:
    figures = percentiles(samples) if samples else {"p50": None, "p99": None}
    return {"p50_ms": figures["p50"], "p99_ms": figures["p99"]}


def errors(outcomes: list[Outcome]) -> dict[str, Any]:
    bad = [o for o in outcomes if o.problem is not None]
    distinct: dict[str, str] = {}
    for o in bad:  # one sample per kind of message (ids and numbers aside)
        distinct.setdefault(re.sub(r"\d+", "N", o.problem or "")[:80], f"{o.kind}/{o.era}: {o.problem}")
    return {"unexpected": len(bad), "cross_tenant": sum(o.cross_tenant for o in bad),
            "samples": list(distinct.values())[:10]}


def failures(report: dict[str, Any]) -> list[str]:
    """What makes the run fail (memory is reported, not judged: the tests bound it)."""
    found = []
    if report["errors"]["unexpected"]:
        found.append(f"{report['errors']['unexpected']} unexpected answers")
    if report["errors"]["cross_tenant"]:
        found.append(f"{report['errors']['cross_tenant']} cross-tenant answers")
    gateway = report["gateway"]
    if gateway["running"] or gateway["abandoned"]:
        found.append(f"{gateway['running']} invocations left running, {gateway['abandoned']} abandoned")
    if report["threads"]["idle_after"] > report["threads"]["idle_baseline"]:
        found.append(f"threads at {report['threads']['idle_after']}, above the idle baseline "
                     f"{report['threads']['idle_baseline']}")
    if report["workers_restarted"]:
        found.append(f"{report['workers_restarted']} workers restarted")
    return found


def print_report(report: dict[str, Any]) -> None:
    run = report["run"]
    print(f"soak: {run['clients']} clients, {run['seconds']:g} s, {run['keys']} keys, pool {run['pool_size']}, "
          f"{run['workers']} workers x {run['threads']} threads")
    print(f"{'kind':<10} {'calls':>7} {'legacy':>7} {'modern':>7} {'unexpected':>10} {'p50 ms':>9} {'p99 ms':>9}")
    for kind, row in report["calls"].items():
        p50, p99 = (f"{row[p]:.1f}" if row[p] is not None else "-" for p in ("p50_ms", "p99_ms"))
        print(f"{kind:<10} {row['calls']:>7} {row['legacy']:>7} {row['modern']:>7} {row['unexpected']:>10} "
              f"{p50:>9} {p99:>9}")
    total = sum(row["calls"] for row in report["calls"].values())
    print(f"{'total':<10} {total:>7}   ({total / run['seconds']:.1f} calls/s; latency of the expected answers; "
          "cancelled: from the cancellation to the stream's end; hangup: until the client hangs up)")
    errs = report["errors"]
    print(f"unexpected answers: {errs['unexpected']}, cross-tenant: {errs['cross_tenant']}")
    for sample in errs["samples"]:
        print(f"  {sample[:300]}")
    mem, threads, gateway = report["memory_mb"], report["threads"], report["gateway"]
    print(f"server RSS MB:  start {mem['start']}, after warm-up {mem['after_warmup']}, end {mem['end']}, "
          f"max {mem['max']}, idle after {mem['idle_after']} (growth {mem['growth']:+})")
    print(f"server threads: start {threads['start']}, idle baseline {threads['idle_baseline']}, after warm-up "
          f"{threads['after_warmup']}, end {threads['end']}, max {threads['max']}, idle after "
          f"{threads['idle_after']} ({'settled' if threads['settled'] else 'NOT settled'} in {threads['settle_s']} s)")
    print(f"gateway: {gateway['invocations']} invocations: {gateway['finished']} finished, {gateway['cancelled']} "
          f"cancelled, {gateway['abandoned']} abandoned, {gateway['running']} still running; "
          f"{gateway['late_requests']} invokes/polls after the load")
    for stray in gateway["stray_samples"]:
        print(f"  {stray}")
    print(f"workers restarted: {report['workers_restarted']}; server log lines: {report['server_log']['lines']}")
    for line in report["server_log"]["last"][-5:]:
        print(f"  {line[:300]}")
    print("verdict: " + ("OK" if not report["failures"] else "FAILED: " + "; ".join(report["failures"])))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8, help="concurrent clients (8)")
    parser.add_argument("--seconds", type=float, default=60, help="how long the load runs (60)")
    parser.add_argument("--keys", type=int, default=24, help="API keys the calls are spread over (24)")
    parser.add_argument("--pool-size", type=int, default=8, help="the server's tenants per worker (8)")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers (2)")
    parser.add_argument("--threads", type=int, help="threads per worker (default: 2 x clients + 8, at least 16)")
    parser.add_argument("--slow-seconds", type=float, default=3, help="length of the slow calls' job (3)")
    parser.add_argument("--warmup", type=float, help="seconds before the 'after warm-up' sample (20%% of --seconds)")
    parser.add_argument("--settle", type=float, default=20, help="longest wait for the server to go idle (20)")
    parser.add_argument("--seed", type=int, help="random seed, to replay a mix")
    parser.add_argument("--json", metavar="FILE", help="also write the report (with the samples) as JSON")
    args = parser.parse_args()
    if args.keys > 9999:
        parser.error("--keys: at most 9999")
    args.threads = args.threads or max(16, 2 * args.clients + 8)
    args.warmup = min(args.seconds * 0.2, 60) if args.warmup is None else args.warmup
    return args


def main() -> int:
    args = parse_args()
    keys = make_keys(args.keys)
    with Sandbox() as sandbox:
        register(sandbox, keys)
        server = HttpServer(sandbox.url, "--pool-size", str(args.pool_size), "--http-workers", str(args.workers),
                            "--http-threads", str(args.threads), "--log-level", "error")
        try:
            report = soak(args, sandbox, server, keys)
            last = [line.rstrip()[:500] for line in server.lines[-20:]]
            report["server_log"] = {"lines": len(server.lines), "last": last}
        finally:
            server.stop()
    report["run"] = {k: getattr(args, k) for k in ("clients", "seconds", "keys", "pool_size", "workers", "threads",
                                                   "slow_seconds", "warmup", "seed")}
    report["failures"] = failures(report)
    print_report(report)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 1 if report["failures"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
