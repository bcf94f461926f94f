"""The stdio transport in this process, over real pipes, against the sandbox: a session's requests
answered by their ids, a call on the call threads, and the end of input ending it
(tests/transports/test_stdio.py runs the real process)."""

import json
import os
import threading

import pytest

from colabhive_mcp.protocol import Server
from colabhive_mcp.transports import stdio
from colabhive_mcp.transports.stdio import StdioTransport

from ..support.waiting import wait_until


@pytest.fixture
def pipes(config, tenant):
    """``start()``: a transport serving on a thread, and ``ask(message)``, which writes a line and reads
    the answer with its id."""
    started = []

    def start():
        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        transport = StdioTransport(Server(config), tenant, os.fdopen(stdin_r, "rb"), os.fdopen(stdout_w, "wb"),
                                   max_message_bytes=config.max_message_bytes, workers=4)
        serving = threading.Thread(target=transport.serve, daemon=True)
        serving.start()
        sending, answers = os.fdopen(stdin_w, "wb", buffering=0), os.fdopen(stdout_r, "rb")
        heard = []
        started.append((sending, serving))

        def ask(message):
            sending.write(json.dumps(message).encode() + b"\n")
            if "id" not in message:
                return None
            while True:
                line = json.loads(answers.readline())
                if line.get("id") == message["id"] and "method" not in line:
                    return line
                heard.append(line)

        return ask, sending, serving, heard

    yield start
    for sending, serving in started:
        if not sending.closed:
            sending.close()
        serving.join(10)


@pytest.fixture
def piped(pipes):
    return pipes()


def test_a_session_over_the_pipes(piped):
    ask, sending, serving, heard = piped
    opened = ask({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}})
    assert opened["result"]["protocolVersion"] == "2025-11-25"
    ask({"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert ask({"jsonrpc": "2.0", "id": 2, "method": "ping"})["result"] == {}
    listed = ask({"jsonrpc": "2.0", "id": "list", "method": "tools/list"})
    assert "echo" in {tool["name"] for tool in listed["result"]["tools"]}
    called = ask({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "echo", "arguments": {"text": "through the pipes"}, "_meta": {"progressToken": "p"}}})
    assert "through the pipes" in json.dumps(called["result"]["content"])
    assert ask({"jsonrpc": "2.0", "id": 4, "method": "no/such"})["error"]["code"] == -32601
    sending.write(b"{not json\n")
    assert ask({"jsonrpc": "2.0", "id": 5, "method": "ping"})["result"] == {}  # still serving after garbage
    assert any(message.get("error", {}).get("code") == -32700 for message in heard)
    sending.close()  # the host has gone
    serving.join(10)
    assert not serving.is_alive()


def test_the_tool_list_is_fetched_once_the_handshake_is_answered(pipes, tenant, monkeypatch):
    """The manifest is asked for as soon as the answer to ``initialize`` is out (never before it: the
    handshake waits for no gateway), not some time later: the client's first ``tools/list`` finds it
    under way or made. A client that makes no handshake has it fetched shortly after the start."""
    monkeypatch.setattr(stdio, "PREFETCH_AFTER_S", 60.0)  # (only the handshake can start it within the test)
    verified, answered = threading.Event(), threading.Event()
    verify = tenant.verify

    def verified_after_the_answer(*args, **kwargs):
        assert answered.is_set(), "the handshake waited for the gateway"
        verified.set()
        return verify(*args, **kwargs)

    write = StdioTransport.write

    def written(self, message):
        write(self, message)
        answered.set()

    monkeypatch.setattr(tenant, "verify", verified_after_the_answer)
    monkeypatch.setattr(StdioTransport, "write", written)
    ask = pipes()[0]
    assert tenant.manifest.current is None
    opened = ask({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}})
    assert opened["result"]["protocolVersion"] == "2025-11-25"
    assert verified.wait(20) and wait_until(lambda: tenant.manifest.current is not None)
