"""Keys the instance has not seen, on the open internet (real gunicorn, real sandbox): made-up keys
lock out nobody but their sender, a key is admitted only on the gateway's yes, keys come back
after a restart without waiting, and a request that needs no tenant never waits for the gateway.

Clients of different addresses are loopback sources (127.0.0.2, 127.0.0.3, …): a loopback peer
that names no other client is the client, as a direct one on the internet would be."""

import concurrent.futures
import contextlib
import json
import queue
import re
import socket
import threading
import time

import pytest
import requests

from colabhive_mcp.keys import ApiKey
from colabhive_mcp.sandbox import DEMO_KEY, DEMO_KEY_B

from ..support.http_server import client, log_events
from ..support.http_server import hosted_server
from ..support.http_client import ACCEPT_BOTH, MODERN, initialize, post

pytestmark = pytest.mark.slow


def tools_list(session, url, key):
    """A 2026 tools/list from ``session``'s address."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}}}
    return session.post(url, data=json.dumps(body), timeout=60, headers={
        "Accept": ACCEPT_BOTH, "Content-Type": "application/json", "Authorization": f"Bearer {key}",
        "MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/list"})


def test_a_flood_of_made_up_keys_locks_out_only_its_own_address(gateway_sandbox, sandbox, journal):
    """320 made-up keys from one address in a second or two: after its budget of rejected keys it is
    refused (429) without the gateway being asked; a real key nobody has seen, from another address,
    meanwhile and after, is served."""
    sandbox.add_key("hive_newcomer_during_the_flood")
    sandbox.add_key("hive_newcomer_after_the_flood")
    attacker, newcomer = client("127.0.0.2"), client("127.0.0.3")
    with hosted_server(gateway_sandbox.url, "--http-workers", "2") as two:
        with concurrent.futures.ThreadPoolExecutor(32) as pool:
            flood = [pool.submit(tools_list, attacker, two.url, f"hive_made_up_{i:04d}") for i in range(320)]
            during = tools_list(newcomer, two.url, "hive_newcomer_during_the_flood")
            statuses = [f.result().status_code for f in flood]
        assert during.status_code == 200, during.text
        assert set(statuses) == {401, 429} and statuses.count(401) <= 20 + 2 * 8, statuses  # the budget, and the checks already under way
        refused = next(f.result() for f in flood if f.result().status_code == 429)
        assert 0 < int(refused.headers["Retry-After"]) <= 60 and "rejected in the last minute" in refused.text
        checked = [e for e in journal("manifest") if e["status"] == 401]
        assert len(checked) == statuses.count(401)  # the flood's keys past the budget were never checked
        assert tools_list(newcomer, two.url, "hive_newcomer_after_the_flood").status_code == 200
        assert tools_list(attacker, two.url, "hive_made_up_more").status_code == 429  # still refused, unasked


def test_made_up_keys_from_the_addresses_of_one_ipv6_site_count_against_the_site(gateway_sandbox, sandbox, journal):
    """Behind the proxy (the client named by X-Forwarded-For): each /64 of a /48 sends its rejected keys'
    budget, and past four of them the site's further /64s are refused unasked; a key from another site,
    real or not, is checked as ever."""
    sandbox.add_key("hive_from_another_site_0123")

    def from_(address, key):
        proxy = client("127.0.0.5")
        proxy.headers["X-Forwarded-For"] = address  # as nginx appends the client it serves
        return tools_list(proxy, two.url, key)

    with hosted_server(gateway_sandbox.url, "--http-workers", "2", rejected_keys_per_minute=2) as two:
        statuses = [from_(f"2001:db8:7:{i:x}::1", f"hive_made_up_v6_{i}_{j}").status_code for i in range(6)
                    for j in range(2)]
        assert statuses == [401] * 8 + [429] * 4
        refused = from_("2001:db8:7:ff::1", "hive_made_up_v6_more")
        assert refused.status_code == 429 and "Your network (its IPv6 /48)" in refused.text
        assert len([e for e in journal("manifest") if e["status"] == 401]) == 8  # the rest never asked
        assert from_("2001:db8:8::1", "hive_from_another_site_0123").status_code == 200
        assert from_("2001:db8:8::2", "hive_made_up_elsewhere").status_code == 401


def test_two_hundred_real_keys_arriving_at_once_are_all_served(gateway_sandbox, sandbox):
    """Clients returning together (after a restart, behind one address), five requests a key at once:
    every one is served."""
    keys = [f"hive_returning_{i:03d}_0123456789" for i in range(200)]
    for key in keys:
        sandbox.add_key(key)
    everyone = client("127.0.0.4")
    with hosted_server(gateway_sandbox.url, "--http-workers", "2") as two:
        with concurrent.futures.ThreadPoolExecutor(64) as pool:
            answers = list(pool.map(lambda key: tools_list(everyone, two.url, key), keys * 5))
    assert [a.status_code for a in answers] == [200] * 1000, sorted({(a.status_code, a.text[:200]) for a in answers})


def test_keys_the_gateway_accepted_come_back_after_a_restart_without_the_budget(gateway_sandbox, sandbox, tmp_path):
    """The instance remembers the keys the gateway accepted (their hashes, on disk): after a restart
    they are served with the budget for new keys spent, and a key never seen waits for it."""
    keys = [f"hive_regular_{i:02d}_0123456789" for i in range(6)]
    for key in keys:
        sandbox.add_key(key)
    sandbox.add_key("hive_first_time_0123456789")
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    with hosted_server(gateway_sandbox.url, "--http-workers", "2", runtime_dir=runtime) as first:
        assert [tools_list(requests, first.url, key).status_code for key in keys] == [200] * 6
    with hosted_server(gateway_sandbox.url, "--http-workers", "2", runtime_dir=runtime, cold_fetches_per_minute=1) as again:
        assert tools_list(requests, again.url, "hive_junk_spends_the_budget").status_code == 401
        assert [tools_list(requests, again.url, key).status_code for key in keys] == [200] * 6
        first_time = tools_list(requests, again.url, "hive_first_time_0123456789")
        assert first_time.status_code == 503 and "too many new API keys" in first_time.text


@pytest.mark.parametrize("fault", [{"kind": "status", "status": 503}, {"kind": "rate_limit", "retry_after": 7}])
def test_a_key_is_admitted_only_when_the_gateway_says_yes(gateway_sandbox, sandbox, fault):
    """While the gateway fails (or limits) its manifest route, a key it never accepted gets 503 with
    Retry-After: no tool list, no stream, no place in the pool. A key it accepted is still served."""
    with hosted_server(gateway_sandbox.url, "--http-workers", "2") as two:
        assert tools_list(requests, two.url, DEMO_KEY).status_code == 200
        sandbox.faults.add(route="manifest", count=None, **fault)
        try:
            unknown = tools_list(requests, two.url, "hive_junk_while_it_fails")
            assert unknown.status_code == 503, unknown.text
            assert int(unknown.headers["Retry-After"]) == fault.get("retry_after", 5)
            assert "cannot check this API key" in unknown.json()["error"]["message"]
            listen = post(two.url, {"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen", "params": {
                "notifications": {"toolsListChanged": True}, "_meta": {
                    "io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}}},
                key="hive_junk_while_it_fails", **{"MCP-Protocol-Version": MODERN, "Mcp-Method": "subscriptions/listen"})
            assert listen.status_code == 503
            assert tools_list(requests, two.url, DEMO_KEY).status_code == 200  # its last good manifest
        finally:
            sandbox.faults.clear()
        assert tools_list(requests, two.url, "hive_junk_while_it_fails").status_code == 401
        added = {e["tenant"] for e in log_events(two.stderr(), "pool.tenant_added")}
        assert ApiKey.of(DEMO_KEY).log_id in added  # the records are there to read
        assert ApiKey.of("hive_junk_while_it_fails").log_id not in added  # never a tenant, answered or not


def test_ping_notifications_and_delete_never_wait_for_the_gateway(gateway_sandbox, sandbox):
    """An established session's ping, notifications, malformed messages and DELETE are answered at
    once while the gateway's manifest route hangs, though the worker no longer holds the key's tenant."""
    with hosted_server(gateway_sandbox.url, "--http-workers", "1", pool_size=1, manifest_ttl=0) as one:
        session = initialize(one.url)
        assert post(one.url, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
            key=DEMO_KEY_B).status_code == 200  # the pool of one now holds the other key
        sandbox.faults.add(route="manifest", kind="hang", count=None, seconds=20)
        try:
            started = time.monotonic()
            for i in range(3):
                ping = post(one.url, {"jsonrpc": "2.0", "id": i, "method": "ping"}, **{"Mcp-Session-Id": session})
                note = post(one.url, {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {
                    "requestId": 99}}, **{"Mcp-Session-Id": session})
                assert (ping.status_code, ping.json()["result"], note.status_code) == (200, {}, 202)
                odd = post(one.url, {"jsonrpc": "2.0", "id": 7}, **{"Mcp-Session-Id": session})  # no method
                assert (odd.status_code, odd.json()["error"]["code"]) == (400, -32600)
            assert requests.delete(one.url, timeout=30, headers={
                "Authorization": f"Bearer {DEMO_KEY}", "Mcp-Session-Id": session}).status_code == 204
            assert time.monotonic() - started < 2
        finally:
            sandbox.faults.clear()


def test_the_2024_sse_transport_answers_ping_and_notifications_without_the_gateway(gateway_sandbox, sandbox):
    """On 2024-11-05's HTTP+SSE too, an open session's ping is answered on its stream at once and its
    notifications are taken, while the manifest route hangs and the worker no longer holds the key's
    tenant (they waited for the gateway, 20 s and more, behind the session's calls)."""
    with hosted_server(gateway_sandbox.url, "--http-workers", "1", pool_size=1, manifest_ttl=0) as one:
        headers = {"Authorization": f"Bearer {DEMO_KEY}", "Accept": "text/event-stream"}
        with requests.get(one.root + "/sse", headers=headers, stream=True, timeout=60) as stream:
            lines = stream.iter_lines(decode_unicode=True)
            assert next(lines) == "event: endpoint"
            messages = one.root + next(lines).removeprefix("data: ")
            answers = queue.Queue()
            threading.Thread(target=_read_answers, args=(lines, answers), daemon=True).start()
            assert post(messages, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "old", "version": "1"}}}
                        ).status_code == 202
            assert answers.get(timeout=30)["id"] == 0
            assert post(messages, {"jsonrpc": "2.0", "method": "notifications/initialized"}).status_code == 202
            assert post(one.url, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
                key=DEMO_KEY_B).status_code == 200  # the pool of one now holds the other key
            sandbox.faults.add(route="manifest", kind="hang", count=None, seconds=20)
            try:
                for i in range(1, 4):
                    assert post(messages, {"jsonrpc": "2.0", "id": i, "method": "ping"}).status_code == 202
                    assert post(messages, {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {
                        "requestId": 99}}).status_code == 202
                    assert answers.get(timeout=10) == {"jsonrpc": "2.0", "id": i, "result": {}}
            finally:
                sandbox.faults.clear()


def _read_answers(lines, answers):
    """Put each message of an SSE stream in ``answers``, until the stream closes (the test's end)."""
    with contextlib.suppress(Exception):
        for line in lines:
            if line.startswith("data: "):
                answers.put(json.loads(line[6:]))


def test_a_malformed_chunked_body_is_a_400(hosted):
    with socket.create_connection(("127.0.0.1", hosted.port), timeout=30) as raw:
        raw.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                    b"Accept: application/json, text/event-stream\r\nAuthorization: Bearer " + DEMO_KEY.encode() +
                    b"\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n")
        answer = raw.recv(65536)
        while b"\r\n\r\n" not in answer or len(answer.partition(b"\r\n\r\n")[2]) < int(
                re.search(rb"Content-Length: (\d+)", answer)[1]):
            more = raw.recv(65536)
            assert more, answer  # the server closed before its answer was whole
            answer += more
    assert answer.startswith(b"HTTP/1.1 400"), answer[:300]
    assert b'"code":-32700' in answer


def test_credentials_have_one_spelling(hosted):
    """The key is a bearer token (the scheme in any case, then spaces) or X-API-Key, of a key's shape;
    any other form, which nginx's site would not bucket as that key, is refused."""
    def status(**headers):
        return requests.post(hosted.url, data=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}),
            timeout=60, headers={"Accept": ACCEPT_BOTH, "Content-Type": "application/json", **headers}).status_code

    assert status(Authorization=f"bEaReR {DEMO_KEY}") == 200
    assert status(Authorization=f"Bearer    {DEMO_KEY}") == 200
    assert status(**{"X-API-Key": DEMO_KEY}) == 200
    assert status(Authorization=f"Bearer {DEMO_KEY}", **{"X-API-Key": DEMO_KEY}) == 200
    refused = [status(Authorization="Basic dXNlcjpwYXNz", **{"X-API-Key": DEMO_KEY}),
               status(Authorization=f"Bearer {DEMO_KEY}", **{"X-API-Key": DEMO_KEY + "x"}),
               status(Authorization="Bearer " + "k" * 256), status(Authorization=f"Bearer {DEMO_KEY} extra"),
               status(Authorization=f"Bearer\t{DEMO_KEY}"), status(**{"X-API-Key": "short"}),
               status(**{"X-API-Key": DEMO_KEY + "\u00e9".encode().decode("latin-1")}), status(Authorization="Bearer")]
    assert refused == [401] * len(refused)
