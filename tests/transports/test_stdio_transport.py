"""The stdio transport in this process, over real pipes, against the sandbox: a session's requests
answered by their ids, a call on the call threads, and the end of input ending it
(tests/transports/test_stdio.py runs the real process)."""

import json
import os
import threading

import pytest

from colabhive_mcp.protocol import Server
from colabhive_mcp.transports.stdio import StdioTransport


@pytest.fixture
def piped(config, tenant):
    """A transport serving on a thread; ``ask(message)`` writes a line and reads the answer with its id."""
    stdin_r, stdin_w = os.pipe()
    stdout_r, stdout_w = os.pipe()
    transport = StdioTransport(Server(config), tenant, os.fdopen(stdin_r, "rb"), os.fdopen(stdout_w, "wb"),
                               max_message_bytes=config.max_message_bytes, workers=4)
    serving = threading.Thread(target=transport.serve, daemon=True)
    serving.start()
    sending, answers = os.fdopen(stdin_w, "wb", buffering=0), os.fdopen(stdout_r, "rb")
    heard = []

    def ask(message):
        sending.write(json.dumps(message).encode() + b"\n")
        if "id" not in message:
            return None
        while True:
            line = json.loads(answers.readline())
            if line.get("id") == message["id"] and "method" not in line:
                return line
            heard.append(line)

    yield ask, sending, serving, heard
    if not sending.closed:
        sending.close()
    serving.join(10)


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
