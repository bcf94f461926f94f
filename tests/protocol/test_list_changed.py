"""Tool-list changes reach every kind of client: stdio (tested in test_stdio), the legacy GET
stream, and 2026 subscriptions/listen over HTTP and stdio."""

import json
import sys
import time

import pytest
import requests

from colabhive_mcp.cli.demo import StdioPeer
from colabhive_mcp.sandbox import DEMO_KEY

from ..support.http_server import HttpServer
from ..support.http_client import initialize
from ..support.environ import server_env
from ..support.waiting import wait_until

pytestmark = pytest.mark.slow

NEW_TOOL = {"name": "fresh-tool", "description": "new", "sideEffects": [], "inputSchema": {"type": "object"}}
LISTEN_META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}


def sse_messages(lines, count, timeout=15):
    """The next ``count`` JSON-RPC messages of a streamed SSE body."""
    found, deadline = [], time.monotonic() + timeout
    for line in lines:
        if line.startswith("data: ") and line[6:].strip():
            found.append(json.loads(line[6:]))
            if len(found) == count:
                return found
        if time.monotonic() > deadline:
            break
    return found


def test_listen_over_http_acknowledges_then_announces_changes(gateway_sandbox, sandbox):
    server = HttpServer(gateway_sandbox.url, "--http-workers", "1", "--manifest-ttl", "1")
    try:
        body = {"jsonrpc": "2.0", "id": "sub-1", "method": "subscriptions/listen",
                "params": {"notifications": {"toolsListChanged": True}, "_meta": LISTEN_META}}
        headers = {"Authorization": f"Bearer {DEMO_KEY}", "Accept": "application/json, text/event-stream",
                   "Content-Type": "application/json", "MCP-Protocol-Version": "2026-07-28",
                   "Mcp-Method": "subscriptions/listen"}
        with requests.post(server.url, json=body, headers=headers, stream=True, timeout=30) as stream:
            lines = stream.iter_lines(decode_unicode=True)
            ack = sse_messages(lines, 1)[0]
            assert ack["method"] == "notifications/subscriptions/acknowledged"
            assert ack["params"] == {"_meta": {"io.modelcontextprotocol/subscriptionId": "sub-1"},
                                     "notifications": {"toolsListChanged": True}}
            time.sleep(1.5)
            sandbox.add_action(NEW_TOOL)
            change = sse_messages(lines, 1)[0]
            assert change == {"jsonrpc": "2.0", "method": "notifications/tools/list_changed",
                              "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": "sub-1"}}}
        json_only = requests.post(server.url, json=body, timeout=10, headers={**headers, "Accept": "application/json"})
        assert json_only.status_code == 406
    finally:
        server.stop()


def test_the_legacy_get_stream_announces_changes(gateway_sandbox, sandbox):
    server = HttpServer(gateway_sandbox.url, "--single-tenant", "--http-workers", "1", "--manifest-ttl", "1",
                        env={"COLABHIVE_API_KEY": DEMO_KEY})
    try:
        session = initialize(server.url, key=None)
        headers = {"Accept": "text/event-stream", "Mcp-Session-Id": session}
        with requests.get(server.url, headers=headers, stream=True, timeout=30) as stream:
            lines = stream.iter_lines(decode_unicode=True)
            time.sleep(1.5)
            sandbox.add_action(NEW_TOOL)
            assert sse_messages(lines, 1)[0]["method"] == "notifications/tools/list_changed"
    finally:
        server.stop()


def test_listen_over_stdio_until_the_client_cancels(sandbox):
    peer = StdioPeer([sys.executable, "-m", "colabhive_mcp", "stdio", "--api-url", sandbox.url, "--manifest-ttl", "1"],
                     env=server_env(COLABHIVE_API_KEY=DEMO_KEY))
    try:
        peer.send({"jsonrpc": "2.0", "id": 41, "method": "subscriptions/listen",
                   "params": {"notifications": {"toolsListChanged": True}, "_meta": LISTEN_META}})
        assert wait_until(lambda: peer.notifications)
        assert peer.notifications[0]["method"] == "notifications/subscriptions/acknowledged"
        time.sleep(1.5)
        sandbox.add_action(NEW_TOOL)
        assert wait_until(lambda: len(peer.notifications) >= 2)
        assert peer.notifications[1]["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == 41
        peer.notify("notifications/cancelled", {"requestId": 41})
        time.sleep(1)
        assert peer.request("ping")["result"] == {}  # still serving
        with pytest.raises(TimeoutError):
            peer.wait_for(41, timeout=0.5)  # the cancelled listen got no answer
    finally:
        peer.close()
