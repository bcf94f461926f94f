"""Speaking MCP over HTTP to a server under test, as clients do: a POST with the right headers, the
legacy handshake, a request in either era, the official SDK's session, and a health probe."""

import json
import time

import httpx2
import requests
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from colabhive_mcp.sandbox import DEMO_KEY

ACCEPT_BOTH = "application/json, text/event-stream"
MODERN = "2026-07-28"


def post(url, body, key=DEMO_KEY, accept=ACCEPT_BOTH, **headers):
    headers = {"Accept": accept, "Content-Type": "application/json", **headers}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    return requests.post(url, data=body if isinstance(body, (bytes, str)) else json.dumps(body), headers=headers,
                         timeout=60)


def initialize(url, key=DEMO_KEY, version="2025-11-25"):
    response = post(url, {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                          "params": {"protocolVersion": version, "capabilities": {},
                                     "clientInfo": {"name": "pytest", "version": "1"}}}, key)
    assert response.status_code == 200, response.text
    session = response.headers["Mcp-Session-Id"]
    assert post(url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, key,
                **{"Mcp-Session-Id": session}).status_code == 202
    return session


def rpc(url, method, params=None, key=DEMO_KEY, session=None, id_=2, **headers):
    if session:
        headers["Mcp-Session-Id"] = session
    body = {"jsonrpc": "2.0", "id": id_, "method": method, **({"params": params} if params is not None else {})}
    return post(url, body, key, **headers)


def modern(url, method, params=None, key=DEMO_KEY, **headers):
    params = dict(params or {})
    params["_meta"] = {"io.modelcontextprotocol/protocolVersion": MODERN,
                       "io.modelcontextprotocol/clientCapabilities": {}, **params.get("_meta", {})}
    headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": method, **headers}
    if method == "tools/call":
        headers.setdefault("Mcp-Name", params["name"])
    return rpc(url, method, params, key, **headers)


async def sdk_session(url, key, mode):
    transport = streamable_http_client(url, http_client=httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {key}"}, timeout=60))
    progress = []

    async def on_progress(value, total, message):
        progress.append(value)

    async with Client(transport, mode=mode, read_timeout_seconds=60) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        echo = await client.call_tool("echo", {"text": f"hello {mode}"})
        slow = await client.call_tool("batch-report", {"seconds": 5}, progress_callback=on_progress)
        failing = await client.call_tool("flaky-translate", {"text": "x"})
        return client.protocol_version, names, echo.content[0].text, slow.content[0].text, progress, failing.is_error


def health_time(server, probes=3):
    """How soon ``/healthz`` answers: the quickest of a few probes, each on a new connection. A health
    check queued behind the calls would make every probe slow; a busy test machine delays one now and then."""
    times = []
    for _ in range(probes):
        started = time.perf_counter()
        assert requests.get(server.root + "/healthz", timeout=30).status_code == 200
        times.append(time.perf_counter() - started)
    return min(times)
