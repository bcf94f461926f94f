"""The official SDKs' OAuth clients, and mcp-remote's, against the hosted server (real gunicorn, two
workers), end to end on loopback: discovery from the 401, registration, the consent page filled in
(a plain HTTP POST of its form, as the user's browser would send it), the code exchanged, tools
listed and called, and a refresh once the access token (5 s here) has expired."""

import json
import os
import queue
import re
import subprocess
import threading
import time

import anyio
import httpx2
import pytest
import requests
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientMetadata

from colabhive_mcp.sandbox import DEMO_KEY

from ..support import npm
from ..support.http_server import HttpServer, free_port, log_events
from ..support.oauth_flow import REDIRECT, query

pytestmark = pytest.mark.real_clients

TOKEN_TTL_S = 5
MCP_REMOTE = "0.15.1"


@pytest.fixture(scope="module")
def server(gateway_sandbox):
    server = HttpServer(gateway_sandbox.url, "--http-workers", "2", public=True,
                        env={"COLABHIVE_OAUTH_ACCESS_TOKEN_TTL": str(TOKEN_TTL_S)})
    yield server
    server.stop()


def refreshes(server, since):
    return [e for e in log_events(server.stderr(since), "oauth.token.issued") if e["grant_type"] == "refresh_token"]


class Memory:
    """The Python SDK's TokenStorage, in memory."""

    def __init__(self):
        self.tokens = self.client = None

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens):
        self.tokens = tokens

    async def get_client_info(self):
        return self.client

    async def set_client_info(self, info):
        self.client = info


def consent(url, key, grant=None):
    """What the user does in the browser: open the page, choose ``grant`` (else leave the choice it
    shows: what the application asked for), paste the key, allow; the redirect's parameters, and the
    choice the page showed."""
    page = requests.get(url, timeout=30)
    assert page.status_code == 200, page.text
    request = re.search(r'name="request" value="([^"]+)"', page.text).group(1)
    shown = re.search(r'name="grant" value="([a-z-]+)" checked', page.text).group(1)
    answer = requests.post(page.url.split("?")[0], data={"request": request, "key": key, "action": "allow",
                                                          "grant": grant or shown}, allow_redirects=False, timeout=60)
    assert answer.status_code == 303, answer.text
    return query(answer.headers["Location"]), shown


def python_sdk_host(server, grants=()):
    """The Python SDK's OAuth client as a host holds it: its transport, its token storage, the choice each
    consent page showed, and the last redirect's parameters (``grants``: what the user chooses at each
    consent in turn; past them, what the page shows)."""
    shown, redirected = [], {}

    async def redirect_handler(url):
        grant = grants[len(shown)] if len(shown) < len(grants) else None
        answered, choice = await anyio.to_thread.run_sync(consent, url, DEMO_KEY, grant)
        shown.append(choice)
        redirected.update(answered)

    async def callback_handler():
        return AuthorizationCodeResult(code=redirected["code"], state=redirected.get("state"),
                                       iss=redirected.get("iss"))

    storage = Memory()
    auth = OAuthClientProvider(server.url, OAuthClientMetadata(
        client_name="Python SDK host", redirect_uris=[REDIRECT], grant_types=["authorization_code", "refresh_token"],
        response_types=["code"], token_endpoint_auth_method="none"), storage, redirect_handler, callback_handler)
    transport = streamable_http_client(server.url, http_client=httpx2.AsyncClient(auth=auth, timeout=60))
    return transport, storage, shown, redirected


async def python_sdk_session(server):
    transport, storage, _, redirected = python_sdk_host(server)
    async with Client(transport, read_timeout_seconds=60) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        echo = await client.call_tool("echo", {"text": "python through OAuth"})
        first = storage.tokens.access_token
        await anyio.sleep(TOKEN_TTL_S + 1)  # the access token expires; the SDK refreshes it
        again = await client.call_tool("echo", {"text": "after a refresh"})
        return names, echo.content[0].text, again.content[0].text, first != storage.tokens.access_token, redirected


def test_the_python_sdk_connects_with_oauth_and_refreshes(server):
    mark = len(server.lines)
    names, echo, again, renewed, redirected = anyio.run(python_sdk_session, server)
    assert "echo" in names and "python through OAuth" in echo and "after a refresh" in again
    assert renewed and refreshes(server, mark)
    assert redirected["iss"] == server.root and redirected["state"]


def test_the_typescript_sdk_connects_with_oauth_and_refreshes(server, ts_sdk):
    mark = len(server.lines)
    lines = ts_sdk("ts_oauth.mjs", {"url": server.url, "key": DEMO_KEY, "redirect": REDIRECT,
                                    "wait_ms": (TOKEN_TTL_S + 1) * 1000})
    consented = next(line for line in lines if "consent" in line)
    assert consented == {"consent": 303, "iss": server.root, "redirected_to": REDIRECT}
    listed = next(line for line in lines if "tools" in line)
    assert "echo" in listed["tools"] and "through OAuth" in listed["text"]
    assert lines[-1] == {"refreshed": True, "text": lines[-1]["text"]} and "after a refresh" in lines[-1]["text"]
    deadline = time.monotonic() + 10
    while not refreshes(server, mark):
        assert time.monotonic() < deadline, "the server never saw the refresh"
        time.sleep(0.05)


class McpRemote:
    """mcp-remote (https://github.com/geelen/mcp-remote) in its OAuth mode, as a stdio host starts it:
    JSON-RPC lines to its stdin and from its stdout; its log (stderr) read line by line."""

    def __init__(self, url, config_dir):
        home = npm.install("mcp-remote", "mcp-remote", MCP_REMOTE)
        self.callback_port = free_port()
        environ = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
        environ.update({"MCP_REMOTE_CONFIG_DIR": str(config_dir), "BROWSER": "true"})  # no browser opens
        self.process = subprocess.Popen(
            ["node", str(home / "node_modules" / "mcp-remote" / "dist" / "proxy.js"), url, str(self.callback_port),
             "--host", "127.0.0.1", "--allow-http"],  # (loopback http: the test server's public URL)
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environ)
        self.log, self.answers = self._reader(self.process.stderr), self._reader(self.process.stdout)

    @staticmethod
    def _reader(stream):
        lines = queue.Queue()
        threading.Thread(target=lambda: [lines.put(line) for line in stream], daemon=True).start()
        return lines

    def send(self, message):
        self.process.stdin.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
        self.process.stdin.flush()

    def answer(self, timeout=60):
        return json.loads(self.answers.get(timeout=timeout))

    def logged(self, pattern, timeout=60):
        """The first match of ``pattern`` in the lines it logs from now on."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                found = re.search(pattern, self.log.get(timeout=max(0.1, deadline - time.monotonic())))
            except queue.Empty:
                raise AssertionError(f"mcp-remote did not log {pattern!r} within {timeout} s") from None
            if found:
                return found

    def stop(self):
        self.process.terminate()
        self.process.wait(30)


def test_mcp_remote_connects_with_oauth_headless_and_refreshes(server, tmp_path):
    mark = len(server.lines)
    remote = McpRemote(server.url, tmp_path)
    try:
        remote.send({"id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "stdio host", "version": "1"}}})
        remote.logged(r"Please authorize this client by visiting:")
        redirected, _ = consent(remote.logged(r"^(http://\S+/authorize\?\S+)").group(1), DEMO_KEY)
        assert redirected["iss"] == server.root
        remote.logged(rf"OAuth callback server running at http://127.0.0.1:{remote.callback_port}")
        callback = f"http://127.0.0.1:{remote.callback_port}/oauth/callback"
        assert requests.get(callback, params=redirected, timeout=60).status_code == 200  # the browser's last step
        assert remote.answer()["result"]["serverInfo"]["name"] == "colabhive-mcp"
        remote.send({"method": "notifications/initialized"})
        remote.send({"id": 2, "method": "tools/list"})
        names = {tool["name"] for tool in remote.answer()["result"]["tools"]}
        assert "alpha-classifier" in names and "beta-sentiment" not in names  # the key's tools
        time.sleep(TOKEN_TTL_S + 1)  # the access token expires; mcp-remote refreshes it
        remote.send({"id": 3, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "via mcp-remote"}}})
        assert remote.answer()["result"]["content"][0]["text"] == "via mcp-remote"
    finally:
        remote.stop()
    assert refreshes(server, mark)


async def python_sdk_step_up(server):
    transport, storage, shown, _ = python_sdk_host(server, grants=["read"])
    async with Client(transport, read_timeout_seconds=60) as client:
        before = {t.name for t in (await client.list_tools()).tools}
        granted = storage.tokens.scope
        written = await client.call_tool("crm-create-contact", {"name": "Ada", "email": "ada@example.com"})
        return before, granted, written, storage.tokens.scope, shown


def test_the_python_sdk_steps_up_from_a_read_only_grant(server, sandbox, journal):
    """Granted read-only tools, the host calls one that writes: 403 insufficient_scope, the SDK asks the
    user again for what the challenge names, and the same call then runs."""
    before, granted, written, stepped_up, consents = anyio.run(python_sdk_step_up, server)
    assert "echo" in before and "crm-create-contact" not in before and granted == "mcp:read"
    assert len(consents) == 2 and stepped_up != "mcp:read"  # asked again, with what the call needs
    assert not written.is_error and "ada@example.com" in written.content[0].text
    assert [e["slug"] for e in journal("invoke")] == ["crm-create-contact"]


def test_the_typescript_client_steps_up_past_its_refresh_token(server, sandbox, journal):
    """The TypeScript client (v2) holding a read-only grant and its refresh token: the 403's challenge
    makes it authorize again (a refresh could not widen the grant) and the call runs."""
    from ..support import ts_sdk

    home = ts_sdk.install_client()
    lines = ts_sdk.run("ts_stepup.mjs", {"url": server.url, "key": DEMO_KEY, "redirect": REDIRECT, "first": "read",
                                         "tool": "crm-create-contact",
                                         "arguments": {"name": "Ada", "email": "ada@example.com"}}, home=home)
    asked = [line for line in lines if "asked" in line]
    assert asked[0]["chose"] == "read" and asked[1]["asked"] == "mcp:read mcp:write"
    assert asked[1]["preselected"] == "no-billing"  # what the challenge named: the page offers it first
    granted = [line["granted"] for line in lines if "granted" in line]
    assert granted == ["mcp:read", "mcp:read mcp:write"]
    listed = next(line["listed"] for line in lines if "listed" in line)
    assert "crm-create-contact" not in listed and "echo" in listed
    called = next(line for line in lines if "called" in line)
    assert called["called"] is False and "ada@example.com" in called["text"] and called["consents"] == 2
    after = next(line["listed_after"] for line in lines if "listed_after" in line)
    assert "crm-create-contact" in after and "image-gen-tiny" not in after  # still no billing
    assert [e["slug"] for e in journal("invoke")] == ["crm-create-contact"]
