"""Tenant isolation through real gunicorn (two workers) with a pool far smaller than the number of
keys, so tenants are evicted and rebuilt all the time: no tenant ever sees another's tools, results
or tasks; no key reaches the logs, /metrics or any answer; session and task ids cannot be guessed
or altered; and a SIGTERM leaves nothing running at the gateway that nobody asked for.

The heavy run (hundreds of requests from 24 keys on 16 threads) happens once, in the module
fixture ``churn``; the tests below each judge one property of what it recorded.
"""

import base64
import concurrent.futures
import hashlib
import json
import random
import secrets
import signal
import threading
import time

import pytest
import requests

from colabhive_mcp.sandbox import DEMO_KEY, DEMO_KEY_B

from ..support.http_server import HttpServer, rpc_messages

pytestmark = pytest.mark.slow

ACCEPT_BOTH = "application/json, text/event-stream"
MODERN = "2026-07-28"
LEGACY = "2025-11-25"
META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
TASKS = "io.modelcontextprotocol/tasks"
B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
TERMINAL = {"succeeded", "completed", "failed", "cancelled"}

KEYS = 24  # tenants in the churn run, against --pool-size 2 in each of 2 workers
TASK_KEYS = range(0, KEYS, 3)  # these keys also run a task in each era, probed by the next key
THREADS = 16


def key_hash(key):
    """What logs, metrics and the sandbox journal may show of a key: 12 hex digits of its SHA-256."""
    return hashlib.sha256(key.encode()).hexdigest()[:12]


def new_key(tag, i):
    return f"hive_{tag}{i:02d}_{secrets.token_urlsafe(24)}"


def entry(name, latency="fast"):
    return {"name": name, "description": f"private action {name}", "latencyClass": latency, "sideEffects": [],
            "inputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}}}


def entries(sandbox, route, keys):
    """The sandbox's journal entries of ``route`` made with one of ``keys`` (the sandbox is shared with
    session-scoped servers of other modules: only our own keys' traffic is ours to judge)."""
    hashes = {key_hash(k) for k in keys}
    return [e for e in sandbox.journal_entries() if e["route"] == route and e["key"] in hashes]


def leaks(text, keys):
    """The keys (or their random tails) that occur in ``text``."""
    return [key for key in keys if key in text or key[-20:] in text]


def rpc_answer(response):
    """The JSON-RPC response carried by a JSON body or an SSE stream ({} if there is none)."""
    try:
        messages = rpc_messages(response)
    except ValueError:
        return {}
    answers = [m for m in messages if isinstance(m, dict) and "id" in m and ("result" in m or "error" in m)]
    return answers[-1] if answers else {}


def text_of(answer):
    result = answer.get("result") or {}
    content = result.get("content") or [{}]
    return content[0].get("text")


class Caller:
    """One key's client; it sends the key as ``Authorization: Bearer`` or ``X-API-Key``, and
    keeps every HTTP response in ``seen`` for the secrecy checks."""

    def __init__(self, url, key, seen, header="bearer"):
        self.url, self.key, self.seen, self.header = url, key, seen, header

    def post(self, body, **headers):
        auth = {"Authorization": f"Bearer {self.key}"} if self.header == "bearer" else {"X-API-Key": self.key}
        response = requests.post(self.url, data=json.dumps(body), timeout=90, headers={
            "Accept": ACCEPT_BOTH, "Content-Type": "application/json", **auth, **headers})
        self.seen.append(response)
        return response

    def initialize(self, version=LEGACY):
        response = self.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "isolation", "version": "1"}}})
        assert response.status_code == 200, response.text
        session = response.headers["Mcp-Session-Id"]
        notified = self.post({"jsonrpc": "2.0", "method": "notifications/initialized"}, **{"Mcp-Session-Id": session})
        assert notified.status_code == 202
        return session

    def legacy(self, session, method, params=None, id_=1, **headers):
        body = {"jsonrpc": "2.0", "id": id_, "method": method, **({"params": params} if params is not None else {})}
        return self.post(body, **{"Mcp-Session-Id": session, "MCP-Protocol-Version": LEGACY, **headers})

    def modern(self, method, params=None, id_=1, name=None, tasks=False):
        params = dict(params or {})
        params["_meta"] = {META_VERSION: MODERN, META_CAPABILITIES: {"extensions": {TASKS: {}}} if tasks else {},
                           **params.get("_meta", {})}
        headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": method}
        if name is not None:
            headers["Mcp-Name"] = name
        return self.post({"jsonrpc": "2.0", "id": id_, "method": method, "params": params}, **headers)


# -- the churn run ---------------------------------------------------------------------------------

class Run:
    """What the churn run observed."""

    def __init__(self, keys, strangers):
        self.keys, self.strangers = keys, strangers
        self.seen = []  # every HTTP response
        self.lists = []  # (key index, era, tool names)
        self.calls = []  # (key index, era, HTTP status, answer)
        self.tasks = []  # dicts: owner, prober, era, the prober's answers, the owner's final answer
        self.failures = []  # exceptions the jobs raised (requests that got no answer)
        self.log = self.metrics = ""
        self.journal = []
        self._lock = threading.Lock()

    def record(self, kind, item):
        with self._lock:
            getattr(self, kind).append(item)

    def caller(self, url, i):
        return Caller(url, self.keys[i], self.seen, "bearer" if i % 2 else "x-api-key")


def modern_list(run, url, i):
    answer = rpc_answer(run.caller(url, i).modern("tools/list", id_=f"list-{i}"))
    run.record("lists", (i, "modern", {t["name"] for t in answer["result"]["tools"]}))


def modern_call(run, url, i):
    fp = key_hash(run.keys[i])
    response = run.caller(url, i).modern("tools/call", {"name": f"private-{fp}", "arguments": {"n": i}},
                                         id_=f"call-{i}", name=f"private-{fp}")
    run.record("calls", (i, "modern", response.status_code, rpc_answer(response)))


def legacy_session(run, url, i):
    """initialize, tools/list, then a plain JSON call and a streamed (progress) call."""
    caller, fp = run.caller(url, i), key_hash(run.keys[i])
    session = caller.initialize()
    listed = rpc_answer(caller.legacy(session, "tools/list", id_=2))
    run.record("lists", (i, "legacy", {t["name"] for t in listed["result"]["tools"]}))
    for id_, meta in ((3, {}), (4, {"_meta": {"progressToken": f"p{i}"}})):
        response = caller.legacy(session, "tools/call", {"name": f"private-{fp}", "arguments": {"n": i}, **meta},
                                 id_=id_)
        run.record("calls", (i, "legacy" if not meta else "legacy-sse", response.status_code, rpc_answer(response)))


def modern_task(run, url, i):
    """Key i creates a 2026 extension task; key i+1 tries to read and cancel it; key i waits for it."""
    j = (i + 1) % KEYS
    owner, prober, fp = run.caller(url, i), run.caller(url, j), key_hash(run.keys[i])
    created = rpc_answer(owner.modern("tools/call", {"name": f"privjob-{fp}", "arguments": {"n": i}},
                                      id_=f"task-{i}", name=f"privjob-{fp}", tasks=True))["result"]
    assert created["resultType"] == "task", created
    task_id = created["taskId"]
    probes = {method: rpc_answer(prober.modern(method, {"taskId": task_id}, name=task_id, tasks=True))
              for method in ("tasks/get", "tasks/cancel")}
    deadline = time.monotonic() + 60
    got = {}
    while time.monotonic() < deadline:
        got = rpc_answer(owner.modern("tasks/get", {"taskId": task_id}, name=task_id, tasks=True))
        if got.get("result", {}).get("status") != "working":
            break
        time.sleep(0.3)
    run.record("tasks", {"owner": i, "prober": j, "era": "modern", "probes": probes, "final": got.get("result", got)})


def legacy_task(run, url, i):
    """The same with 2025-11-25 core tasks: the prober has its own (valid) session."""
    j = (i + 1) % KEYS
    owner, prober, fp = run.caller(url, i), run.caller(url, j), key_hash(run.keys[i])
    mine, theirs = owner.initialize(), prober.initialize()
    created = rpc_answer(owner.legacy(mine, "tools/call", {"name": f"privjob-{fp}", "arguments": {"n": i},
                                                           "task": {}}, id_=5))["result"]
    task_id = created["task"]["taskId"]
    probes = {method: rpc_answer(prober.legacy(theirs, method, {"taskId": task_id}, id_=6))
              for method in ("tasks/get", "tasks/result", "tasks/cancel")}
    final = rpc_answer(owner.legacy(mine, "tasks/result", {"taskId": task_id}, id_=7))
    run.record("tasks", {"owner": i, "prober": j, "era": "legacy", "probes": probes,
                         "final": final.get("result", final)})


def stranger(run, url, key):
    """A key the gateway does not know: refused, but never echoed."""
    caller = Caller(url, key, run.seen)
    caller.modern("tools/list", id_="stranger-list")
    caller.modern("tools/call", {"name": "echo", "arguments": {"text": "x"}}, id_="stranger-call", name="echo")
    session = caller.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}}})
    if "Mcp-Session-Id" in session.headers:
        caller.legacy(session.headers["Mcp-Session-Id"], "tools/list", id_=2)


@pytest.fixture(scope="module")
def churn(gateway_sandbox):
    sandbox = gateway_sandbox
    sandbox.reset()
    keys = [new_key("iso", i) for i in range(KEYS)]
    run = Run(keys, [new_key("unknown", i) for i in range(2)])
    for key in keys:
        sandbox.add_key(key)
        fp = key_hash(key)
        sandbox.add_action(entry(f"private-{fp}"), [key], result=f"owner:{fp}")
        sandbox.add_action(entry(f"privjob-{fp}", "batch"), [key], result=f"job-owner:{fp}", seconds=2)
    server = HttpServer(sandbox.url, "--http-workers", "2", "--pool-size", "2",
                          env={"COLABHIVE_LOG_LEVEL": "debug"})
    try:
        url = server.url
        jobs = [(job, i) for i in range(KEYS) for job in (modern_list, modern_list, modern_call, modern_call,
                                                          legacy_session)]
        jobs += [(job, i) for i in TASK_KEYS for job in (modern_task, legacy_task)]
        jobs += [(stranger, key) for key in run.strangers]
        random.Random(20260728).shuffle(jobs)

        def do(job, arg):
            try:
                job(run, url, arg)
            except Exception as exc:  # noqa: BLE001 - every failure is reported by the tests
                run.record("failures", f"{job.__name__}({arg if isinstance(arg, int) else 'stranger'}): {exc!r}")

        started = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
            for future in [pool.submit(do, job, arg) for job, arg in jobs]:
                future.result()
        run.seconds = time.monotonic() - started
        run.metrics = requests.get(server.root + "/metrics", timeout=10).text
    finally:
        run.log = server.stop()
        run.journal = sandbox.journal_entries()
        sandbox.reset()
    return run


def test_the_run_churned_the_pool_and_every_request_was_answered(churn):
    assert not churn.failures, churn.failures
    evictions = churn.log.count('"pool.tenant_evicted"')
    assert evictions >= KEYS, f"only {evictions} evictions: the pool did not churn"
    assert len(churn.seen) >= 300 and all(r.status_code < 500 for r in churn.seen)


def test_each_keys_tool_list_has_its_own_private_tools_and_no_one_elses(churn):
    private = {key_hash(k): {f"private-{key_hash(k)}", f"privjob-{key_hash(k)}"} for k in churn.keys}
    everyone = set().union(*private.values())
    assert len(churn.lists) == 3 * KEYS and {era for _, era, _ in churn.lists} == {"modern", "legacy"}
    for i, era, names in churn.lists:
        own = private[key_hash(churn.keys[i])]
        assert own <= names, (i, era)
        assert not (names & everyone) - own, f"key {i} ({era}) sees {sorted((names & everyone) - own)}"
        assert not names & {"alpha-classifier", "beta-sentiment"}  # the demo keys' own actions
        assert "echo" in names  # and the public catalogue


def test_each_call_result_names_its_own_key(churn):
    assert len(churn.calls) == 4 * KEYS
    assert {era for _, era, _, _ in churn.calls} == {"modern", "legacy", "legacy-sse"}
    for i, era, status, answer in churn.calls:
        assert status == 200 and text_of(answer) == f"owner:{key_hash(churn.keys[i])}", (i, era, answer)
    # at the gateway: each private action was invoked only ever with its owner's key
    invokes = [e for e in churn.journal if e["route"] == "invoke" and e["slug"].startswith(("private-", "privjob-"))]
    assert len(invokes) == 4 * KEYS + 2 * len(TASK_KEYS)
    assert all(e["slug"].split("-", 1)[1] == e["key"] for e in invokes)
    owners = {e["invocation_id"]: e["key"] for e in invokes}
    for e in churn.journal:
        if e["route"] in ("poll", "cancel") and e["invocation_id"] in owners:
            assert e["key"] == owners[e["invocation_id"]], e


def test_a_task_id_is_useless_to_another_key_while_its_owner_gets_the_result(churn):
    assert len(churn.tasks) == 2 * len(TASK_KEYS)
    for task in churn.tasks:
        for method, probe in task["probes"].items():
            assert "result" not in probe and probe["error"]["code"] == -32602, (task["era"], method, probe)
        owner = key_hash(churn.keys[task["owner"]])
        final = task["final"]
        if task["era"] == "modern":
            assert final["status"] == "completed", final
            final = final["result"]
        assert not final.get("isError") and final["content"][0]["text"] == f"job-owner:{owner}", task
    ours = {key_hash(k) for k in churn.keys}
    assert not [e for e in churn.journal if e["route"] == "cancel" and e["key"] in ours]  # no probe cancelled


def test_no_key_reaches_the_logs_the_metrics_or_any_answer(churn):
    keys = churn.keys + churn.strangers
    assert not leaks(churn.log, keys), "a key is in the server's log"
    assert not leaks(churn.metrics, keys) and "mcp_tool_calls_total" in churn.metrics
    for response in churn.seen:
        assert not leaks(response.text, keys), response.text[:300]
        assert not leaks(json.dumps(dict(response.headers)), keys), dict(response.headers)
    # the log does name the tenants, by hash
    tenants = set()
    for line in churn.log.splitlines():
        try:
            tenants.add(json.loads(line).get("tenant"))
        except (ValueError, AttributeError):
            continue
    assert {key_hash(k) for k in keys} <= tenants


# -- session and task ids --------------------------------------------------------------------------

def initialize(url, key=DEMO_KEY):
    return Caller(url, key, []).initialize()


def modern_task_id(url, key=DEMO_KEY):
    created = rpc_answer(Caller(url, key, []).modern("tools/call", {"name": "batch-report", "arguments": {
        "seconds": 1}}, name="batch-report", tasks=True))
    return created["result"]["taskId"]


def assert_unguessable(ids, count):
    assert len(set(ids)) == count
    for token in ids:
        assert all(0x21 <= ord(c) <= 0x7E for c in token)  # visible ASCII, as the spec asks
        signature = token.rsplit(".", 1)[-1]
        assert len(base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4))) >= 16  # >= 128 bits
    for a, b in zip(ids, ids[1:]):  # any two differ all over, not in a counter's last digits
        assert sum(x != y for x, y in zip(a, b)) >= 22


@pytest.mark.parametrize("kind,count", [("session", 50), ("task", 20)])
def test_ids_issued_to_one_key_are_distinct_and_carry_at_least_128_bits(hosted, sandbox, kind, count):
    make = initialize if kind == "session" else modern_task_id
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        ids = list(pool.map(lambda _: make(hosted.url), range(count)))
    assert_unguessable(ids, count)


def altered(token):
    """``token`` with each character in turn changed as little as possible (one bit of its base64 value)."""
    for i, c in enumerate(token):
        other = B64[B64.index(c) ^ 1] if c in B64 else "A"
        yield i, token[:i] + other + token[i + 1:]


@pytest.mark.parametrize("kind", ["session", "task"])
def test_an_id_altered_in_any_one_character_is_refused(hosted, sandbox, kind):
    caller = Caller(hosted.url, DEMO_KEY, [])
    if kind == "session":
        token = initialize(hosted.url)

        def accepted(forged):
            return caller.legacy(forged, "ping", id_=9).status_code not in (400, 404)
    else:
        token = modern_task_id(hosted.url)

        def accepted(forged):
            answer = rpc_answer(caller.modern("tasks/get", {"taskId": forged}, name=forged, tasks=True))
            return "result" in answer or answer.get("error", {}).get("code") != -32602

    assert accepted(token)  # the genuine id works
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        verdicts = list(pool.map(lambda pair: (pair[0], pair[1], accepted(pair[1])), altered(token)))
    taken = [(i, forged[max(0, i - 6):i + 6]) for i, forged, ok in verdicts if ok]
    assert not taken, f"{len(taken)} of {len(token)} one-character alterations of a {kind} id were accepted: {taken}"


def test_a_session_cannot_be_used_cancelled_or_ended_by_another_key(hosted, sandbox):
    """Key B holding key A's session id (but not A's key) can neither cancel A's call in flight
    (whichever worker hears it: they relay cancellations), nor end the session, nor call with it."""
    key = new_key("owner", 0)
    sandbox.add_key(key)
    owner, thief = Caller(hosted.url, key, []), Caller(hosted.url, DEMO_KEY_B, [])
    session = owner.initialize()
    answers = []
    call = threading.Thread(target=lambda: answers.append(owner.legacy(
        session, "tools/call", {"name": "batch-report", "arguments": {"seconds": 3}}, id_=77)))
    call.start()
    deadline = time.monotonic() + 15
    while not entries(sandbox, "invoke", [key]) and time.monotonic() < deadline:
        time.sleep(0.05)
    for _ in range(2):  # two tries: each may reach either worker
        assert thief.post({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 77}},
                          **{"Mcp-Session-Id": session}).status_code == 404
    assert thief.legacy(session, "tools/call", {"name": "echo", "arguments": {"text": "x"}}, id_=78).status_code == 404
    ended = requests.delete(hosted.url, headers={"Authorization": f"Bearer {DEMO_KEY_B}",
                                                 "Mcp-Session-Id": session}, timeout=10)
    assert ended.status_code == 404
    call.join(30)
    assert "report ready" in text_of(rpc_answer(answers[0]))
    assert len(entries(sandbox, "invoke", [key])) == 1 and not entries(sandbox, "cancel", [key, DEMO_KEY_B])
    for _ in range(2):
        assert owner.legacy(session, "ping", id_=79).status_code == 200  # still the owner's, on either worker


# -- graceful shutdown -------------------------------------------------------------------------------

STYLES = ("modern", "modern-sse", "legacy", "legacy-sse", "modern", "legacy")


def drain_call(caller, session, style, name, id_):
    """One tools/call in the given style; returns (HTTP status, answer) or the exception."""
    params = {"name": name, "arguments": {"n": 1}}
    if style.endswith("-sse"):
        params["_meta"] = {"progressToken": f"{name}-progress"}
    try:
        if style.startswith("modern"):
            response = caller.modern("tools/call", params, id_=id_, name=name)
        else:
            response = caller.legacy(session, "tools/call", params, id_=id_)
        return response.status_code, rpc_answer(response), response.headers.get("Content-Type", "")
    except Exception as exc:  # noqa: BLE001 - a dropped connection is what the test looks for
        return exc


def test_sigterm_leaves_nothing_running_upstream_and_answers_every_client(gateway_sandbox, sandbox):
    """Long (60 s) and short (1.5 s) calls from six keys, both eras, JSON and SSE answers, on two
    workers with a pool of two; SIGTERM with a 3 s grace. Every invocation the gateway started ends
    terminal, seen by the server's own polls (or the invoke's answer), or cancelled by the server; no
    client loses its connection; short calls finish, long ones get the 'restarting' error."""
    keys = [new_key("drain", i) for i in range(6)]
    for key in keys:
        sandbox.add_key(key)
        fp = key_hash(key)
        sandbox.add_action(entry(f"slow-{fp}", "medium"), [key], result=f"slow-owner:{fp}", seconds=60)
        sandbox.add_action(entry(f"short-{fp}"), [key], result=f"short-owner:{fp}", seconds=1.5)
    server = HttpServer(gateway_sandbox.url, "--http-workers", "2", "--pool-size", "2",
                          env={"COLABHIVE_SHUTDOWN_GRACE": "3"})
    answers, threads = {}, []
    try:
        for i, key in enumerate(keys):
            caller = Caller(server.url, key, [], "bearer" if i % 2 else "x-api-key")
            fp = key_hash(key)
            for kind, style in (("slow", STYLES[i]), ("short", STYLES[-1 - i])):
                session = caller.initialize() if style.startswith("legacy") else None
                target = (lambda c=caller, s=session, st=style, n=f"{kind}-{fp}", k=(kind, i):
                          answers.__setitem__(k, drain_call(c, s, st, n, f"{k[0]}-{k[1]}")))
                threads.append(threading.Thread(target=target))
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 30
        while len(entries(sandbox, "invoke", keys)) < 12 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(entries(sandbox, "invoke", keys)) == 12
        server.process.send_signal(signal.SIGTERM)
        for thread in threads:
            thread.join(60)
        server.process.wait(60)
    finally:
        log = server.stop()
    assert server.process.returncode == 0
    # each worker holding calls drains them (gunicorn may have handed every call to one worker;
    # an idle worker exits at once, with nothing to drain)
    assert 1 <= log.count('"http.draining"') <= 2

    # every client got an answer to its own request
    for (kind, i), got in answers.items():
        assert not isinstance(got, Exception), (kind, i, got)
        status, answer, _ = got
        assert status == 200 and answer.get("id") == f"{kind}-{i}" and "result" in answer, (kind, i, answer)
        fp = key_hash(keys[i])
        if kind == "short":
            assert text_of(answer) == f"short-owner:{fp}", answer
        else:
            assert answer["result"]["isError"] and "restarting" in text_of(answer), answer
    assert len(answers) == 12 and any(ct.startswith("text/event-stream") for _, _, ct in answers.values())

    # at the gateway: nothing is left running that nobody asked for
    journal = [e for e in sandbox.journal_entries() if e["key"] in {key_hash(k) for k in keys}]
    by_hash = {key_hash(k): k for k in keys}
    store = sandbox.app.state.invocations
    now = time.time()
    invokes = [e for e in journal if e["route"] == "invoke"]
    assert len(invokes) == 12 and all(e["invocation_id"] for e in invokes)
    for invoke in invokes:
        inv_id, owner = invoke["invocation_id"], invoke["key"]
        invocation = store.get(by_hash[owner], inv_id)
        status = invocation.view(now)["status"]
        cancels = [e for e in journal if e["route"] == "cancel" and e["invocation_id"] == inv_id]
        polls = [e for e in journal if e["route"] == "poll" and e["invocation_id"] == inv_id]
        assert status in TERMINAL, f"{invoke['slug']} is still {status} at the gateway"
        assert all(e["key"] == owner for e in cancels + polls)
        seen_done = invoke["status"] == 200 or bool(polls and invocation.is_terminal(polls[-1]["t"] + 0.5))
        assert cancels or seen_done, f"{invoke['slug']} ended {status} with nobody watching"
        if invoke["slug"].startswith("slow-"):
            assert status == "cancelled" and len(cancels) == 1, (invoke["slug"], status, cancels)
        else:
            assert status == "succeeded" and seen_done and not cancels, (invoke["slug"], status, cancels)


def test_sigterm_does_not_cancel_a_task_whose_result_a_client_awaits(gateway_sandbox, sandbox):
    """A task outlives the request that created it: any worker of any instance serves it, and only
    tasks/cancel stops it. A restart that interrupts a blocking 2025-11-25 tasks/result must leave the
    task running upstream and must not hand the client a result the task never had."""
    server = HttpServer(gateway_sandbox.url, "--http-workers", "1", "--shutdown-grace", "1")
    key = new_key("tasks", 0)
    sandbox.add_key(key)
    caller = Caller(server.url, key, [])
    waited = []
    try:
        session = caller.initialize()
        task = rpc_answer(caller.legacy(session, "tools/call", {"name": "batch-report", "arguments": {"seconds": 30},
                                                                "task": {}}, id_=2))["result"]["task"]
        modern = rpc_answer(caller.modern("tools/call", {"name": "batch-report", "arguments": {"seconds": 30}},
                                          name="batch-report", tasks=True))["result"]
        assert modern["resultType"] == "task" and len(entries(sandbox, "invoke", [key])) == 2
        waiter = threading.Thread(target=lambda: waited.append(caller.legacy(
            session, "tasks/result", {"taskId": task["taskId"]}, id_=3)))
        waiter.start()
        deadline = time.monotonic() + 15
        while len(entries(sandbox, "poll", [key])) < 2 and time.monotonic() < deadline:  # tasks/result is following the task
            time.sleep(0.05)
        server.process.send_signal(signal.SIGTERM)
        waiter.join(30)
        server.process.wait(30)
    finally:
        server.stop()
    assert waited and waited[0].status_code == 200
    answer = rpc_answer(waited[0])
    assert answer.get("id") == 3
    cancels, problems = entries(sandbox, "cancel", [key]), []
    if cancels:
        problems.append(f"the restart cancelled {len(cancels)} task(s) upstream that no client asked to cancel")
    if "error" not in answer or "result" in answer:
        problems.append(f"the unfinished task was answered with a result: {text_of(answer)!r}")
    assert not problems, problems
