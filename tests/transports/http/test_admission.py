"""The hosted server on the open internet: budgets for long work, per-key and per-instance limits
that hold across workers and evictions, and abuse at default settings (real gunicorn, real sandbox)."""

import concurrent.futures
import json
import time

import pytest
import requests

from colabhive_mcp.calls.results import LIMIT
from colabhive_mcp.sandbox import DEMO_KEY, DEMO_KEY_B
from colabhive_mcp.settings.config import Config
from colabhive_mcp.transports.http.admission import long_request_places

from ...support.http_client import MODERN, health_time, modern, post, rpc
from ...support.http_server import client, hosted_server
from ...support.waiting import wait_until

pytestmark = pytest.mark.slow

SSE_ACCEPT = {"Accept": "text/event-stream"}





def open_sse(server, key, session=requests):
    """``GET /sse``: the open response (read its first bytes to see it was admitted) or the refusal."""
    response = session.get(server.root + "/sse", headers={**SSE_ACCEPT, "Authorization": f"Bearer {key}"},
                            stream=True, timeout=30)
    if response.status_code == 200:
        response.chunks = response.iter_content(None)  # kept: a dropped iterator closes the connection
        assert next(response.chunks).startswith(b"event: endpoint")
    return response


def listen(server, key):
    """2026 ``subscriptions/listen``, held open."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen", "params": {
        "notifications": {"toolsListChanged": True}, "_meta": {"io.modelcontextprotocol/protocolVersion": MODERN,
                                                               "io.modelcontextprotocol/clientCapabilities": {}}}}
    response = requests.post(server.url, data=json.dumps(body), stream=True, timeout=30, headers={
        "Accept": "application/json, text/event-stream", "Content-Type": "application/json",
        "Authorization": f"Bearer {key}", "MCP-Protocol-Version": MODERN, "Mcp-Method": "subscriptions/listen"})
    if response.status_code == 200:
        response.chunks = response.iter_content(None)  # kept: a dropped iterator closes the connection
        assert next(response.chunks)
    return response


def call(server, key, seconds):
    """A call of the sandbox's batch job, which takes ``seconds``."""
    return modern(server.url, "tools/call", {"name": "batch-report", "arguments": {"seconds": seconds}}, key=key)


def echo(server, key):
    """A call that is answered at once; its result."""
    answer = modern(server.url, "tools/call", {"name": "echo", "arguments": {"text": "hi"}}, key=key)
    assert answer.status_code == 200, answer.text
    return answer.json()["result"]





def test_a_worker_keeps_threads_for_short_requests_whatever_holds_the_others(gateway_sandbox, sandbox, journal):
    holders = [DEMO_KEY, "hive_holder_one_0123", "hive_holder_two_0123"]  # each key gets its share of the 3
    for key in holders[1:]:
        sandbox.add_key(key)
    with hosted_server(gateway_sandbox.url, "--http-workers", "1", http_threads=8, http_long_requests=3) as one:
        for key in holders + [DEMO_KEY_B]:  # checked one by one (a check holds a place of its address's share)
            assert modern(one.url, "tools/list", key=key).status_code == 200
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            held = [pool.submit(call, one, key, 4) for key in holders]
            assert wait_until(lambda: len(journal("invoke")) == 3, timeout=15)
            refused = call(one, DEMO_KEY_B, 0)
            assert refused.status_code == 503 and refused.headers["Retry-After"] == "5"
            assert refused.json()["error"]["code"] == -31429 and "3 places" in refused.json()["error"]["message"]
            assert refused.json()["error"]["data"] == {"limit": "http_long_requests", "allowed": 3, "used": 3,
                                                       "retryAfter": 5}  # what the header says, for a program
            assert health_time(one) < 1
            assert modern(one.url, "tools/list", key=DEMO_KEY_B).status_code == 200  # short requests pass
            sandbox.add_key("hive_newcomer_0123")  # a key's first check may take long: no place left for it
            assert modern(one.url, "tools/list", key="hive_newcomer_0123").status_code == 503
            assert all(not h.result().json()["result"].get("isError") for h in held)
        assert echo(one, DEMO_KEY_B)["content"][0]["text"] == "hi"  # the places are free again


def test_the_default_budget_leaves_a_quarter_of_the_threads_free():
    assert long_request_places(Config()) == 1536  # 2048 threads
    assert long_request_places(Config(http_threads=8)) == 4
    assert long_request_places(Config(http_threads=512)) == 384
    assert long_request_places(Config(http_threads=8, http_long_requests=6)) == 6


def test_calls_per_key_are_counted_by_the_instance_through_evictions(gateway_sandbox, sandbox, journal):
    with hosted_server(gateway_sandbox.url, "--http-workers", "2", tenant_max_concurrent=2, pool_size=1) as two:
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            held = [pool.submit(call, two, DEMO_KEY, 3) for _ in range(2)]
            assert wait_until(lambda: len(journal("invoke")) == 2, timeout=15)
            for _ in range(4):  # whichever worker answers, and after the key's tenant was evicted there
                assert not echo(two, DEMO_KEY_B).get("isError")
                refused = echo(two, DEMO_KEY)
                assert refused["isError"] and "limit is 2" in refused["content"][0]["text"]
                assert refused["_meta"][LIMIT] == {"limit": "tenant_max_concurrent", "allowed": 2, "used": 2,
                                                   "retryAfter": 5}
            assert len(journal("invoke")) == 2 + 4  # the refused calls never reached the gateway
            assert all(h.result().status_code == 200 for h in held)
        assert not echo(two, DEMO_KEY).get("isError")


def test_streams_per_key_and_their_maximum_age(gateway_sandbox, sandbox):
    with hosted_server(gateway_sandbox.url, "--http-workers", "2", tenant_max_streams=2, stream_max_age=3) as two:
        first, second = open_sse(two, DEMO_KEY), listen(two, DEMO_KEY)
        assert first.status_code == second.status_code == 200
        for refused in (open_sse(two, DEMO_KEY), listen(two, DEMO_KEY)):
            assert refused.status_code == 429 and int(refused.headers["Retry-After"]) > 0
            assert "2 streams" in refused.json()["error"]["message"]
            data = refused.json()["error"]["data"]
            assert data["limit"] == "tenant_max_streams" and data["retryAfter"] == int(refused.headers["Retry-After"])
        other = open_sse(two, DEMO_KEY_B)
        assert other.status_code == 200  # another key's streams count apart
        assert open_sse(two, "hive_made_up_key").status_code == 401  # only a key the gateway accepts
        started = time.monotonic()
        for held in (first, second, other):  # each ends by itself at its maximum age
            for _chunk in held.iter_content(None):
                pass
            held.close()
        assert time.monotonic() - started < 10
        assert wait_until(lambda: open_sse(two, DEMO_KEY).status_code == 200, timeout=15)  # the places came back


def test_new_keys_are_checked_with_the_gateway_at_a_bounded_rate(gateway_sandbox, sandbox, journal):
    with hosted_server(gateway_sandbox.url, "--http-workers", "2", cold_fetches_per_minute=3) as two:
        statuses = [rpc(two.url, "tools/list", key=f"hive_junk_{i}").status_code for i in range(8)]
        assert statuses.count(401) == 3 and statuses.count(503) == 5
        assert len(journal("manifest")) <= 3
        refused = rpc(two.url, "tools/list", key="hive_junk_9")
        assert 0 < int(refused.headers["Retry-After"]) <= 60 and "too many new API keys" in refused.text


def test_keys_the_gateway_accepted_lately_are_not_counted_as_new(gateway_sandbox, sandbox):
    with hosted_server(gateway_sandbox.url, "--http-workers", "2", cold_fetches_per_minute=2, pool_size=1) as two:
        for _ in range(6):  # a pool of one: each key evicts the other, in either worker, again and again
            for key in (DEMO_KEY, DEMO_KEY_B):
                assert modern(two.url, "tools/list", key=key).status_code == 200
        assert rpc(two.url, "tools/list", key="hive_junk_new").status_code == 503  # the two checks went to them


def test_greedy_keys_leave_a_share_for_a_modest_one(gateway_sandbox, sandbox):
    """Three keys, each within its own limits (32 calls), ask for every long-request place of a worker
    of 64 threads (48 places): each gets a share that shrinks as the worker fills (24, 12, 6), so a
    fourth key's calls are still served."""
    greedy = [f"hive_greedy_{i}_0123456789" for i in range(3)]
    for key in greedy:
        sandbox.add_key(key)
    with hosted_server(gateway_sandbox.url, "--http-workers", "1", http_threads=64) as one:
        with concurrent.futures.ThreadPoolExecutor(96) as pool:
            held = [pool.submit(call, one, key, 6) for key in greedy for _ in range(32)]
            time.sleep(2)
            modest = list(pool.map(lambda _: call(one, DEMO_KEY_B, 0), range(3)))
            answers = [h.result() for h in held]
    assert [m.status_code for m in modest] == [200] * 3, [m.text[:300] for m in modest]
    served = [a for a in answers if a.status_code == 200]
    refused = [a for a in answers if a.status_code == 429]
    assert len(served) + len(refused) == 96 and len(served) <= 45, len(served)
    assert all(a.headers["Retry-After"] and "their share" in a.text for a in refused)


def test_a_2024_session_has_a_bounded_backlog(gateway_sandbox, sandbox):
    from colabhive_mcp.transports.http.legacy_sse import MESSAGE_BACKLOG

    with hosted_server(gateway_sandbox.url, "--http-workers", "1") as one:
        stream = requests.get(one.root + "/sse", headers={**SSE_ACCEPT, "Authorization": f"Bearer {DEMO_KEY}"},
                              stream=True, timeout=30)
        lines = stream.iter_lines()
        endpoint = next(line for line in lines if line.startswith(b"data:"))[5:].strip().decode()
        assert post(one.root + endpoint, {"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
            "protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
                    ).status_code == 202
        assert b'"id":"init"' in next(line for line in lines if line.startswith(b"data:"))
        assert post(one.root + endpoint, {"jsonrpc": "2.0", "method": "notifications/initialized"}).status_code == 202
        statuses = []
        for i in range(MESSAGE_BACKLOG + 4):
            answer = post(one.root + endpoint, {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {
                "name": "batch-report", "arguments": {"seconds": 3}}})
            statuses.append(answer.status_code)
            if answer.status_code == 429:
                assert answer.headers["Retry-After"] == "1" and "waiting for their answers" in answer.text
        assert statuses == [202] * MESSAGE_BACKLOG + [429] * 4
        stream.close()


def test_abuse_at_default_settings(gateway_sandbox, sandbox, journal):
    """160 held streams with made-up keys, then 160 with one greedy real key: another tenant is served
    in seconds and /healthz in under a second; one unknown key 20 times, and 100 junk keys (each from
    its own address): the gateway asked little, a warm tenant's manifest not fetched again."""
    with hosted_server(gateway_sandbox.url, pool_size=8) as default:  # 2 workers x 2048 threads, limits at their defaults
        assert modern(default.url, "tools/list", key=DEMO_KEY_B).status_code == 200  # a warm tenant
        with concurrent.futures.ThreadPoolExecutor(160) as pool:
            forger = client("127.0.0.2")
            made_up = list(pool.map(lambda i: open_sse(default, f"hive_made_up_{i}", forger), range(160)))
            statuses = [r.status_code for r in made_up]
            assert set(statuses) == {401, 429} and statuses.count(401) <= 20 + 2 * 8  # the address's budget
            greedy = list(pool.map(lambda _: open_sse(default, DEMO_KEY), range(160)))
            statuses = [r.status_code for r in greedy]
            assert statuses.count(200) == 8 and statuses.count(429) == 152, statuses  # tenant_max_streams
            started = time.perf_counter()
            assert modern(default.url, "tools/list", key=DEMO_KEY_B).status_code == 200
            assert time.perf_counter() - started < 5 and health_time(default) < 1
            for response in greedy:
                response.close()
        before = len(journal("manifest"))
        unknown = [rpc(default.url, "tools/list", key="hive_unknown_one").status_code for _ in range(20)]
        assert unknown == [401] * 20 and len(journal("manifest")) - before <= 3
        before = len(journal("manifest"))
        junk = [rpc(default.url, "tools/list", key=f"hive_junk_{i}").status_code for i in range(100)]
        assert junk.count(401) == 19 and junk.count(429) == 81  # the budget (one went to hive_unknown_one)
        assert len(journal("manifest")) - before == 19
    assert "pool.tenant_evicted" not in default.stderr()  # no junk key took a real tenant's place


def test_new_keys_waiting_for_a_slow_gateway_leave_threads_for_everyone_else(gateway_sandbox, sandbox, journal):
    """40 new keys from one address while the gateway takes 2 s for each manifest page: the requests
    waiting for their keys' checks hold at most the address's share of the worker's places for long
    requests, the rest are refused at once (429, Retry-After); /healthz and a warm tenant's list are
    answered meanwhile."""
    names = [f"hive_newcomer_{i:02d}" for i in range(40)]
    for name in names:
        sandbox.add_key(name)
    with hosted_server(gateway_sandbox.url, "--http-workers", "1", http_threads=16) as one:  # 12 places
        assert modern(one.url, "tools/list", key=DEMO_KEY_B).status_code == 200  # a warm tenant
        sandbox.faults.add(route="manifest", kind="latency", count=None, seconds=2.0)
        with concurrent.futures.ThreadPoolExecutor(len(names)) as pool:
            lists = [pool.submit(modern, one.url, "tools/list", key=name) for name in names]
            assert wait_until(lambda: journal("manifest"), timeout=15)  # checks under way
            assert health_time(one) < 1
            started = time.perf_counter()
            assert modern(one.url, "tools/list", key=DEMO_KEY_B).status_code == 200
            assert time.perf_counter() - started < 1
            answered = [f.result() for f in lists]
    refused = [a for a in answered if a.status_code == 429]
    assert len(refused) + sum(a.status_code == 200 for a in answered) == len(names)
    assert len(refused) >= len(names) // 2, [a.status_code for a in answered]  # 6 at once (half of 12)
    assert all(a.headers["Retry-After"] and "waiting for ColabHive to check" in a.text for a in refused)


def lists_during_a_check(server):
    """Twelve tool lists at once from a single-tenant ``server`` whose key's check waits for a slow
    gateway: /healthz is answered meanwhile (one probe: a second one would find the check over). The
    lists' answers."""
    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        lists = [pool.submit(modern, server.url, "tools/list", key=None) for _ in range(12)]
        time.sleep(1)  # the check is under way
        assert health_time(server, probes=1) < 2
        return [f.result() for f in lists]


def test_a_single_tenant_servers_first_check_on_a_slow_gateway_leaves_threads_for_health_checks(gateway_sandbox,
                                                                                               sandbox):
    """The configured key's first check waits 8 s for the gateway: the requests waiting for it hold
    the worker's places for long requests (4 of 8 threads), the rest are refused at once (503),
    /healthz is answered meanwhile, and once the check is done every request is served."""
    sandbox.faults.add(route="manifest", kind="latency", seconds=8.0)
    with hosted_server(gateway_sandbox.url, "--single-tenant", "--http-workers", "1", http_threads=8,
                api_key=DEMO_KEY_B) as one:
        answered = lists_during_a_check(one)
        statuses = sorted(a.status_code for a in answered)
        assert set(statuses) == {200, 503} and statuses.count(200) <= 4, statuses
        assert all(a.headers["Retry-After"] for a in answered if a.status_code == 503)
        assert modern(one.url, "tools/list", key=None).status_code == 200


def test_a_single_tenant_servers_check_after_a_refusal_on_a_slow_gateway_leaves_threads_for_health_checks(
        gateway_sandbox, sandbox):
    """The gateway refused the configured key, whose tool list the server still holds; once the refusal
    is old enough to ask again, the gateway takes 8 s to answer: the requests waiting for that answer
    hold the worker's places for long requests (4 of 8 threads), the rest are refused at once (503),
    and /healthz is answered meanwhile."""
    key = "hive_single_refused_01"
    sandbox.add_key(key)
    with hosted_server(gateway_sandbox.url, "--single-tenant", "--http-workers", "1", http_threads=8, api_key=key,
                manifest_ttl=1, rejected_key_ttl=1) as one:
        assert modern(one.url, "tools/list", key=None).status_code == 200
        sandbox.reset()  # the gateway no longer knows the key
        time.sleep(1.2)  # past the TTL: the copy is served while the gateway is asked behind it, which refuses
        assert wait_until(lambda: modern(one.url, "tools/list", key=None).status_code == 401, timeout=15)
        time.sleep(1.2)
        sandbox.faults.add(route="manifest", kind="latency", seconds=8.0)
        answered = lists_during_a_check(one)
        statuses = sorted(a.status_code for a in answered)
        assert set(statuses) == {401, 503} and statuses.count(401) <= 4, statuses


@pytest.mark.parametrize("threads, served", [(None, "all"), (64, "the budget")])
def test_many_long_calls_leave_health_checks_fast(gateway_sandbox, sandbox, threads, served):
    """300 concurrent 4 s calls from 10 keys: at the defaults every one is served; with 64 threads a
    worker, what the budget (48 each) cannot take is refused at once. /healthz stays fast either way."""
    names = [f"hive_caller_{i}" for i in range(10)]
    for name in names:
        sandbox.add_key(name)
    with hosted_server(gateway_sandbox.url, **({"http_threads": threads} if threads else {})) as instance:
        with concurrent.futures.ThreadPoolExecutor(300) as pool:
            started = time.monotonic()
            calls = [pool.submit(call, instance, names[i % 10], 4) for i in range(300)]
            time.sleep(1.5)
            assert health_time(instance) < 1
            answered = [c.result() for c in calls]
        refused = [a for a in answered if a.status_code in (429, 503)]  # a key's share, or the worker's places
        ok = [a for a in answered if a.status_code == 200]
        assert len(ok) + len(refused) == 300, sorted((a.status_code, a.text[:300]) for a in answered if a.status_code not in (200, 503))
        if served == "all":
            assert len(ok) == 300
        else:
            assert 0 < len(ok) <= 2 * 48 and all(a.headers["Retry-After"] for a in refused)
        assert time.monotonic() - started < 20  # nothing waited in a queue behind the others
