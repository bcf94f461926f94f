"""The stdio server as a subprocess: a real session, bad input, concurrency, cancellation, shutdown."""

import json
import signal
import subprocess
import sys
import time

import pytest

from colabhive_mcp.cli.demo import StdioPeer
from colabhive_mcp.sandbox import DEMO_KEY

from ..support.environ import server_env
from ..support.waiting import wait_until

pytestmark = pytest.mark.slow





@pytest.fixture
def peer(sandbox):
    """A stdio server subprocess pointed at the test sandbox (so its journal can be checked)."""
    peer = StdioPeer([sys.executable, "-m", "colabhive_mcp", "stdio", "--api-url", sandbox.url,
                      "--poll-initial", "0.05", "--poll-max-interval", "0.2"],
                     env=server_env(COLABHIVE_API_KEY=DEMO_KEY))
    yield peer
    if peer.process.poll() is None:
        peer.process.kill()
        peer.process.wait()
    assert peer.unparsable == []  # nothing but JSON-RPC ever reached stdout


def test_sandbox_flag_runs_the_whole_product_with_no_account():
    peer = StdioPeer([sys.executable, "-m", "colabhive_mcp", "--sandbox"], env=server_env())
    try:
        assert peer.initialize()["result"]["protocolVersion"] == "2025-11-25"
        names = [t["name"] for t in peer.request("tools/list")["result"]["tools"]]
        assert "hive-chat" in names and not [n for n in names if n.startswith("test_")]  # no conformance fixtures
        answer = peer.request("tools/call", {"name": "echo", "arguments": {"text": "over stdio"}})
        assert answer["result"]["content"] == [{"type": "text", "text": "over stdio"}]
    finally:
        assert peer.close() == 0
    assert peer.unparsable == []


@pytest.mark.parametrize("line,code,answer_id", [
    (b"this is not json", -32700, None),
    (b'{"jsonrpc": "2.0", "id": 1, "method": ', -32700, None),
    (b"\xff\xfe not utf-8", -32700, None),
    (b'"just a string"', -32600, None),
    (b"[]", -32600, None),
    (b'{"jsonrpc": "2.0", "id": {"an": "object"}, "method": "ping"}', -32600, None),
    (b"[" * 100_000 + b"]" * 100_000, -32700, None),
    (b'{"jsonrpc": "2.0", "id": 1, "method": 42}', -32600, 1),
    (b'{"id": "no-version", "method": "ping"}', -32600, "no-version"),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": NaN}}', -32700, None),  # not JSON (RFC 8259)
    (b'{"jsonrpc": "2.0", "id": 1e999, "method": "ping"}', -32700, None),  # would be written back as Infinity
])
def test_malformed_lines_get_an_error_and_the_server_keeps_going(peer, line, code, answer_id):
    peer.initialize()
    peer.send(line)
    answer = peer.next_anonymous() if answer_id is None else peer.wait_for(answer_id)
    assert answer["id"] == answer_id and answer["error"]["code"] == code
    assert peer.request("ping")["result"] == {}


def test_errors_with_an_id_keep_the_id(peer):
    peer.initialize()
    assert peer.request("no/such/method", request_id="x-1")["error"]["code"] == -32601
    assert peer.request("tools/call", {"name": 7}, request_id=0)["error"]["code"] == -32602


def test_unpaired_surrogates_and_deep_nesting_get_answers_not_a_dead_server(peer):
    peer.initialize()
    peer.send(b'{"jsonrpc": "2.0", "id": "s-\\ud800", "method": "\\udfff"}')
    assert peer.wait_for("s-\ud800", timeout=10)["error"]["code"] == -32601  # the id goes back exactly
    peer.send(b'{"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "echo", "arguments": '
              b'{"text": "x", "deep": ' + b"[" * 900 + b"]" * 900 + b"}}}")
    refused = peer.next_anonymous(timeout=10)["error"]  # judged on the text: nothing recursed 900 deep
    assert refused["code"] == -32700 and "nested deeper than 512" in refused["message"]
    peer.send(b'{"jsonrpc": "2.0", "id": 10, "method": "tools/call", "params": {"name": "echo", "arguments": '
              b'{"text": "x", "deep": ' + b"[" * 300 + b"]" * 300 + b"}}}")
    assert peer.next_anonymous(timeout=10)["error"]["code"] == -32600  # parsed, then refused: too deep to use
    assert peer.request("tools/call", {"name": "echo", "arguments": {"text": "a\udc00b"}})["result"][
        "content"][0]["text"] == "a\udc00b"


def test_a_10_mb_line_is_refused_without_harm(peer):
    peer.initialize()
    peer.send(b'{"jsonrpc": "2.0", "id": 5, "method": "ping", "params": {"pad": "' + b"x" * 10_000_000 + b'"}}')
    answer = peer.next_anonymous(timeout=30)
    assert answer["error"]["code"] == -32600 and "larger than" in answer["error"]["message"]
    assert peer.request("ping")["result"] == {}
    assert peer.request("tools/call", {"name": "echo", "arguments": {"text": "still here"}})["result"][
        "content"][0]["text"] == "still here"


def test_ping_is_answered_while_a_long_call_polls(peer):
    peer.initialize()
    peer.send({"jsonrpc": "2.0", "id": "long", "method": "tools/call",
               "params": {"name": "batch-report", "arguments": {"seconds": 3}, "_meta": {"progressToken": "p"}}})
    assert wait_until(lambda: peer.notifications)
    assert peer.request("ping", timeout=2)["result"] == {}
    assert peer.request("tools/list", timeout=5)["result"]["tools"]
    assert "report ready" in peer.wait_for("long", timeout=30)["result"]["content"][0]["text"]
    progress = [n["params"]["progress"] for n in peer.notifications if n["method"] == "notifications/progress"]
    assert len(progress) >= 2 and progress == sorted(progress)


def first_answer(peer, ids, timeout):
    """The first answer to any of ``ids`` within ``timeout`` seconds, or ``None``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for request_id in ids:
            try:
                return peer.wait_for(request_id, timeout=0.05)
            except TimeoutError:
                continue
    return None


def test_long_calls_filling_every_worker_never_queue_a_ping_a_list_or_a_refusal(sandbox):
    """Two call threads, both busy, and a key allowed two calls: what needs no long wait is answered at
    once, and with the default threads a call past the key's limit is refused, not queued."""
    for workers, refused in (("2", False), (None, True)):
        extra = {"COLABHIVE_API_KEY": DEMO_KEY, "COLABHIVE_TENANT_MAX_CONCURRENT": "2"}
        peer = StdioPeer([sys.executable, "-m", "colabhive_mcp", "stdio", "--api-url", sandbox.url],
                         env=server_env(**extra, **({"COLABHIVE_WORKERS": workers} if workers else {})))
        try:
            peer.initialize()
            for n in range(3):
                peer.send({"jsonrpc": "2.0", "id": f"long{n}", "method": "tools/call",
                           "params": {"name": "batch-report", "arguments": {"seconds": 8}}})
            assert peer.request("ping", timeout=2)["result"] == {}
            assert peer.request("tools/list", timeout=5)["result"]["tools"]
            answered = first_answer(peer, [f"long{n}" for n in range(3)], timeout=5 if refused else 1)
            if refused:  # one of the three (whichever took its place last: threads start in any order)
                assert answered is not None and "2 ColabHive calls running" in json.dumps(answered)
            else:
                assert answered is None  # queued for a call thread, not refused
        finally:
            peer.process.kill()
            peer.process.wait()
        assert peer.unparsable == []


def test_cancellation_reaches_the_gateway_and_silences_the_request(peer, sandbox, journal):
    peer.initialize()
    peer.send({"jsonrpc": "2.0", "id": 77, "method": "tools/call",
               "params": {"name": "batch-report", "arguments": {"seconds": 60}, "_meta": {"progressToken": 77}}})
    assert wait_until(lambda: peer.notifications)
    peer.notify("notifications/cancelled", {"requestId": 77, "reason": "user pressed stop"})
    cancelled_at = time.time()
    assert wait_until(lambda: journal("cancel"), timeout=5)
    assert journal("cancel")[0]["t"] - cancelled_at < 1.5
    with pytest.raises(TimeoutError):
        peer.wait_for(77, timeout=1.5)
    count = len(peer.notifications)
    time.sleep(0.5)
    assert len(peer.notifications) == count  # nothing more for the cancelled request


MODERN_META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
               "io.modelcontextprotocol/clientCapabilities": {},
               "io.modelcontextprotocol/clientInfo": {"name": "stdio-test", "version": "1"}}


def open_listen_and_a_slow_call(peer):
    """A 2026 listen (acknowledged) and a 60 s tool call (polling upstream), both open."""
    peer.send({"jsonrpc": "2.0", "id": "listen", "method": "subscriptions/listen",
               "params": {"_meta": MODERN_META, "notifications": {"toolsListChanged": True}}})
    peer.send({"jsonrpc": "2.0", "id": "slow", "method": "tools/call",
               "params": {"name": "batch-report", "arguments": {"seconds": 60},
                          "_meta": {**MODERN_META, "progressToken": "slow"}}})
    assert wait_until(lambda: {n["method"] for n in peer.notifications} >= {
        "notifications/subscriptions/acknowledged", "notifications/progress"})


def test_end_of_input_ends_everything_open_and_exits_at_once(peer, journal):
    """A host that closes stdin is gone: the listen gets its completion result, the call is stopped
    upstream (not kept, as for a host that timed out), and the process exits about at once, not
    after the call (60 s) or never (the listen)."""
    open_listen_and_a_slow_call(peer)
    closed = time.monotonic()
    assert peer.close(timeout=8) == 0
    assert time.monotonic() - closed < 5  # about a second, with room for a loaded machine
    assert len(journal("cancel")) == 1
    goodbye = peer.wait_for("listen", timeout=1)["result"]
    assert goodbye["resultType"] == "complete" and goodbye["_meta"]["io.modelcontextprotocol/subscriptionId"] == "listen"
    assert peer.wait_for("slow", timeout=1)["result"]["isError"] is True


def test_end_of_input_still_answers_a_quick_request_asked_before_it(peer):
    """A script that writes a request and closes stdin at once still gets a quick answer (a tool
    list does not stop for a cancellation; a tool call would be stopped)."""
    peer.initialize()
    peer.send({"jsonrpc": "2.0", "id": "list", "method": "tools/list"})
    assert peer.close(timeout=10) == 0
    assert peer.wait_for("list", timeout=1)["result"]["tools"]


def test_sigterm_ends_a_listen_with_its_completion_result(peer, journal):
    open_listen_and_a_slow_call(peer)
    peer.process.send_signal(signal.SIGTERM)
    assert peer.process.wait(timeout=8) == 0
    assert peer.wait_for("listen", timeout=1)["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "listen"
    assert not [n for n in peer.notifications if n["method"] == "notifications/cancelled"]  # (as over HTTP)
    assert len(journal("cancel")) == 1


def test_sigterm_cancels_work_in_flight_and_exits(peer, journal):
    peer.initialize()
    peer.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
               "params": {"name": "batch-report", "arguments": {"seconds": 60}, "_meta": {"progressToken": 1}}})
    assert wait_until(lambda: peer.notifications)
    peer.process.send_signal(signal.SIGTERM)
    assert peer.process.wait(timeout=10) == 0
    assert len(journal("cancel")) == 1


def test_without_a_key_it_says_what_to_do():
    result = subprocess.run([sys.executable, "-m", "colabhive_mcp", "stdio"], env=server_env(),
                            capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
    assert result.returncode == 3 and result.stdout == b""  # "no API key", as check, tools and call say it
    assert result.stderr.startswith(b"colabhive-mcp: no API key: set COLABHIVE_API_KEY")


def test_a_bad_setting_is_reported_before_serving():
    result = subprocess.run([sys.executable, "-m", "colabhive_mcp", "stdio", "--manifest-ttl", "soon"],
                            env=server_env(COLABHIVE_API_KEY=DEMO_KEY), capture_output=True, timeout=30,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 2 and b"manifest_ttl" in result.stderr and result.stdout == b""


def test_the_key_never_reaches_the_logs(sandbox):
    secret = "hive_secret_for_the_log_test_0001"
    sandbox.faults.clear()
    result = subprocess.run(
        [sys.executable, "-m", "colabhive_mcp", "stdio", "--api-url", sandbox.url],
        input=b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25",'
              b'"capabilities":{},"clientInfo":{"name":"t","version":"1"}}}\n'
              b'{"jsonrpc":"2.0","id":2,"method":"tools/list"}\n',
        env=server_env(COLABHIVE_API_KEY=secret, COLABHIVE_LOG_LEVEL="debug"), capture_output=True, timeout=30)
    assert result.returncode == 0
    assert b"401" in result.stdout
    assert secret.encode() not in result.stdout + result.stderr


def test_a_changed_manifest_is_announced_and_its_new_tool_is_callable(sandbox):
    peer = StdioPeer([sys.executable, "-m", "colabhive_mcp", "stdio", "--api-url", sandbox.url, "--manifest-ttl", "1"],
                     env=server_env(COLABHIVE_API_KEY=DEMO_KEY))
    try:
        assert peer.initialize()["result"]["capabilities"]["tools"] == {"listChanged": True}
        before = {t["name"] for t in peer.request("tools/list")["result"]["tools"]}
        assert "fresh-tool" not in before
        time.sleep(1.5)
        assert not [n for n in peer.notifications if n["method"] == "notifications/tools/list_changed"]
        sandbox.add_action({"name": "fresh-tool", "description": "new", "sideEffects": [],
                            "inputSchema": {"type": "object", "properties": {"x": {"type": "integer"}}}})
        assert wait_until(lambda: [n for n in peer.notifications
                                   if n["method"] == "notifications/tools/list_changed"], timeout=10)
        after = {t["name"] for t in peer.request("tools/list")["result"]["tools"]}
        assert after == before | {"fresh-tool"}
        answer = peer.request("tools/call", {"name": "fresh-tool", "arguments": {"x": 1}})
        assert json.loads(answer["result"]["content"][0]["text"]) == {"x": 1}
    finally:
        peer.close()
    assert peer.unparsable == []


def test_the_handshake_is_answered_before_the_heavy_libraries_are_imported():
    """stdio start-up: requests, jsonschema and prometheus_client load with the first call, not before,
    and loguru never (its JSON records are written without it)."""
    probe = ("import sys, io\n"
             "from colabhive_mcp import cli\n"
             "heavy = ('requests', 'jsonschema', 'prometheus_client', 'loguru')\n"
             "class Answer(io.RawIOBase):\n"
             "    def writable(self):\n        return True\n"
             "    def write(self, data):\n"
             "        print('AT THE ANSWER', [m for m in heavy if m in sys.modules], file=sys.stderr)\n"
             "        return sys.__stdout__.buffer.write(data)\n"
             "sys.stdout = kept = io.TextIOWrapper(io.BufferedWriter(Answer()))  # serve() swaps sys.stdout\n"
             "sys.stdin = io.TextIOWrapper(io.BytesIO(b'" + json.dumps({
                 "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                     "protocolVersion": "2025-06-18", "capabilities": {},
                     "clientInfo": {"name": "t", "version": "1"}}}).replace("'", "\\'") + "\\n'))\n"
             "try:\n    cli.main(['stdio', '--api-url', 'http://127.0.0.1:9', '--log-level', 'error'])\n"
             "except SystemExit:\n    pass\n"
             "print('LOADED', [m for m in heavy if m in sys.modules], file=sys.stderr)\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                         env=server_env(COLABHIVE_API_KEY="hive_probe"))
    assert '"protocolVersion"' in out.stdout
    assert "LOADED []" in out.stderr and "AT THE ANSWER []" in out.stderr, out.stderr[-2000:]


def test_a_stdio_server_keeps_no_metrics_and_never_imports_prometheus_client(sandbox, tmp_path):
    """Nothing serves a stdio server's metrics: its tool list and calls happen without prometheus_client."""
    probe = ("import sys\n"
             "from colabhive_mcp import cli\n"
             "try:\n    cli.main(['stdio', '--api-url', sys.argv[1], '--log-level', 'error'])\n"
             "finally:\n"
             "    print('LOADED', sorted(m for m in ('prometheus_client', 'requests') if m in sys.modules), file=sys.stderr)\n")
    with open(tmp_path / "stderr", "w") as stderr:
        peer = StdioPeer([sys.executable, "-c", probe, sandbox.url], env=server_env(COLABHIVE_API_KEY=DEMO_KEY),
                         stderr=stderr)
        peer.initialize()
        assert len(peer.request("tools/list")["result"]["tools"]) > 3
        assert "isError" not in peer.request("tools/call", {"name": "echo", "arguments": {"text": "hi"}})["result"]
        peer.close()
    assert "LOADED ['requests']" in (tmp_path / "stderr").read_text()
