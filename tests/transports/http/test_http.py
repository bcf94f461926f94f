"""The hosted HTTP server under real gunicorn: both eras, sessions, tenancy and the edge checks."""

import json
import os
import signal
import socket
import threading
import time
from pathlib import Path

import anyio
import httpx2
import pytest
import requests
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from colabhive_mcp.sandbox import DEMO_KEY, DEMO_KEY_B

from ...support.http_client import ACCEPT_BOTH, MODERN, initialize, modern, post, rpc, sdk_session
from ...support.http_server import HttpServer, rpc_messages
from ...support.waiting import wait_until

pytestmark = pytest.mark.slow

# -- the official SDK client ---------------------------------------------------------------------

@pytest.mark.parametrize("mode,version", [("legacy", "2025-11-25"), ("auto", MODERN)])
@pytest.mark.real_clients
def test_official_sdk_with_two_keys_sees_only_each_keys_tools(hosted, mode, version):
    for key, own, other in ((DEMO_KEY, "alpha-classifier", "beta-sentiment"),
                            (DEMO_KEY_B, "beta-sentiment", "alpha-classifier")):
        negotiated, names, echo, slow, progress, failed = anyio.run(sdk_session, hosted.url, key, mode)
        assert negotiated == version
        assert own in names and other not in names and "hive-chat" in names
        assert echo == f"hello {mode}" and "report ready" in slow and failed
        assert len(progress) >= 3 and progress == sorted(progress)  # a 5-second job


async def sdk_with_key(url, key, mode):
    transport = streamable_http_client(url, http_client=httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {key}"}, timeout=30))
    async with Client(transport, mode=mode, read_timeout_seconds=30) as client:
        await client.list_tools()


@pytest.mark.parametrize("mode", ["legacy", "auto"])
@pytest.mark.real_clients
def test_the_official_sdk_with_an_unknown_key_is_told_the_key_was_rejected(hosted, mode):
    with pytest.raises(Exception) as caught:
        anyio.run(sdk_with_key, hosted.url, "hive_nobody_knows_this_key", mode)
    errors, nested = [], [caught.value]
    while nested:  # anyio nests the client's error in exception groups
        errors.append(nested.pop())
        nested.extend(getattr(errors[-1], "exceptions", []))
    assert any("rejected the API key (401" in str(e) for e in errors), errors
    assert not any("Internal error" in str(e) for e in errors)


def test_an_unknown_key_is_401_invalid_token_in_both_eras_and_the_gateway_is_asked_once_per_worker(hosted, journal):
    key = "hive_unknown_0123456789"
    answers = [post(hosted.url, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}, key)
        for _ in range(5)]
    answers += [modern(hosted.url, "tools/list", key=key) for _ in range(5)]
    answers += [modern(hosted.url, "server/discover", key=key), rpc(hosted.url, "ping", key=key, session="s1.x.y")]
    for answer in answers:
        assert answer.status_code == 401, answer.text
        assert answer.headers["WWW-Authenticate"] == 'Bearer error="invalid_token"'
        assert "Mcp-Session-Id" not in answer.headers
        error = answer.json()["error"]
        assert error["code"] == -31401 and "rejected the API key (401" in error["message"], error
        assert key not in answer.text
    assert len(journal("manifest")) <= 2  # one verdict per worker, then remembered


def test_a_key_revoked_mid_session_gets_401_from_then_on(hosted, sandbox, journal):
    key = "hive_revoked_mid_session_01"
    sandbox.add_key(key)
    session = initialize(hosted.url, key)
    assert rpc(hosted.url, "tools/call", {"name": "echo", "arguments": {"text": "ok"}}, key, session).status_code == 200
    sandbox.reset()  # the gateway no longer knows the key
    for _ in range(6):  # whichever worker: it asks the gateway, or remembers the gateway's answer
        call = rpc(hosted.url, "tools/call", {"name": "echo", "arguments": {"text": "no"}}, key, session)
        assert call.status_code == 401 and call.json()["error"]["code"] == -31401, call.text
        assert call.headers["WWW-Authenticate"] == 'Bearer error="invalid_token"'
    assert len(journal("invoke")) <= 2  # at most once per worker
    time.sleep(1.2)  # a worker looks at the instance's rejected keys at least once a second
    for _ in range(6):  # no gateway call is involved: every worker knows the key is gone
        ping = rpc(hosted.url, "ping", key=key, session=session)
        assert ping.status_code == 401 and ping.headers["WWW-Authenticate"] == 'Bearer error="invalid_token"'


def test_no_key_is_401_with_a_json_rpc_body(hosted):
    response = post(hosted.url, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}, key=None)
    assert response.status_code == 401 and response.headers["WWW-Authenticate"].startswith("Bearer")
    assert response.json()["error"]["code"] == -32600 and "API key" in response.json()["error"]["message"]
    assert post(hosted.url, {"jsonrpc": "2.0", "id": 1, "method": "ping"}, key=None,
                **{"X-API-Key": DEMO_KEY}).status_code in (400,)  # X-API-Key works (then: no session)


# -- sessions ------------------------------------------------------------------------------------

def test_a_session_is_served_by_any_process_that_shares_the_secret(hosted, gateway_sandbox):
    other = HttpServer(gateway_sandbox.url, "--http-workers", "1")
    try:
        session = initialize(hosted.url)
        for i, url in enumerate([other.url, hosted.url, other.url, hosted.url]):
            listed = rpc(url, "tools/list", session=session, id_=10 + i, **{"MCP-Protocol-Version": "2025-11-25"})
            assert listed.status_code == 200 and listed.json()["result"]["tools"]
            called = rpc(url, "tools/call", {"name": "echo", "arguments": {"text": str(i)}}, session=session, id_=20 + i)
            assert called.json()["result"]["content"][0]["text"] == str(i)
    finally:
        other.stop()


def test_a_session_is_bound_to_its_key_and_its_secret(hosted, gateway_sandbox):
    session = initialize(hosted.url)
    assert rpc(hosted.url, "tools/list", key=DEMO_KEY_B, session=session).status_code == 404
    stranger = HttpServer(gateway_sandbox.url, env={"COLABHIVE_SESSION_SECRET": "another-secret-" + "x" * 32})
    try:
        assert rpc(stranger.url, "tools/list", session=session).status_code == 404
    finally:
        stranger.stop()
    forged = session[:-4] + ("AAAA" if not session.endswith("AAAA") else "BBBB")
    assert rpc(hosted.url, "tools/list", session=forged).status_code == 404


def test_session_header_rules(hosted):
    assert rpc(hosted.url, "tools/list").status_code == 400  # no session
    assert rpc(hosted.url, "tools/list", session="s1.bogus.token").status_code == 404
    session = initialize(hosted.url)
    bad = rpc(hosted.url, "tools/list", session=session, **{"MCP-Protocol-Version": "1999-01-01"})
    assert bad.status_code == 400
    assert rpc(hosted.url, "ping", session=session).json()["result"] == {}  # no version header: fine


def test_a_2025_03_26_client_may_batch(hosted):
    session = initialize(hosted.url, version="2025-03-26")
    batch = [{"jsonrpc": "2.0", "id": "a", "method": "ping"}, {"jsonrpc": "2.0", "id": "b", "method": "tools/list"}]
    answer = post(hosted.url, batch, **{"Mcp-Session-Id": session})
    assert answer.status_code == 200 and [a["id"] for a in answer.json()] == ["a", "b"]


# -- content negotiation and streaming ----------------------------------------------------------

def test_json_only_and_sse_only_clients_are_served(hosted):
    session = initialize(hosted.url)
    call = {"name": "batch-report", "arguments": {"seconds": 2}, "_meta": {"progressToken": "t"}}
    json_only = rpc(hosted.url, "tools/call", call, session=session, accept="application/json")
    assert json_only.headers["Content-Type"] == "application/json" and "report ready" in json_only.text
    sse_only = rpc(hosted.url, "ping", session=session, accept="text/event-stream")
    assert sse_only.headers["Content-Type"].startswith("text/event-stream")
    assert rpc_messages(sse_only)[-1]["result"] == {}
    assert rpc(hosted.url, "ping", session=session, accept="text/html").status_code == 406


def test_progress_streams_as_sse_that_proxies_do_not_buffer(hosted):
    session = initialize(hosted.url)
    response = rpc(hosted.url, "tools/call", {"name": "batch-report", "arguments": {"seconds": 3},
                                             "_meta": {"progressToken": "tok"}}, session=session)
    assert response.headers["Content-Type"].startswith("text/event-stream")
    assert response.headers["Cache-Control"] == "no-cache" and response.headers["X-Accel-Buffering"] == "no"
    messages = rpc_messages(response)
    progress = [m["params"]["progress"] for m in messages if m.get("method") == "notifications/progress"]
    assert len(progress) >= 2 and progress == sorted(progress)
    assert "report ready" in messages[-1]["result"]["content"][0]["text"]
    plain = rpc(hosted.url, "tools/call", {"name": "echo", "arguments": {"text": "x"}}, session=session)
    assert plain.headers["Content-Type"] == "application/json"  # no token: no SSE


def test_keep_alive_comments_flow_while_nothing_happens(hosted):
    session = initialize(hosted.url)
    response = rpc(hosted.url, "tools/call", {"name": "batch-report", "arguments": {"seconds": 4},
                                             "_meta": {"progressToken": 1}}, session=session)
    assert ": keep-alive" in response.text


@pytest.mark.parametrize("era", ["2026", "handshake"])
def test_a_2026_client_that_disconnects_mid_stream_stops_the_polling_and_a_legacy_one_does_not(
        hosted, sandbox, own_trace, era):
    """Closing its stream is a 2026 client's cancel; in the handshake era a disconnect is not (the
    client cancels with notifications/cancelled): the work is kept for a retry to attach to."""
    meta = {"progressToken": 9}
    if era == "2026":
        meta.update({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                     "io.modelcontextprotocol/clientCapabilities": {}})
        routing = "MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: batch-report\r\n"
    else:
        routing = f"Mcp-Session-Id: {initialize(hosted.url)}\r\n"
    body = json.dumps({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                       "params": {"name": "batch-report", "arguments": {"seconds": 60}, "_meta": meta}}).encode()
    with socket.create_connection(("127.0.0.1", hosted.port)) as sock:
        sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Accept: application/json, text/event-stream\r\n"
                     + f"Authorization: Bearer {DEMO_KEY}\r\n{routing}"
                       f"traceparent: {own_trace.parent}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
        assert b"notifications/progress" in _read_until(sock, b"notifications/progress")
    left = time.time()
    if era == "handshake":
        time.sleep(3)  # past the moment a client that hung up may take to say why
        assert not own_trace.journal("cancel")
        return
    cancels = wait_until(lambda: own_trace.journal("cancel"), timeout=10)
    assert cancels and cancels[0]["t"] - left < 3
    polls = len(own_trace.journal("poll"))
    time.sleep(1)
    assert len(own_trace.journal("poll")) == polls  # nobody polls for a client that left


def _read_until(sock, marker, limit=1 << 20):
    data = b""
    sock.settimeout(20)
    while marker not in data and len(data) < limit:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


# -- 2026-07-28 ------------------------------------------------------------------------------------

def test_modern_requests_are_stateless_and_headers_must_match(hosted):
    listed = modern(hosted.url, "tools/list")
    assert listed.status_code == 200 and listed.json()["result"]["cacheScope"] == "private"
    assert "Mcp-Session-Id" not in listed.headers
    called = modern(hosted.url, "tools/call", {"name": "echo", "arguments": {"text": "é"}})
    assert called.json()["result"]["content"][0]["text"] == "é"
    wrong_method = modern(hosted.url, "tools/list", **{"Mcp-Method": "tools/call"})
    assert wrong_method.status_code == 400 and wrong_method.json()["error"]["code"] == -32020
    wrong_name = modern(hosted.url, "tools/call", {"name": "echo", "arguments": {"text": "x"}}, **{"Mcp-Name": "hive-chat"})
    assert wrong_name.status_code == 400 and wrong_name.json()["error"]["code"] == -32020
    encoded = modern(hosted.url, "tools/call", {"name": "echo", "arguments": {"text": "x"}},
                     **{"Mcp-Name": "=?base64?ZWNobw==?="})
    assert encoded.status_code == 200
    no_version = modern(hosted.url, "tools/list", **{"MCP-Protocol-Version": ""})
    assert no_version.status_code == 400
    unknown = modern(hosted.url, "resources/list")
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == -32601


def test_modern_get_and_delete_are_405(hosted):
    headers = {"Authorization": f"Bearer {DEMO_KEY}", "Accept": "text/event-stream"}
    assert requests.get(hosted.url, headers=headers, timeout=10).status_code == 405
    assert requests.delete(hosted.url, headers=headers, timeout=10).status_code == 405


# -- legacy GET stream, DELETE, and the 2024-11-05 transport ------------------------------------

def test_hosted_mode_offers_no_get_stream_but_deletes_sessions(hosted):
    session = initialize(hosted.url)
    headers = {"Authorization": f"Bearer {DEMO_KEY}", "Accept": "text/event-stream", "Mcp-Session-Id": session}
    assert requests.get(hosted.url, headers=headers, timeout=10).status_code == 405


@pytest.fixture(scope="module")
def one_worker(gateway_sandbox):
    """A hosted server with a single worker process (what per-process state needs)."""
    server = HttpServer(gateway_sandbox.url, "--http-workers", "1")
    yield server
    server.stop()


def test_delete_ends_a_session(one_worker):
    session = initialize(one_worker.url)
    headers = {"Authorization": f"Bearer {DEMO_KEY}", "Mcp-Session-Id": session}
    assert requests.delete(one_worker.url, headers=headers, timeout=10).status_code == 204
    assert rpc(one_worker.url, "tools/list", session=session).status_code == 404


def test_the_2024_11_05_sse_transport(one_worker):
    hosted = one_worker
    headers = {"Authorization": f"Bearer {DEMO_KEY}", "Accept": "text/event-stream"}
    with requests.get(hosted.root + "/sse", headers=headers, stream=True, timeout=30) as stream:
        lines = stream.iter_lines(decode_unicode=True)
        assert next(lines) == "event: endpoint"
        endpoint = next(lines).removeprefix("data: ")
        assert endpoint.startswith("/messages?session_id=")
        messages = hosted.root + endpoint

        def send(body):
            response = post(messages, body)
            assert response.status_code == 202

        def receive():
            for line in lines:
                if line.startswith("data: "):
                    return json.loads(line[6:])

        send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "old", "version": "1"}}})
        assert receive()["result"]["protocolVersion"] == "2024-11-05"
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "old"}}})
        assert receive()["result"]["content"][0]["text"] == "old"
        assert post(messages, {"jsonrpc": "2.0", "id": 3, "method": "ping"}, key=DEMO_KEY_B).status_code == 404
    unknown = post(hosted.root + "/messages?session_id=nope", {"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert unknown.status_code == 404 and "--http-workers 1" in unknown.json()["error"]["message"]  # what to do


def test_a_key_revoked_mid_session_on_the_2024_11_05_transport_is_told_so(one_worker, sandbox):
    """As on Streamable HTTP: "key rejected" (-31401), not an internal error with a traceback."""
    key = "hive_revoked_on_the_sse_stream_01"
    sandbox.add_key(key)
    mark = len(one_worker.lines)
    with requests.get(one_worker.root + "/sse", headers={"Authorization": f"Bearer {key}",
                                                          "Accept": "text/event-stream"}, stream=True, timeout=30) as sse:
        lines = sse.iter_lines(decode_unicode=True)
        assert next(lines) == "event: endpoint"
        messages = one_worker.root + next(lines).removeprefix("data: ")
        answers = (json.loads(line[6:]) for line in lines if line.startswith("data: "))
        assert post(messages, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "old", "version": "1"}}},
            key).status_code == 202
        assert next(answers)["result"]["protocolVersion"] == "2024-11-05"
        sandbox.reset()  # the gateway no longer knows the key
        for id_ in (5, 6):  # the gateway says so; then the server remembers it
            assert post(messages, {"jsonrpc": "2.0", "id": id_, "method": "tools/call", "params": {
                "name": "echo", "arguments": {"text": "no"}}}, key).status_code == 202
            answer = next(answers)
            assert answer["id"] == id_ and answer["error"]["code"] == -31401, answer
        batch = [{"jsonrpc": "2.0", "id": 7, "method": "tools/list"}, {"jsonrpc": "2.0", "method": "notifications/x"},
                 {"jsonrpc": "2.0", "id": 8, "method": "ping"}]
        assert post(messages, batch, key).status_code == 202
        answer = next(answers)  # each request of a batch is told, under its id (it used to get no answer at all)
        assert [(a["id"], a["error"]["code"]) for a in answer] == [(7, -31401), (8, -31401)], answer
    assert "http.internal_error" not in "\n".join(one_worker.lines[mark:])


# -- edge checks -----------------------------------------------------------------------------------

def test_dns_rebinding_is_refused(hosted):
    body = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    foreign = post(hosted.url, body, Origin="http://evil.example.com")
    assert foreign.status_code == 403 and foreign.json()["id"] is None  # an error with no id: the body is not read
    unknown_host = post(hosted.url, body, Host="evil.example.com")
    assert unknown_host.status_code == 421 and unknown_host.json()["id"] is None
    assert post(hosted.url, body, Origin=f"http://127.0.0.1:{hosted.port}").status_code != 403


def test_bad_bodies(hosted):
    too_big = post(hosted.url, b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"' + b"x" * 5_000_000 + b'"}}')
    assert too_big.status_code == 413
    not_json = post(hosted.url, b"{nope")
    assert not_json.status_code == 400 and not_json.json()["error"]["code"] == -32700
    wrong_type = requests.post(hosted.url, data="x", headers={"Content-Type": "text/plain", "Accept": ACCEPT_BOTH,
                                                                "Authorization": f"Bearer {DEMO_KEY}"}, timeout=10)
    assert wrong_type.status_code == 415
    assert requests.put(hosted.url, timeout=10).status_code == 405
    assert requests.get(hosted.root + "/nothing-here", timeout=10).status_code == 404


@pytest.mark.parametrize("how", ["serve", "plain gunicorn"])
def test_a_key_in_the_environment_does_not_make_hosted_mode_single_tenant(gateway_sandbox, how):
    server = HttpServer(gateway_sandbox.url, env={"COLABHIVE_API_KEY": DEMO_KEY}, gunicorn_conf=how == "plain gunicorn")
    try:
        response = post(server.url, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}, key=None)
        assert response.status_code == 401
    finally:
        log = server.stop()
    warned = [json.loads(line) for line in log.splitlines() if "http.api_key_ignored" in line]
    assert len(warned) == 1 and "--single-tenant" in warned[0]["hint"], log  # once, as JSON, with its hint
    assert DEMO_KEY not in log


def test_single_tenant_mode_uses_the_configured_key_and_offers_a_get_stream(gateway_sandbox):
    server = HttpServer(gateway_sandbox.url, "--single-tenant", "--http-workers", "1",
                        env={"COLABHIVE_API_KEY": DEMO_KEY_B})
    try:
        session = initialize(server.url, key=None)
        names = {t["name"] for t in rpc(server.url, "tools/list", key=None, session=session).json()["result"]["tools"]}
        assert "beta-sentiment" in names
        headers = {"Accept": "text/event-stream", "Mcp-Session-Id": session}
        with requests.get(server.url, headers=headers, stream=True, timeout=10) as stream:
            assert stream.status_code == 200 and stream.headers["Content-Type"].startswith("text/event-stream")
    finally:
        server.stop()


def test_a_single_tenant_key_refused_then_accepted_again_is_served_again(gateway_sandbox, sandbox):
    """The gateway refuses the configured key, then accepts it again (a key restored, a passing fault
    of the gateway): the session's pings are refused while the refusal is the gateway's last word, and
    served again once a call finds the key accepted, with no restart."""
    key = "hive_single_restored_01"
    sandbox.add_key(key)
    server = HttpServer(gateway_sandbox.url, "--single-tenant", "--http-workers", "1", env={"COLABHIVE_API_KEY": key})

    def echo():
        return rpc_messages(rpc(server.url, "tools/call", {"name": "echo", "arguments": {"text": "hi"}}, key=None,
                                session=session))[-1]

    try:
        session = initialize(server.url, key=None)
        assert "result" in echo()
        sandbox.reset()  # the gateway no longer knows the key
        assert echo()["error"]["code"] == -31401
        assert rpc(server.url, "ping", key=None, session=session).status_code == 401
        sandbox.add_key(key)
        assert "result" in echo()
        assert rpc(server.url, "ping", key=None, session=session).status_code == 200
    finally:
        server.stop()


def test_single_tenant_refuses_a_public_address(gateway_sandbox):
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "colabhive_mcp", "serve", "--single-tenant", "--bind",
                             "0.0.0.0:8765", "--api-key", DEMO_KEY], capture_output=True, timeout=30)
    assert result.returncode == 2 and b"loopback" in result.stderr


def other_address():
    """An address of this machine other than loopback (``None`` when it has none)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # nothing is sent: this only picks the outgoing interface
            address = probe.getsockname()[0]
        except OSError:
            return None
    return None if address.startswith("127.") else address


def test_single_tenant_under_plain_gunicorn_bound_elsewhere_serves_only_local_direct_callers(gateway_sandbox):
    """The bind setting says loopback; gunicorn was told otherwise. The key is served to a caller on
    this machine that came directly, to nobody from elsewhere and to nothing through a proxy."""
    server = HttpServer(gateway_sandbox.url, gunicorn_conf=True, host="0.0.0.0",
                        env={"COLABHIVE_SINGLE_TENANT": "true", "COLABHIVE_API_KEY": DEMO_KEY,
                             "COLABHIVE_ALLOWED_HOSTS": "*"})
    try:
        listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": {
            "io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}}}
        headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/list"}
        assert post(server.url, listing, key=None, **headers).status_code == 200
        proxied = post(server.url, listing, key=None, **headers, **{"X-Forwarded-For": "203.0.113.9"})
        assert proxied.status_code == 403 and "alpha-classifier" not in proxied.text
        address = other_address()
        if address is not None:
            remote = post(server.url.replace("127.0.0.1", address), listing, key=None, **headers)
            assert remote.status_code == 403 and "alpha-classifier" not in remote.text
    finally:
        server.stop()


def test_hosted_mode_will_not_start_without_a_session_secret_but_local_modes_make_one_up(gateway_sandbox):
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("COLABHIVE_")}
    hosted = subprocess.run([sys.executable, "-m", "colabhive_mcp", "serve", "--api-url", gateway_sandbox.url],
                            capture_output=True, timeout=30, env=env)
    assert hosted.returncode == 2 and b"COLABHIVE_SESSION_SECRET" in hosted.stderr
    for refused in (["sandbox", "--host", "0.0.0.0"], ["serve", "--sandbox", "--bind", "0.0.0.0:8799"]):
        result = subprocess.run([sys.executable, "-m", "colabhive_mcp", *refused], capture_output=True, timeout=30,
                                env=env)
        assert result.returncode == 2 and b"loopback" in result.stderr, refused
    environ = {k: v for k, v in os.environ.items() if k != "COLABHIVE_SESSION_SECRET"}
    local = HttpServer(gateway_sandbox.url, "--single-tenant", "--http-workers", "1",
                       env={**environ, "COLABHIVE_API_KEY": DEMO_KEY, "COLABHIVE_SESSION_SECRET": ""})
    try:
        assert initialize(local.url, key=None)
    finally:
        log = local.stop()
    assert "http.session_secret_generated" in log


def test_eviction_under_a_call_in_flight_does_not_break_it(gateway_sandbox):
    server = HttpServer(gateway_sandbox.url, "--http-workers", "1", "--pool-size", "1")
    try:
        results = []
        call = threading.Thread(target=lambda: results.append(
            modern(server.url, "tools/call", {"name": "batch-report", "arguments": {"seconds": 2}}, key=DEMO_KEY)))
        call.start()
        time.sleep(0.5)
        for key in (DEMO_KEY_B, DEMO_KEY, DEMO_KEY_B):  # constant eviction while the call polls
            assert modern(server.url, "tools/list", key=key).status_code == 200
        call.join(30)
        assert "report ready" in results[0].json()["result"]["content"][0]["text"]
    finally:
        log = server.stop()
    assert "pool.tenant_evicted" in log


def test_a_modern_client_closing_a_plain_json_call_cancels_it(hosted, sandbox, own_trace):
    body = json.dumps({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {
        "name": "batch-report", "arguments": {"seconds": 60},
        "_meta": {"io.modelcontextprotocol/protocolVersion": MODERN,
                  "io.modelcontextprotocol/clientCapabilities": {}}}}).encode()
    with socket.create_connection(("127.0.0.1", hosted.port)) as sock:
        sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Accept: application/json\r\nMcp-Method: tools/call\r\nMcp-Name: batch-report\r\n"
                     + f"MCP-Protocol-Version: {MODERN}\r\nX-API-Key: {DEMO_KEY}\r\n"
                       f"traceparent: {own_trace.parent}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
        assert wait_until(lambda: own_trace.journal("poll"), timeout=15), "the call never reached the gateway"
    left = time.time()
    cancels = wait_until(lambda: own_trace.journal("cancel"), timeout=10)
    assert cancels and cancels[0]["t"] - left < 2


@pytest.mark.parametrize("how", ["gunicorn_conf", "debug"])
def test_plain_gunicorn_with_the_conf_file_and_the_debug_server(gateway_sandbox, how):
    server = HttpServer(gateway_sandbox.url, **{how: True})
    try:
        session = initialize(server.url)
        called = rpc(server.url, "tools/call", {"name": "echo", "arguments": {"text": how}}, session=session)
        assert called.json()["result"]["content"][0]["text"] == how
    finally:
        server.stop()


def sse_events(response_text):
    """(id, data) of every SSE event in a body (comments and retry-only blocks skipped)."""
    events = []
    for block in response_text.split("\n\n"):
        fields = dict(line.split(": ", 1) if ": " in line else (line.rstrip(":"), "")
                      for line in block.splitlines() if line and not line.startswith(":"))
        if "id" in fields or "data" in fields:
            events.append((fields.get("id"), fields.get("data", "")))
    return events


def test_resumable_streams_prime_hand_over_and_resume(gateway_sandbox):
    server = HttpServer(gateway_sandbox.url, "--single-tenant", "--http-workers", "1", "--sse-poll-after", "1",
                        env={"COLABHIVE_API_KEY": DEMO_KEY})
    try:
        session = initialize(server.url, key=None)
        first = rpc(server.url, "tools/call", {"name": "batch-report", "arguments": {"seconds": 3}}, key=None,
                    session=session, id_=7)
        assert first.headers["Content-Type"].startswith("text/event-stream")
        events = sse_events(first.text)
        priming_id, priming_data = events[0]
        assert priming_id and priming_data == "" and "retry: 1000" in first.text
        assert not any('"id":7' in data for _, data in events)  # handed over before the answer
        headers = {"Accept": "text/event-stream", "Mcp-Session-Id": session, "Last-Event-ID": events[-1][0]}
        resumed = requests.get(server.url, headers=headers, timeout=30)
        answers = [json.loads(data) for _, data in sse_events(resumed.text) if data]
        assert "report ready" in answers[-1]["result"]["content"][0]["text"] and answers[-1]["id"] == 7
        other = initialize(server.url, key=None)
        headers["Mcp-Session-Id"] = other
        with requests.get(server.url, headers=headers, timeout=10, stream=True) as foreign:  # not its stream:
            assert foreign.status_code == 200  # its own notification stream, and its session lives on
            assert next(foreign.iter_content(chunk_size=None)).startswith(b": open")
        assert rpc(server.url, "tools/list", {}, key=None, session=other).status_code == 200
    finally:
        server.stop()


def test_hosted_streams_are_not_resumable(hosted):
    session = initialize(hosted.url)
    response = rpc(hosted.url, "tools/call", {"name": "batch-report", "arguments": {"seconds": 1},
                                             "_meta": {"progressToken": 1}}, session=session)
    assert response.text.startswith(": open") and all(event_id is None for event_id, _ in sse_events(response.text))


def test_serve_with_the_sandbox_stops_promptly(gateway_sandbox):
    server = HttpServer(gateway_sandbox.url, "--sandbox")
    started = time.monotonic()
    server.stop()
    assert server.process.returncode == 0 and time.monotonic() - started < 20  # was 60 s: a worker hung


def test_a_worker_that_exits_leaves_the_instance_serving(gateway_sandbox):
    """A worker that exits (gunicorn's timeout, OOM, a signal) is replaced; its exit never removes the
    runtime directory its siblings and its successor open (it did: the next worker failed to boot
    and the master shut the whole server down)."""
    server = HttpServer(gateway_sandbox.url, "--sandbox")
    try:
        master = server.process.pid
        workers = lambda: set(Path(f"/proc/{master}/task/{master}/children").read_text().split())  # noqa: E731
        wait_until(lambda: len(workers()) == 2, timeout=20)
        first = workers()
        os.kill(int(min(first)), signal.SIGTERM)
        wait_until(lambda: len(workers()) == 2 and workers() != first, timeout=20)  # its successor booted
        assert server.process.poll() is None
        session = initialize(server.url, key=DEMO_KEY)
        assert rpc(server.url, "tools/list", {}, key=DEMO_KEY, session=session).status_code == 200
    finally:
        server.stop()
    assert server.process.returncode == 0, server.stderr()


def test_cors_only_for_configured_origins_and_keys_never_leak(gateway_sandbox):
    secret = "hive_secret_http_leak_check_0001"
    server = HttpServer(gateway_sandbox.url, "--http-workers", "1",
                        env={"COLABHIVE_ALLOWED_ORIGINS": "https://app.example.com", "COLABHIVE_LOG_LEVEL": "debug"})
    try:
        preflight = requests.options(server.url, headers={"Origin": "https://app.example.com",
                                                          "Access-Control-Request-Method": "POST"}, timeout=10)
        assert preflight.status_code == 204 and "Mcp-Session-Id" in preflight.headers["Access-Control-Allow-Headers"]
        assert requests.options(server.url, headers={"Origin": "https://evil.example"}, timeout=10).status_code == 403
        for unreadable in ("http://[::1", "http://[zz]"):  # no host a URL parser reads: refused, not a 500
            assert requests.options(server.url, headers={"Origin": unreadable}, timeout=10).status_code == 403
            refused = post(server.url, {"jsonrpc": "2.0", "id": 1, "method": "ping"}, key=DEMO_KEY, Origin=unreadable)
            assert refused.status_code == 403 and refused.json()["error"]["message"] == "Origin not allowed"
            assert refused.json()["id"] is None  # (the body of a refused request is not read: no id echoed)
        allowed = post(server.url, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "web", "version": "1"}}},
            key=secret, Origin="https://app.example.com")
        assert allowed.status_code == 401  # the gateway does not know the key: the browser is told so, with CORS
        assert allowed.headers["Access-Control-Allow-Origin"] == "https://app.example.com"
        assert "Mcp-Session-Id" in allowed.headers["Access-Control-Expose-Headers"]
        assert "401" in allowed.text and secret not in allowed.text and secret not in str(allowed.headers)
        called = modern(server.url, "tools/call", {"name": "echo", "arguments": {"text": "x"}}, key=secret)
        assert called.status_code == 401 and secret not in called.text and secret not in str(called.headers)
    finally:
        log = server.stop()
    assert "gateway.key_rejected" in log and secret not in log


def test_tasks_are_served_by_any_process_and_bound_to_the_key(hosted, gateway_sandbox):
    other = HttpServer(gateway_sandbox.url, "--http-workers", "1")
    caps = {"extensions": {"io.modelcontextprotocol/tasks": {}}}
    try:
        # 2026 extension: created on one process, followed on the other
        created = modern(hosted.url, "tools/call", {"name": "batch-report", "arguments": {"seconds": 2},
                         "_meta": {"io.modelcontextprotocol/clientCapabilities": caps}}).json()["result"]
        assert created["resultType"] == "task"
        task_id = created["taskId"]
        got = modern(other.url, "tasks/get", {"taskId": task_id, "_meta": {
            "io.modelcontextprotocol/clientCapabilities": caps}}, **{"Mcp-Name": task_id}).json()["result"]
        assert got["status"] == "working"
        wrong_name = modern(other.url, "tasks/get", {"taskId": task_id, "_meta": {
            "io.modelcontextprotocol/clientCapabilities": caps}}, **{"Mcp-Name": "another-task"})
        assert wrong_name.status_code == 400 and wrong_name.json()["error"]["code"] == -32020
        stranger = modern(other.url, "tasks/get", {"taskId": task_id, "_meta": {
            "io.modelcontextprotocol/clientCapabilities": caps}}, key=DEMO_KEY_B, **{"Mcp-Name": task_id})
        assert stranger.json()["error"]["code"] == -32602
        # 2025-11-25 core tasks: a session from one process, the task's result from the other
        session = initialize(hosted.url)
        task = rpc(hosted.url, "tools/call", {"name": "batch-report", "arguments": {"seconds": 2}, "task": {}},
                   session=session).json()["result"]["task"]
        assert rpc(other.url, "tasks/get", {"taskId": task["taskId"]}, session=session).json()["result"][
            "status"] == "working"
        result = rpc(other.url, "tasks/result", {"taskId": task["taskId"]}, session=session).json()["result"]
        assert "report ready" in result["content"][0]["text"]
        assert rpc(hosted.url, "tasks/get", {"taskId": task["taskId"]}, session=session).json()["result"][
            "status"] == "completed"
        done = modern(hosted.url, "tasks/get", {"taskId": task_id, "_meta": {
            "io.modelcontextprotocol/clientCapabilities": caps}}, **{"Mcp-Name": task_id}).json()["result"]
        assert done["status"] == "completed" and "report ready" in done["result"]["content"][0]["text"]
    finally:
        other.stop()


def test_sigterm_lets_short_calls_finish_and_cancels_long_ones_with_an_answer(gateway_sandbox, sandbox, journal):
    import signal as signals

    server = HttpServer(gateway_sandbox.url, "--http-workers", "1", "--shutdown-grace", "4")
    answers = {}

    def call(name, seconds):
        answers[name] = modern(server.url, "tools/call", {"name": "batch-report", "arguments": {"seconds": seconds}})

    threads = [threading.Thread(target=call, args=("short", 2)), threading.Thread(target=call, args=("long", 60))]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 10
    while len(journal("invoke")) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    server.process.send_signal(signals.SIGTERM)
    for thread in threads:
        thread.join(30)
    log = server.stop()
    assert "report ready" in answers["short"].json()["result"]["content"][0]["text"]
    long = answers["long"].json()["result"]
    assert long["isError"] and "restarting" in long["content"][0]["text"]
    assert len(journal("cancel")) == 1 and "http.draining" in log
    assert server.process.returncode == 0


def _call_in_background(server, seconds):
    answers = []

    def call():
        try:
            answers.append(modern(server.url, "tools/call", {"name": "batch-report", "arguments": {"seconds": seconds}}))
        except requests.ConnectionError as exc:  # (a server stopped at once answers nothing)
            answers.append(exc)

    thread = threading.Thread(target=call)
    thread.start()
    return thread, answers


@pytest.mark.parametrize("grace,deadline", [(3, None), (30, 3)], ids=["past the grace", "at the host's deadline"])
def test_ctrl_c_on_serve_says_at_once_that_it_stops_and_answers_calls_with_an_error(gateway_sandbox, sandbox, journal,
                                                                                    grace, deadline):
    """The first Ctrl-C is a graceful stop, said at once; a call in flight is answered with an error
    that names no server (never a continuation: this one is going away), and its work is cancelled."""
    server = HttpServer(gateway_sandbox.url, "--http-workers", "2", "--shutdown-grace", str(grace),
                        *(["--host-deadline", str(deadline)] if deadline else []))
    thread, answers = _call_in_background(server, 60)
    assert wait_until(lambda: journal("invoke"), timeout=10)
    mark = len(server.lines)
    server.interrupt()
    assert wait_until(lambda: "colabhive-mcp: stopping: calls in flight have" in server.stderr(mark), timeout=2)
    thread.join(grace + 30)
    server.process.wait(grace + 30)
    log = server.stop()
    answer = answers[0].json()["result"]
    assert answer["isError"] and "restarting or stopping" in answer["content"][0]["text"], answer
    assert "continuation" not in json.dumps(answer) and "wait_for_result" not in json.dumps(answer)
    assert len(journal("cancel")) == 1 and server.process.returncode == 0
    assert "Traceback" not in log and "Exception ignored" not in log


def test_a_second_ctrl_c_on_serve_stops_at_once_and_quietly(gateway_sandbox, sandbox, journal):
    server = HttpServer(gateway_sandbox.url, "--http-workers", "2", "--shutdown-grace", "60")
    thread, _ = _call_in_background(server, 60)
    assert wait_until(lambda: journal("invoke"), timeout=10)
    server.interrupt()
    assert wait_until(lambda: "colabhive-mcp: stopping" in server.stderr(), timeout=2)
    started = time.monotonic()
    server.interrupt()
    server.process.wait(10)
    log = server.stop()
    thread.join(10)
    assert server.process.returncode == 130 and time.monotonic() - started < 5
    assert "Traceback" not in log and "Exception ignored" not in log


def test_a_request_can_narrow_the_tool_set_but_never_widen_it(gateway_sandbox):
    server = HttpServer(gateway_sandbox.url, "--http-workers", "1", "--deny", "web-*")
    try:
        names = lambda response: {t["name"] for t in response.json()["result"]["tools"]}
        everything = names(modern(server.url, "tools/list"))
        assert "crm-create-contact" in everything and "web-scrape" not in everything
        read_only = names(modern(server.url, "tools/list", **{"X-ColabHive-Read-Only": "true"}))
        assert "crm-create-contact" not in read_only and "echo" in read_only
        globbed = names(modern(server.url.replace("/mcp", "/mcp?tools=hive-*,web-*"), "tools/list"))
        assert globbed == {"hive-chat"}  # web-* stays hidden: the server's policy wins
        refused = modern(server.url, "tools/call", {"name": "crm-create-contact", "arguments": {
            "name": "Ada", "email": "ada@example.com"}}, **{"X-ColabHive-Read-Only": "1"}).json()["result"]
        assert refused["isError"] and "read-only" in refused["content"][0]["text"]
    finally:
        server.stop()


def test_a_cancellation_reaching_another_worker_still_stops_the_call(gateway_sandbox, sandbox, own_trace, tmp_path):
    relay = {"COLABHIVE_RUNTIME_DIR": str(tmp_path)}  # what the workers of one instance share
    first = HttpServer(gateway_sandbox.url, "--http-workers", "1", env=relay)
    second = HttpServer(gateway_sandbox.url, "--http-workers", "1", env=relay)
    request_id = "call-" + "x" * 50_000  # a client picks its ids: the relay holds a digest, never the id
    try:
        session = initialize(first.url)
        answers = []
        call = threading.Thread(target=lambda: answers.append(rpc(
            first.url, "tools/call", {"name": "batch-report", "arguments": {"seconds": 60},
                                      "_meta": {"progressToken": 1}}, session=session, id_=request_id,
            **own_trace.headers)))
        call.start()
        assert wait_until(lambda: own_trace.journal("poll"), timeout=15)
        sent = time.time()
        cancel = post(second.url, {"jsonrpc": "2.0", "method": "notifications/cancelled",
                                   "params": {"requestId": request_id, "reason": "r" * 10_000}},
                      **{"Mcp-Session-Id": session})
        assert cancel.status_code == 202
        markers = list((tmp_path / "cancel").iterdir())
        assert markers and all(m.stat().st_size < 512 and "xxxx" not in m.read_text() for m in markers)
        cancels = wait_until(lambda: own_trace.journal("cancel"), timeout=10)
        assert cancels and cancels[0]["t"] - sent < 1.5
        call.join(10)
        assert not any(request_id in line for line in answers[0].text.splitlines())  # no answer for it
    finally:
        first.stop()
        second.stop()
    assert not (tmp_path / "cancel").exists()  # markers go with the instance; the store stays
    assert (tmp_path / "instance.db").exists()


def test_without_public_url_the_server_card_names_the_address_it_was_asked_at_and_bearer_keys(hosted):
    card = requests.get(hosted.root + "/.well-known/mcp/server-card", timeout=10).json()
    streamable = card["remotes"][0]
    assert streamable["url"] == hosted.url and streamable["authentication"]["schemes"] == ["bearer"]
    assert streamable["headers"][0]["isRequired"] is True
