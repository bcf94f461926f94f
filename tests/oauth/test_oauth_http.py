"""OAuth through real gunicorn (two workers): discovery, the whole flow with plain requests, tokens
working wherever keys work (both eras, sessions, tool calls, logs), and every refusal the issue
names, each with the RFC's error. The official SDKs' OAuth clients are in test_oauth_sdks.py."""

import concurrent.futures
import contextlib
import json
import socket
import time

import pytest
import requests
import requests.adapters
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from colabhive_mcp.keys import ApiKey
from colabhive_mcp.sandbox import DEMO_KEY, DEMO_KEY_B
from colabhive_mcp.sandbox.contract import fingerprint

from ..support.fuzzing import FUZZ, SERVER_FAILURES, json_values, objects, text
from ..support.http_client import health_time, initialize, modern, post, rpc
from ..support.http_server import SECRET, HttpServer, free_port, log_events, rpc_messages
from ..support.nginx import Nginx
from ..support.oauth_flow import Flow, Pages, SignedClient, error_code, pkce, query

TASKS = {"io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(gateway_sandbox):
    server = HttpServer(gateway_sandbox.url, "--http-workers", "2", public=True,
                        env={"COLABHIVE_OAUTH_LOOPBACK_CLIENTS": "true", "COLABHIVE_OAUTH_CONSENTS_PER_MINUTE": "0",
                             "COLABHIVE_OAUTH_TOKEN_REQUESTS_PER_MINUTE": "0", "COLABHIVE_OAUTH_REFRESHES_PER_MINUTE": "0",
                             "COLABHIVE_OAUTH_DOCUMENT_FETCHES_PER_MINUTE": "0"})
    yield server
    server.stop()


@pytest.fixture
def flow(server):
    return Flow(server.root, server.url)


def events(server, name, since=0, count=1):
    """The log records ``name`` since line ``since``, waiting a little for ``count`` of them to arrive
    (the server's stderr is read by a thread)."""
    deadline = time.monotonic() + 10
    while True:
        found = log_events(server.stderr(since), name)
        if len(found) >= count or time.monotonic() > deadline:
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


@pytest.fixture(scope="module")
def one_worker(gateway_sandbox):
    """One worker (the GET stream and the legacy /sse transport keep their stream in one process),
    streams resumable, mutations confirmed."""
    server = HttpServer(gateway_sandbox.url, "--http-workers", "1", public=True, env={
        "COLABHIVE_OAUTH_CONSENTS_PER_MINUTE": "0", "COLABHIVE_RESUMABLE_STREAMS": "true",
        "COLABHIVE_CONFIRM_SIDE_EFFECTS": "require"})
    yield server
    server.stop()


def test_a_token_opens_its_keys_streams(one_worker):
    url, token = one_worker.url, Flow(one_worker.root, one_worker.url).tokens(DEMO_KEY)["access_token"]
    session = initialize(url, key=token)
    progress = rpc(url, "tools/call", {"name": "batch-report", "arguments": {"seconds": 1},
                                       "_meta": {"progressToken": "p"}}, key=token, session=session)
    assert progress.headers["Content-Type"].startswith("text/event-stream") and "report ready" in progress.text
    for key, status in ((token, 200), (DEMO_KEY, 200), (DEMO_KEY_B, 404)):  # the session is the key's
        with requests.get(url, stream=True, timeout=30, headers={
                **bearer(key), "Accept": "text/event-stream", "Mcp-Session-Id": session}) as stream:
            assert stream.status_code == status, (key, stream.status_code)
    with requests.get(one_worker.root + "/sse", headers={**bearer(token), "Accept": "text/event-stream"},
                      stream=True, timeout=30) as stream:  # the 2024-11-05 transport
        lines = stream.iter_lines(decode_unicode=True)
        assert next(lines) == "event: endpoint"
        messages = one_worker.root + next(lines).removeprefix("data: ")
        for body in ({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                         "protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "old", "version": "1"}}},
                     {"jsonrpc": "2.0", "method": "notifications/initialized"},
                     {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "echo", "arguments": {
                         "text": "over /sse"}}}):
            assert post(messages, body, key=token).status_code == 202
        answered = (json.loads(line[6:]) for line in lines if line.startswith("data: "))
        assert next(answered)["result"]["protocolVersion"] == "2024-11-05"
        assert next(answered)["result"]["content"][0]["text"] == "over /sse"
        assert post(messages, {"jsonrpc": "2.0", "id": 3, "method": "ping"}, key=DEMO_KEY_B).status_code == 404


def test_tasks_and_confirmations_asked_with_a_token_are_its_keys(one_worker):
    url, token = one_worker.url, Flow(one_worker.root, one_worker.url).tokens(DEMO_KEY)["access_token"]
    created = modern(url, "tools/call", {"name": "batch-report", "arguments": {"seconds": 1}, "_meta": TASKS},
                     key=token).json()["result"]
    assert created["resultType"] == "task", created
    task_id = created["taskId"]
    for key, readable in ((DEMO_KEY, True), (DEMO_KEY_B, False)):
        read = modern(url, "tasks/get", {"taskId": task_id, "_meta": TASKS}, key=key, **{"Mcp-Name": task_id}).json()
        assert ("result" in read) == readable, read
    session = initialize(url, key=token)  # 2025-11-25 tasks
    task = rpc_messages(rpc(url, "tools/call", {"name": "batch-report", "arguments": {"seconds": 1}, "task": {}},
                            key=token, session=session))[-1]["result"]["task"]
    result = rpc_messages(rpc(url, "tasks/result", {"taskId": task["taskId"]}, key=DEMO_KEY, session=session))
    assert "report ready" in result[-1]["result"]["content"][0]["text"]
    confirming = {"io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}
    contact = {"name": "Ada", "email": "ada@example.com"}
    asked = modern(url, "tools/call", {"name": "crm-create-contact", "arguments": contact, "_meta": confirming},
                   key=token).json()["result"]
    assert asked["resultType"] == "input_required", asked
    yes = {"name": "crm-create-contact", "arguments": contact, "_meta": confirming,
           "requestState": asked["requestState"],
           "inputResponses": {"confirm": {"action": "accept", "content": {"confirm": True}}}}
    done = modern(url, "tools/call", yes, key=DEMO_KEY).json()["result"]  # answered with the key itself
    assert done["resultType"] == "complete" and not done.get("isError"), done
    assert modern(url, "tools/call", yes, key=token).json()["result"]["resultType"] == "input_required"  # spent


def test_a_token_and_its_key_share_the_keys_limits(gateway_sandbox, sandbox):
    limited = HttpServer(gateway_sandbox.url, public=True, env={"COLABHIVE_TENANT_MAX_CONCURRENT": "1"})
    try:
        token = Flow(limited.root, limited.url).tokens(DEMO_KEY)["access_token"]
        created = modern(limited.url, "tools/call", {"name": "batch-report", "arguments": {"seconds": 30},
                                                     "_meta": TASKS}, key=token).json()["result"]
        assert created["resultType"] == "task", created  # it holds the key's one call place while it runs
        echo = {"name": "echo", "arguments": {"text": "x"}}
        refused = modern(limited.url, "tools/call", echo, key=DEMO_KEY).json()["result"]
        assert refused["isError"] and "already has 1 ColabHive calls running" in refused["content"][0]["text"]
        assert not modern(limited.url, "tools/call", echo, key=DEMO_KEY_B).json()["result"].get("isError")
        cancelled = modern(limited.url, "tasks/cancel", {"taskId": created["taskId"], "_meta": TASKS}, key=DEMO_KEY,
                           **{"Mcp-Name": created["taskId"]})
        assert cancelled.status_code == 200, cancelled.text
    finally:
        limited.stop()


def oauth_events(server):
    """``mcp_oauth_events_total`` by (event, reason), as /metrics adds it up over the workers."""
    text = requests.get(server.root + "/metrics", timeout=30).text
    return {(s.labels["event"], s.labels["reason"]): s.value for family in text_string_to_metric_families(text)
            for s in family.samples if s.name == "mcp_oauth_events_total"}


def test_issues_and_refusals_are_counted_and_logged_by_reason(server, flow):
    before, mark = oauth_events(server), len(server.lines)
    tokens = flow.tokens(DEMO_KEY)
    assert flow.refresh(tokens["refresh_token"] + "x").json()["error"] == "invalid_grant"
    assert modern(server.url, "tools/list", key=tokens["access_token"] + "x").status_code == 401
    after = oauth_events(server)
    changed = {event: after[event] - before.get(event, 0) for event in after if after[event] != before.get(event, 0)}
    assert changed == {("code_issued", ""): 1, ("token_issued", ""): 1, ("refused", "invalid_grant"): 1,
                       ("refused", "invalid_token"): 1}
    refused = events(server, "oauth.refused", mark, count=2)
    assert [e["reason"] for e in refused] == ["invalid_grant", "invalid_token"]
    assert all(e["detail"] and tokens["refresh_token"][10:40] not in json.dumps(e) for e in refused)


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
        from colabhive_mcp.store.memory import MemoryStore

        past = Grants(SECRET, short.url, MemoryStore(), 60, 600)
        past.access.clock = lambda: time.time() - 61
        expired = past.tokens(flow_grant(flow), "grant", 1)["access_token"]
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
        assert error_code(answer.text) == "invalid_request"
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


def test_a_key_that_cannot_be_checked_now_gets_the_page_again_with_when_to_try(flow, sandbox):
    key = "hive_checked_while_the_gateway_is_down_01"
    sandbox.add_key(key)
    sandbox.faults.add(route="manifest", kind="status", status=503, retry_after=7, count=None)
    flow.register()
    _, challenge = pkce()
    page = flow.authorize(challenge)
    answer = flow.consent(page.text, key)
    assert answer.status_code == 503 and "Location" not in answer.headers, answer.text[:300]
    assert int(answer.headers["Retry-After"]) >= 1 and 'name="request"' in answer.text


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


def test_a_signed_client_like_chatgpt_connects_across_the_workers(server, documents):
    """ChatGPT's shape: its document declares private_key_jwt with a jwks_uri; it signs each token
    request with its own key. Each request on a connection of its own (so to either worker): an
    assertion used once is refused on both."""
    client = SignedClient(documents, server.root + "/token", path="/oauth/gunicorn/client.json")
    http = requests.Session()
    http.headers["Connection"] = "close"
    flow = Flow(server.root, server.url, session=http)
    flow.client_id = client.client_id
    verifier, challenge = pkce()
    page = flow.authorize(challenge)
    assert page.status_code == 200 and "ChatGPT" in page.text, page.text
    code = query(flow.consent(page.text, DEMO_KEY).headers["Location"])["code"]
    assert flow.exchange(code, verifier).json()["error"] == "invalid_client"  # a stolen code alone gets nothing
    proof = client.proof()
    tokens = flow.exchange(code, verifier, **proof)
    assert tokens.status_code == 200, tokens.text
    listed = modern(server.url, "tools/list", key=tokens.json()["access_token"])
    assert listed.status_code == 200 and listed.json()["result"]["tools"]
    refresh_token = tokens.json()["refresh_token"]
    for _ in range(3):
        replayed = flow.refresh(refresh_token, **proof)
        assert replayed.status_code == 401 and "used before" in replayed.json()["error_description"]
    refreshed = flow.refresh(refresh_token, **client.proof())
    assert refreshed.status_code == 200, refreshed.text
    assert flow.refresh(refresh_token, **client.proof()).json()["error"] == "invalid_grant"


CLAUDE_CALLBACK = "https://claude.ai/api/mcp/auth_callback"
JWT_BEARER_GRANT = "urn:ietf:params:oauth:grant-type:jwt-bearer"
HOST_REGISTRATIONS = {  # what each host sends, as published (the hosts' own documents and trackers)
    "claude.ai's registration fallback": {"client_name": "Claude", "redirect_uris": [CLAUDE_CALLBACK],
                                          "grant_types": ["authorization_code", "refresh_token", JWT_BEARER_GRANT],
                                          "response_types": ["code"], "token_endpoint_auth_method": "none"},
    "a registration asking for a secret": {"client_name": "Claude", "redirect_uris": [CLAUDE_CALLBACK],
                                           "grant_types": ["authorization_code", "refresh_token"],
                                           "token_endpoint_auth_method": "client_secret_basic"},
    "Claude Code": {"client_name": "Claude Code", "redirect_uris": ["http://localhost:54213/callback"],
                    "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"],
                    "token_endpoint_auth_method": "none"},
}


@pytest.mark.parametrize("host", [*HOST_REGISTRATIONS, "claude.ai by its metadata document"])
def test_each_hosts_published_shape_connects_and_refreshes(server, documents, host):
    if host in HOST_REGISTRATIONS:
        metadata = HOST_REGISTRATIONS[host]
        flow = Flow(server.root, server.url, redirect_uri=metadata["redirect_uris"][0])
        answer = flow.send("POST", "/register", json=metadata)
        assert answer.status_code == 201, answer.text
        assert answer.json()["grant_types"] == ["authorization_code", "refresh_token"]
        assert answer.json()["token_endpoint_auth_method"] == "none"
        flow.client_id = answer.json()["client_id"]
    else:
        flow = Flow(server.root, server.url, redirect_uri=CLAUDE_CALLBACK)
        flow.client_id = documents.url("/oauth/mcp-oauth-client-metadata")
        documents.put("/oauth/mcp-oauth-client-metadata", {
            "client_id": flow.client_id, "client_name": "Claude", "client_uri": "https://claude.ai",
            "redirect_uris": [CLAUDE_CALLBACK], "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"], "token_endpoint_auth_method": "none"})
    verifier, challenge = pkce()
    page = flow.authorize(challenge)
    assert page.status_code == 200 and "Claude" in page.text, page.text
    answer = flow.consent(page.text, DEMO_KEY)
    assert answer.status_code == 303 and answer.headers["Location"].startswith(flow.redirect_uri + "?")
    tokens = flow.exchange(query(answer.headers["Location"])["code"], verifier)
    assert tokens.status_code == 200, tokens.text
    assert modern(server.url, "tools/list", key=tokens.json()["access_token"]).status_code == 200
    assert flow.refresh(tokens.json()["refresh_token"]).status_code == 200


def test_a_client_metadata_url_at_a_private_address_is_refused(server):
    flow = Flow(server.root, server.url)
    _, challenge = pkce()
    for client_id in ("https://10.1.2.3/client.json", "https://192.168.0.7/client.json", "https://[fd00::1]/c.json",
                      "https://169.254.169.254/latest/meta-data"):
        flow.client_id = client_id
        answer = flow.authorize(challenge)
        assert answer.status_code == 400 and "Location" not in answer.headers, client_id
        assert "private or reserved address" in answer.text and error_code(answer.text) == "invalid_client", client_id
    flow.client_id = "http://example.com/client.json"
    assert "must be at an https URL" in flow.authorize(challenge).text
    for client_id, error in (("hmcp_client_" + "A" * 60, "invalid_client"), ("", "invalid_request")):
        flow.client_id = client_id
        answer = flow.authorize(challenge)  # a client_id not issued here, none at all
        assert answer.status_code == 400 and "Location" not in answer.headers and error_code(answer.text) == error


# -- behind the shipped nginx site ---------------------------------------------------------------

@contextlib.contextmanager
def behind_nginx(gateway_sandbox):
    """One instance behind the shipped nginx site, whose address is its public_url: the site, started."""
    port = free_port()
    proxy = Nginx([f"127.0.0.1:{port}"])
    server = HttpServer(gateway_sandbox.url, port=port, env={"COLABHIVE_PUBLIC_URL": proxy.url})
    try:
        proxy.start()
        yield proxy
    finally:
        proxy.stop()
        server.stop()


def test_a_host_connects_with_oauth_through_nginx(gateway_sandbox):
    with behind_nginx(gateway_sandbox) as proxy:
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


@contextlib.contextmanager
def two_instances_behind_nginx(gateway_sandbox, consents_per_minute, **env):
    """Two instances (each with its default workers) behind the shipped nginx site; a registered
    client's flow through it, each request on a connection of its own (so to any nginx worker)."""
    ports = [free_port(), free_port()]
    proxy = Nginx([f"127.0.0.1:{port}" for port in ports])
    servers = []
    try:
        for port in ports:
            servers.append(HttpServer(gateway_sandbox.url, port=port, env={
                "COLABHIVE_PUBLIC_URL": proxy.url, "COLABHIVE_OAUTH_CONSENTS_PER_MINUTE": str(consents_per_minute),
                **env}))
        proxy.start()
        http = requests.Session()
        http.headers["Connection"] = "close"
        flow = Flow(proxy.root, proxy.url, session=http, verify=proxy.cert)
        flow.register()
        yield flow
    finally:
        proxy.stop()
        for server in servers:
            server.stop()


def test_a_code_and_a_refresh_token_work_once_behind_nginx_with_two_instances(gateway_sandbox):
    """Each instance remembers in its own store which codes and refresh tokens were used: the site
    sends every request of the token endpoint (and the consent page) to one of them."""
    with two_instances_behind_nginx(gateway_sandbox, 0) as flow:
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


def test_a_keys_tokens_reach_one_instance_so_its_budget_holds_behind_nginx(gateway_sandbox, sandbox, journal):
    """Every access token of a key, however many grants and renewals, begins with the key's affinity,
    by which the site balances them: four hosts' tokens of one key and a budget of three billable calls,
    on two instances, and three calls reach the gateway."""
    with two_instances_behind_nginx(gateway_sandbox, 0, COLABHIVE_BILLABLE_CALLS_PER_HOUR="3",
                                    COLABHIVE_SPEND_GUARD="refuse") as flow:
        tokens = []
        for _ in range(4):  # four grants (four hosts connecting), each with its own tokens
            verifier, challenge = pkce()
            tokens.append(flow.exchange(flow.code(DEMO_KEY, challenge), verifier).json()["access_token"])
        assert len({token[:19] for token in tokens}) == 1 and len(set(tokens)) == 4
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "image-gen-tiny", "arguments": {"prompt": "a hive", "size": 16}, "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}}
        headers = {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "image-gen-tiny",
                   "Accept": "application/json, text/event-stream"}
        results = [flow.send("POST", "/mcp", json=call, headers={**headers, **bearer(token)}).json()["result"]
                   for token in tokens]
    assert [bool(r.get("isError")) for r in results] == [False, False, False, True]
    assert len(journal("invoke")) == 3


class FromAddress(requests.adapters.HTTPAdapter):
    """Connections from one loopback source address (nginx limits each address to 20 requests a second)."""

    def __init__(self, address):
        self.address = address
        super().__init__()

    def init_poolmanager(self, *args, **options):
        super().init_poolmanager(*args, **options, source_address=(self.address, 0))


def test_used_grants_stay_used_behind_nginx_however_many_refreshes_other_clients_make(gateway_sandbox):
    """The review's attack, as deployed: the instance store at its smallest, another key's clients
    refreshing 1,200 times through the site (from 8 addresses, each within nginx's rate); the victim's
    redeemed code and spent refresh token are refused still (before, both worked again)."""
    with two_instances_behind_nginx(gateway_sandbox, 0, COLABHIVE_STORE_MAX_ENTRIES="1000",
                                    COLABHIVE_OAUTH_TOKEN_REQUESTS_PER_MINUTE="0",
                                    COLABHIVE_OAUTH_REFRESHES_PER_MINUTE="0") as victim:
        verifier, challenge = pkce()
        code = victim.code(DEMO_KEY, challenge)
        used_refresh = victim.exchange(code, verifier).json()["refresh_token"]
        assert victim.refresh(used_refresh).status_code == 200

        def churn(address):
            http = requests.Session()
            http.mount("https://", FromAddress(address))
            churner = Flow(victim.root, victim.resource, session=http, verify=victim.verify)
            refresh_token = churner.tokens(DEMO_KEY_B)["refresh_token"]
            for _ in range(150):
                started = time.monotonic()
                answer = churner.refresh(refresh_token)
                assert answer.status_code == 200, answer.text
                refresh_token = answer.json()["refresh_token"]
                time.sleep(max(0.0, 0.07 - (time.monotonic() - started)))  # at most ~14 a second

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(churn, [f"127.0.0.{i}" for i in range(2, 10)]))
        replayed_code, replayed_refresh = victim.exchange(code, verifier), victim.refresh(used_refresh)
    assert (replayed_code.status_code, replayed_refresh.status_code) == (400, 400), (replayed_code.text,
                                                                                   replayed_refresh.text)
    assert "already used" in replayed_code.json()["error_description"]
    assert "already used" in replayed_refresh.json()["error_description"]


def test_a_signed_clients_assertion_works_once_behind_nginx_with_two_instances(gateway_sandbox, documents):
    with two_instances_behind_nginx(gateway_sandbox, 0, COLABHIVE_OAUTH_LOOPBACK_CLIENTS="true") as flow:
        client = SignedClient(documents, flow.root + "/token", path="/oauth/nginx/client.json")
        flow.client_id = client.client_id
        verifier, challenge = pkce()
        code = flow.code(DEMO_KEY, challenge)
        proof = client.proof()
        first = flow.exchange(code, verifier, **proof)
        assert first.status_code == 200, first.text
        for _ in range(4):  # each on a new connection: to any nginx worker, any instance without the affinity
            replayed = flow.refresh(first.json()["refresh_token"], **proof)
            assert replayed.status_code == 401 and "used before" in replayed.json()["error_description"]
        assert flow.refresh(first.json()["refresh_token"], **client.proof()).status_code == 200


def test_the_consent_budget_holds_behind_nginx_with_two_instances(gateway_sandbox):
    """``oauth_consents_per_minute`` where it is used: the consent page's answers reach one instance
    (the site sends /authorize there), whose workers count them together; past the budget, 429 with
    Retry-After, from whichever nginx worker the browser's connection meets."""
    with two_instances_behind_nginx(gateway_sandbox, 3) as flow:
        pages = [flow.authorize(pkce()[1]).text for _ in range(8)]  # opened first, then answered one by one
        answers = [flow.consent(page, DEMO_KEY) for page in pages]
    assert [a.status_code for a in answers] == [303] * 3 + [429] * 5, [a.text[:200] for a in answers]
    assert 0 < int(answers[-1].headers["Retry-After"]) <= 60


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


def test_a_refresh_for_a_key_no_worker_holds_asks_the_gateway_once(gateway_sandbox, sandbox, journal):
    """The refresh's tenant is made for it (evicted since its consent, its copy out of date): the
    gateway's answer to that check is the refresh's answer, not asked for a second time."""
    key = "hive_refreshed_while_evicted_01"
    sandbox.add_key(key)
    one = HttpServer(gateway_sandbox.url, "--http-workers", "1", public=True, env={
        "COLABHIVE_OAUTH_LOOPBACK_CLIENTS": "true", "COLABHIVE_POOL_SIZE": "1", "COLABHIVE_MANIFEST_TTL": "1"})
    try:
        flow = Flow(one.root, one.url)
        tokens = flow.tokens(key)
        assert modern(one.url, "tools/list", key=DEMO_KEY).status_code == 200  # evicts the key's tenant
        time.sleep(1.5)  # its manifest is out of date
        asked = len([e for e in journal("manifest") if e["key"] == fingerprint(key) and e["cursor"] is None])
        refreshed = flow.refresh(tokens["refresh_token"])
        assert refreshed.status_code == 200, refreshed.text
        after = [e for e in journal("manifest") if e["key"] == fingerprint(key) and e["cursor"] is None]
        assert len(after) - asked == 1
    finally:
        one.stop()


def test_client_documents_that_never_come_hold_a_few_threads_not_all(gateway_sandbox):
    """30 consent pages at once, each naming a client whose metadata document never comes: 8 wait for
    theirs (5 s at most), the others are refused at once (503, Retry-After), and /healthz is answered."""
    with socket.socket() as silent:  # connections wait in its backlog, never read
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        one = HttpServer(gateway_sandbox.url, "--http-workers", "1", "--http-threads", "16", public=True,
                         env={"COLABHIVE_OAUTH_LOOPBACK_CLIENTS": "true"})
        try:
            pages = [f"{one.root}/authorize?client_id=http://127.0.0.1:{silent.getsockname()[1]}/client-{i}.json"
                     for i in range(30)]
            with concurrent.futures.ThreadPoolExecutor(len(pages)) as pool:
                answers = [pool.submit(requests.get, page, timeout=30) for page in pages]
                time.sleep(1)
                assert health_time(one, probes=1) < 2  # one probe: a second one would find the fetches over
                answers = [a.result() for a in answers]
        finally:
            one.stop()
    busy = [a for a in answers if a.status_code == 503]
    assert len(busy) >= len(pages) - 8 and all(a.headers["Retry-After"] == "5" for a in busy)
    assert all("fetching many client metadata documents" in a.text for a in busy)
    assert all(a.status_code == 400 and "too slow to arrive" in a.text for a in answers if a.status_code != 503), \
        [(a.status_code, a.text[:200]) for a in answers]


# -- what the security review found besides ------------------------------------------------------

# URLs that parsers refuse or read differently: each was once a 500 somewhere
awkward_urls = st.sampled_from(["https://[abc/cb", "http://[::1", "https://a.example:99999/cb", "https://é.example/x",
                                "https://a.example\\@b.example/", "http://127.0.0.1:0/cb", "https://a.example/%ZZ",
                                "https://user@a.example/cb", "cursor://x", "https://a.example/cb#frag"])
registrations = st.one_of(
    objects, json_values,
    st.fixed_dictionaries({}, optional={"redirect_uris": json_values | st.lists(awkward_urls | text | json_values,
                                                                                max_size=3),
                                        "client_name": json_values, "grant_types": json_values,
                                        "response_types": json_values, "token_endpoint_auth_method": json_values}))
token_forms = st.dictionaries(st.sampled_from(["grant_type", "code", "refresh_token", "client_id", "redirect_uri",
                                               "code_verifier", "resource", "scope", "client_assertion",
                                               "client_assertion_type"]) | text, awkward_urls | text, max_size=6)


def test_register_answers_any_body_with_201_or_a_400_never_a_500(server):
    mark = len(server.lines)

    @settings(FUZZ, max_examples=120)
    @given(body=st.one_of(registrations.map(lambda v: json.dumps(v).encode("utf-8", "surrogatepass")),
                          st.binary(max_size=200), st.just(b"[" * 100_000),
                          st.just(b'{"redirect_uris": ["\\ud800"], "client_name": "\\udfff"}')))
    def register(body):
        answer = requests.post(server.root + "/register", data=body, headers={"Content-Type": "application/json"},
                               timeout=30)
        assert answer.status_code in (201, 400), (answer.status_code, answer.text[:300])
        assert ("client_id" in answer.json()) if answer.status_code == 201 else answer.json()["error"]

    register()
    assert_no_failures(server, mark)


def test_the_token_endpoint_answers_any_form_with_an_oauth_error_never_a_500(server):
    mark = len(server.lines)

    @settings(FUZZ, max_examples=120)
    @given(form=token_forms)
    def token(form):
        answer = requests.post(server.root + "/token", data={k.encode("utf-8", "surrogatepass"): v.encode(
            "utf-8", "surrogatepass") for k, v in form.items()}, timeout=30)
        assert answer.status_code in (400, 401), (answer.status_code, answer.text[:300])
        assert answer.json()["error"] and "access_token" not in answer.json()

    token()
    assert_no_failures(server, mark)


def test_authorize_answers_any_query_with_a_page_or_a_redirect_never_a_500(server):
    mark = len(server.lines)

    @settings(FUZZ, max_examples=80)
    @given(query=st.dictionaries(st.sampled_from(["client_id", "redirect_uri", "resource", "response_type",
                                                  "code_challenge", "code_challenge_method", "state", "scope"]),
                                 awkward_urls | text, max_size=6))
    def authorize(query):
        answer = requests.get(server.root + "/authorize", params={k.encode("utf-8", "surrogatepass"): v.encode(
            "utf-8", "surrogatepass") for k, v in query.items()}, allow_redirects=False, timeout=30)
        assert answer.status_code in (200, 303, 400, 429, 503), (answer.status_code, answer.text[:300])

    authorize()
    assert_no_failures(server, mark)


def assert_no_failures(server, since):
    """The server kept serving and logged no unhandled exception since line ``since``."""
    assert requests.get(server.root + "/healthz", timeout=10).json() == {"status": "ok"}
    time.sleep(0.1)  # (its stderr is read by a thread)
    failures = [line for line in server.stderr(since).splitlines() if SERVER_FAILURES.search(line)]
    assert not failures, "\n".join(failures[:20])


# -- the server card (SEP-2127) ------------------------------------------------------------------

def test_the_server_card_says_who_the_server_is_and_how_to_connect_without_a_key(server):
    card_url = server.root + "/.well-known/mcp/server-card"
    card = requests.get(card_url, headers={"Origin": "https://registry.example"}, timeout=10)
    assert card.status_code == 200 and card.headers["Content-Type"] == "application/json"
    assert card.headers["Access-Control-Allow-Origin"] == "*" and "max-age=3600" in card.headers["Cache-Control"]
    body = card.json()
    assert body["name"] == "com.colabhive/mcp" and body["$schema"].endswith("/server-card.schema.json")
    streamable = body["remotes"][0]
    assert streamable["type"] == "streamable-http" and streamable["url"] == server.url
    assert streamable["authentication"] == {"required": True, "schemes": ["bearer", "oauth2"]}
    assert streamable["headers"][0]["name"] == "Authorization" and streamable["headers"][0]["isSecret"] is True
    assert body["remotes"][1]["url"] == server.root + "/sse"
    discovered = modern(server.url, "server/discover").json()["result"]
    assert streamable["supportedProtocolVersions"] == discovered["supportedVersions"]
    assert body["capabilities"] == discovered["capabilities"] and "tools" not in body  # (each key's own)
    for credential in ({"Authorization": f"Bearer {DEMO_KEY}"}, {"X-API-Key": DEMO_KEY_B}):
        assert requests.get(card_url, headers=credential, timeout=10).json() == body  # nothing of a tenant's
    preflight = requests.options(card_url, headers={"Origin": "https://registry.example",
                                                    "Access-Control-Request-Method": "GET"}, timeout=10)
    assert preflight.status_code == 204 and preflight.headers["Access-Control-Allow-Origin"] == "*"
    assert requests.post(card_url, timeout=10).status_code == 405


def test_the_server_card_is_served_behind_nginx_at_the_public_address(gateway_sandbox):
    with behind_nginx(gateway_sandbox) as proxy:
        card = requests.get(proxy.root + "/.well-known/mcp/server-card", timeout=30, verify=proxy.cert)
    assert card.status_code == 200 and card.json()["remotes"][0]["url"] == proxy.url


def test_the_per_key_refresh_token_and_document_limits_hold_across_the_workers(gateway_sandbox, documents):
    """The limits where they are used: a hosted server with its two workers, every request on a new
    connection (so to either worker); the counts are the instance's."""
    limited = HttpServer(gateway_sandbox.url, "--http-workers", "2", public=True, env={
        "COLABHIVE_OAUTH_LOOPBACK_CLIENTS": "true", "COLABHIVE_OAUTH_CONSENTS_PER_MINUTE": "0",
        "COLABHIVE_OAUTH_REFRESHES_PER_MINUTE": "2", "COLABHIVE_OAUTH_TOKEN_REQUESTS_PER_MINUTE": "6",
        "COLABHIVE_OAUTH_DOCUMENT_FETCHES_PER_MINUTE": "2"})
    try:
        http = requests.Session()
        http.headers["Connection"] = "close"
        flow = Flow(limited.root, limited.url, session=http)
        refresh_token = flow.tokens(DEMO_KEY)["refresh_token"]  # token request 1
        statuses = []
        for _ in range(3):  # token requests 2 to 4
            answer = flow.refresh(refresh_token)
            statuses.append(answer.status_code)
            refresh_token = answer.json().get("refresh_token", refresh_token)
        assert statuses == [200, 200, 429] and "refreshes of this key's grants" in answer.text
        guesses = [flow.refresh("hmcp_rt_guess").status_code for _ in range(3)]  # token requests 5 to 7
        assert guesses == [400, 400, 429]
        fetched = []
        for i in range(3):
            flow.client_id = documents.url(f"/limits/missing-{i}.json")
            fetched.append(flow.authorize(pkce()[1]).status_code)
        assert fetched == [400, 400, 429]
    finally:
        limited.stop()
