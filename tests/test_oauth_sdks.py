"""The official SDKs' OAuth clients against the hosted server (real gunicorn, two workers), end to
end on loopback: discovery from the 401, registration, the consent page filled in (a plain HTTP
POST of its form, as the user's browser would send it), the code exchanged, tools listed and
called, and a refresh once the access token (5 s here) has expired."""

import re
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

from .http_server import HttpServer, log_events
from .oauth_flow import REDIRECT, query

pytestmark = pytest.mark.real_clients

TOKEN_TTL_S = 5


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


def consent(url, key):
    """What the user does in the browser: open the page, paste the key, allow; the redirect's parameters."""
    page = requests.get(url, timeout=30)
    assert page.status_code == 200, page.text
    request = re.search(r'name="request" value="([^"]+)"', page.text).group(1)
    answer = requests.post(page.url.split("?")[0], data={"request": request, "key": key, "action": "allow"},
                           allow_redirects=False, timeout=60)
    assert answer.status_code == 303, answer.text
    return query(answer.headers["Location"])


async def python_sdk_session(server):
    redirected = {}

    async def redirect_handler(url):
        redirected.update(await anyio.to_thread.run_sync(consent, url, DEMO_KEY))

    async def callback_handler():
        return AuthorizationCodeResult(code=redirected["code"], state=redirected.get("state"),
                                       iss=redirected.get("iss"))

    storage = Memory()
    auth = OAuthClientProvider(server.url, OAuthClientMetadata(
        client_name="Python SDK host", redirect_uris=[REDIRECT], grant_types=["authorization_code", "refresh_token"],
        response_types=["code"], token_endpoint_auth_method="none"), storage, redirect_handler, callback_handler)
    transport = streamable_http_client(server.url, http_client=httpx2.AsyncClient(auth=auth, timeout=60))
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
