"""OAuth through real gunicorn (two workers): discovery, the whole flow with plain requests, tokens
working wherever keys work (both eras, sessions, tool calls, logs), and every refusal the issue
names, each with the RFC's error. The official SDKs' OAuth clients are in test_oauth_sdks.py."""

import json
import time

import pytest
import requests

from colabhive_mcp.keys import ApiKey
from colabhive_mcp.sandbox import DEMO_KEY, DEMO_KEY_B

from .http_server import HttpServer, SECRET, free_port, log_events
from .nginx import Nginx
from .oauth_flow import Flow, Pages, pkce, query
from .test_http import initialize, modern, rpc

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(gateway_sandbox):
    server = HttpServer(gateway_sandbox.url, "--http-workers", "2", public=True,
                        env={"COLABHIVE_OAUTH_LOOPBACK_CLIENTS": "true", "COLABHIVE_OAUTH_CONSENTS_PER_MINUTE": "0"})
    yield server
    server.stop()


@pytest.fixture
def flow(server):
    return Flow(server.root, server.url)


def events(server, name, since=0, wait=True):
    """The log records ``name`` since line ``since``, waiting a little for the first to arrive (the
    server's stderr is read by a thread)."""
    deadline = time.monotonic() + 10
    while True:
        found = log_events(server.stderr(since), name)
        if found or not wait or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def bearer(token):
    return {"Authorization": f"Bearer {token}"}


# -- the resource server -------------------------------------------------------------------------

def test_a_request_without_credentials_is_challenged_to_discover_the_authorization_server(server):
    answer = modern(server.url, "tools/list", key=None)
    assert answer.status_code == 401
    metadata_url = server.root + "/.well-known/oauth-protected-resource/mcp"
    assert answer.headers["WWW-Authenticate"] == f'Bearer resource_metadata="{metadata_url}", scope="mcp"'
    for path in ("/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"):
        resource = requests.get(server.root + path, timeout=10).json()
        assert resource["resource"] == server.url and resource["authorization_servers"] == [server.root]
    metadata = requests.get(server.root + "/.well-known/oauth-authorization-server", timeout=10).json()
    assert metadata["issuer"] == server.root and metadata["code_challenge_methods_supported"] == ["S256"]
    assert metadata["authorization_response_iss_parameter_supported"] is True
    assert metadata["client_id_metadata_document_supported"] is True


def test_a_key_is_never_challenged_and_a_rejected_key_is_refused_as_before(server):
    assert modern(server.url, "tools/list").status_code == 200
    assert modern(server.url, "tools/list", key=None, **{"X-API-Key": DEMO_KEY}).status_code == 200
    rejected = modern(server.url, "tools/list", key="hive_not_a_real_key")
    assert rejected.status_code == 401 and rejected.headers["WWW-Authenticate"] == 'Bearer error="invalid_token"'


# -- the flow, and tokens working wherever keys work -------------------------------------------------

def test_a_token_acts_as_its_key_in_both_eras(server, flow):
    mark = len(server.lines)
    tokens = flow.tokens(DEMO_KEY)
    assert tokens["token_type"] == "Bearer" and tokens["expires_in"] == 3600 and len(tokens["access_token"]) <= 255
    token = tokens["access_token"]
    by_key = modern(server.url, "tools/list").json()["result"]["tools"]
    assert modern(server.url, "tools/list", key=token).json()["result"]["tools"] == by_key
    called = modern(server.url, "tools/call", {"name": "echo", "arguments": {"text": "via a token"}}, key=token)
    assert "via a token" in json.dumps(called.json()["result"])
    session = initialize(server.url, key=token)  # legacy: the session is the key's, whichever way it came
    listed = rpc(server.url, "tools/list", key=DEMO_KEY, session=session)
    assert listed.status_code == 200 and len(listed.json()["result"]["tools"]) == len(by_key)
    issued = events(server, "http.session.issued", mark)
    assert issued and issued[-1]["tenant"] == ApiKey.of(DEMO_KEY).log_id
    assert events(server, "oauth.code.issued", mark) and events(server, "oauth.token.issued", mark)
    logged = server.stderr(mark)
    assert DEMO_KEY not in logged and token not in logged and tokens["refresh_token"] not in logged


def test_a_refresh_token_rotates_and_is_used_once(server, flow):
    tokens = flow.tokens(DEMO_KEY)
    renewed = flow.refresh(tokens["refresh_token"])
    assert renewed.status_code == 200, renewed.text
    assert renewed.json()["refresh_token"] != tokens["refresh_token"]
    assert modern(server.url, "tools/list", key=renewed.json()["access_token"]).status_code == 200
    again = flow.refresh(tokens["refresh_token"])
    assert again.status_code == 400 and again.json()["error"] == "invalid_grant"
    assert flow.refresh(renewed.json()["refresh_token"]).status_code == 200


# -- refusals ----------------------------------------------------------------------------------

def test_a_wrong_pkce_verifier_is_invalid_grant(flow):
    flow.register()
    verifier, challenge = pkce()
    answer = flow.exchange(flow.code(DEMO_KEY, challenge), pkce()[0])
    assert answer.status_code == 400 and answer.json()["error"] == "invalid_grant"
    assert "PKCE" in answer.json()["error_description"]


def test_a_code_is_redeemed_once_across_the_workers(server, flow):
    flow.register()
    deadline = time.monotonic() + 60
    while True:
        mark = len(server.lines)
        verifier, challenge = pkce()
        code = flow.code(DEMO_KEY, challenge)
        first = requests.post(server.root + "/token", data={
            "grant_type": "authorization_code", "code": code, "redirect_uri": flow.redirect_uri,
            "client_id": flow.client_id, "code_verifier": verifier}, headers={"Connection": "close"}, timeout=30)
        second = requests.post(server.root + "/token", data={
            "grant_type": "authorization_code", "code": code, "redirect_uri": flow.redirect_uri,
            "client_id": flow.client_id, "code_verifier": verifier}, headers={"Connection": "close"}, timeout=30)
        assert first.status_code == 200 and second.status_code == 400, (first.text, second.text)
        assert second.json() == {"error": "invalid_grant", "error_description": "The authorization code was already "
                                                                                 "used."}
        issued = events(server, "oauth.token.issued", mark)[-1]["pid"]
        refused = events(server, "oauth.refused", mark)[-1]
        assert "already used" in refused["detail"]
        if refused["pid"] != issued:
            break  # redeemed on one worker, refused on the other
        assert time.monotonic() < deadline, "the two redemptions never reached different workers"


def test_a_token_for_another_resource_is_refused(gateway_sandbox, server, flow):
    other = HttpServer(gateway_sandbox.url, public=True)  # same secret, another public URL
    try:
        token = Flow(other.root, other.url).tokens(DEMO_KEY)["access_token"]
        answer = modern(server.url, "tools/list", key=token)
        assert answer.status_code == 401
        assert answer.headers["WWW-Authenticate"].startswith('Bearer error="invalid_token", resource_metadata=')
        assert "another resource" in answer.json()["error"]["message"]
    finally:
        other.stop()
    flow.register()
    verifier, challenge = pkce()
    exchanged = flow.exchange(flow.code(DEMO_KEY, challenge), verifier, resource="https://elsewhere.example/mcp")
    assert exchanged.status_code == 400 and exchanged.json()["error"] == "invalid_target"
    redirected = flow.authorize(challenge, resource="https://elsewhere.example/mcp")
    assert redirected.status_code == 303 and query(redirected.headers["Location"])["error"] == "invalid_target"


def test_an_expired_token_is_refused_with_the_challenge(gateway_sandbox):
    short = HttpServer(gateway_sandbox.url, public=True, env={"COLABHIVE_OAUTH_ACCESS_TOKEN_TTL": "60"})
    try:
        flow = Flow(short.root, short.url)
        tokens = flow.tokens(DEMO_KEY)
        from colabhive_mcp.oauth.grants import Grants  # a token sealed 61 s ago, as the server would have
        from colabhive_mcp.store import MemoryStore

        past = Grants(SECRET, short.url, MemoryStore(), 60, 600)
        past.access.clock = lambda: time.time() - 61
        expired = past.tokens(flow_grant(flow))["access_token"]
        answer = modern(short.url, "tools/list", key=expired)
        assert answer.status_code == 401 and "expired" in answer.json()["error"]["message"]
        assert 'error="invalid_token"' in answer.headers["WWW-Authenticate"]
        assert modern(short.url, "tools/list", key=tokens["access_token"]).status_code == 200
    finally:
        short.stop()


def flow_grant(flow):
    from colabhive_mcp.oauth.grants import Grant

    return Grant(DEMO_KEY, flow.client_id, flow.resource)


def test_a_tampered_token_is_refused(server, flow):
    token = flow.tokens(DEMO_KEY)["access_token"]
    middle = len(token) // 2
    tampered = token[:middle] + ("A" if token[middle] != "A" else "B") + token[middle + 1:]
    answer = modern(server.url, "tools/list", key=tampered)
    assert answer.status_code == 401 and 'error="invalid_token"' in answer.headers["WWW-Authenticate"]
    refreshed = flow.refresh(flow.tokens(DEMO_KEY)["refresh_token"][:-2] + "xx")
    assert refreshed.status_code == 400 and refreshed.json()["error"] == "invalid_grant"


def test_a_foreign_redirect_uri_gets_an_error_page_never_a_redirect(flow):
    flow.register()
    _, challenge = pkce()
    for uri in ("https://attacker.example/callback", "http://127.0.0.1:45678/other"):
        answer = flow.authorize(challenge, redirect_uri=uri)
        assert answer.status_code == 400 and "Location" not in answer.headers
        assert "redirect_uri is not one this application registered" in answer.text
    loopback_port = flow.authorize(challenge, redirect_uri="http://127.0.0.1:9999/callback")
    assert loopback_port.status_code == 200  # RFC 8252: a loopback redirect on any port
    refused = requests.post(flow.root + "/register", json={"redirect_uris": ["http://attacker.example/cb"]}, timeout=10)
    assert refused.status_code == 400 and refused.json()["error"] == "invalid_redirect_uri"


def test_a_rejected_key_gets_the_page_again_and_no_code(flow):
    flow.register()
    _, challenge = pkce()
    page = flow.authorize(challenge)
    answer = flow.consent(page.text, DEMO_KEY_B + "x")
    assert answer.status_code == 401 and "Location" not in answer.headers
    assert "ColabHive did not accept this key" in answer.text and 'name="request"' in answer.text
    denied = flow.consent(page.text, "", action="deny")
    assert denied.status_code == 303 and query(denied.headers["Location"])["error"] == "access_denied"


# -- client metadata documents ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def documents():
    pages = Pages()
    yield pages
    pages.close()


def test_a_client_known_by_its_metadata_document_gets_tokens(server, documents):
    client_id = documents.url("/client.json")
    documents.put("/client.json", {"client_id": client_id, "client_name": "Doc Client",
                                   "redirect_uris": ["http://127.0.0.1:45678/callback"]})
    flow = Flow(server.root, server.url)
    flow.client_id = client_id
    verifier, challenge = pkce()
    page = flow.authorize(challenge)
    assert page.status_code == 200 and "Doc Client" in page.text and "127.0.0.1" in page.text
    answer = flow.consent(page.text, DEMO_KEY)
    assert query(answer.headers["Location"])["iss"] == server.root
    exchanged = flow.exchange(query(answer.headers["Location"])["code"], verifier)
    assert exchanged.status_code == 200, exchanged.text


def test_a_client_metadata_url_at_a_private_address_is_refused(server):
    flow = Flow(server.root, server.url)
    _, challenge = pkce()
    for client_id in ("https://10.1.2.3/client.json", "https://192.168.0.7/client.json", "https://[fd00::1]/c.json",
                      "https://169.254.169.254/latest/meta-data"):
        flow.client_id = client_id
        answer = flow.authorize(challenge)
        assert answer.status_code == 400 and "Location" not in answer.headers, client_id
        assert "private or reserved address" in answer.text, client_id
    flow.client_id = "http://example.com/client.json"
    assert "must be at an https URL" in flow.authorize(challenge).text


# -- behind the shipped nginx site ---------------------------------------------------------------

def test_a_host_connects_with_oauth_through_nginx(gateway_sandbox):
    port = free_port()
    proxy = Nginx([f"127.0.0.1:{port}"])
    server = HttpServer(gateway_sandbox.url, port=port, env={"COLABHIVE_PUBLIC_URL": proxy.url})
    try:
        proxy.start()
        http = requests.Session()
        challenged = http.post(proxy.url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                               headers={"Accept": "application/json, text/event-stream"}, timeout=30, verify=proxy.cert)
        assert challenged.status_code == 401
        metadata_url = proxy.root + "/.well-known/oauth-protected-resource/mcp"
        assert f'resource_metadata="{metadata_url}"' in challenged.headers["WWW-Authenticate"]
        resource = http.get(metadata_url, timeout=30, verify=proxy.cert).json()
        assert resource["authorization_servers"] == [proxy.root]
        issuer = http.get(proxy.root + "/.well-known/oauth-authorization-server", timeout=30, verify=proxy.cert)
        assert issuer.json()["issuer"] == proxy.root
        token = Flow(proxy.root, proxy.url, session=http, verify=proxy.cert).tokens(DEMO_KEY)["access_token"]
        listed = http.post(proxy.url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}},
            headers={"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2026-07-28",
                     "Mcp-Method": "tools/list", **bearer(token)}, timeout=30, verify=proxy.cert)
        assert listed.status_code == 200 and listed.json()["result"]["tools"], listed.text
    finally:
        proxy.stop()
        server.stop()


def test_a_code_and_a_refresh_token_work_once_behind_nginx_with_two_instances(gateway_sandbox):
    """Each instance remembers in its own store which codes and refresh tokens were used: the site
    sends every request of the token endpoint (and the consent page) to one of them."""
    ports = [free_port(), free_port()]
    proxy = Nginx([f"127.0.0.1:{port}" for port in ports])
    servers = []
    try:
        for port in ports:
            servers.append(HttpServer(gateway_sandbox.url, port=port, env={
                "COLABHIVE_PUBLIC_URL": proxy.url, "COLABHIVE_OAUTH_CONSENTS_PER_MINUTE": "0"}))
        proxy.start()
        http = requests.Session()
        http.headers["Connection"] = "close"  # each request on a connection of its own, to any nginx worker
        flow = Flow(proxy.root, proxy.url, session=http, verify=proxy.cert)
        flow.register()
        for _ in range(4):  # (round-robin would send the second use to the other instance half of the time)
            verifier, challenge = pkce()
            code = flow.code(DEMO_KEY, challenge)
            first, again = flow.exchange(code, verifier), flow.exchange(code, verifier)
            assert first.status_code == 200 and again.status_code == 400, (first.text, again.text)
            assert again.json()["error"] == "invalid_grant" and "already used" in again.json()["error_description"]
            refresh_token = first.json()["refresh_token"]
            refreshed, replayed = flow.refresh(refresh_token), flow.refresh(refresh_token)
            assert refreshed.status_code == 200 and replayed.status_code == 400, (refreshed.text, replayed.text)
            assert replayed.json()["error"] == "invalid_grant" and "already used" in replayed.json()["error_description"]
    finally:
        proxy.stop()
        for server in servers:
            server.stop()


def test_a_refresh_is_refused_once_the_gateway_rejects_the_key(server, sandbox):
    key = "hive_revoked_before_a_refresh_01"
    sandbox.add_key(key)
    flow = Flow(server.root, server.url)
    tokens = flow.tokens(key)
    assert modern(server.url, "tools/list", key=tokens["access_token"]).status_code == 200
    sandbox.reset()  # the gateway no longer knows the key
    refused = flow.refresh(tokens["refresh_token"])
    assert refused.status_code == 400 and refused.json()["error"] == "invalid_grant", refused.text
    assert "no longer accepts the key" in refused.json()["error_description"]
