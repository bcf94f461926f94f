"""Scoped grants: the person chooses on the consent page what an application gets (all tools,
read-only, all but billable ones); the token carries it; the list shows only what it allows, and a
call outside it is a 403 whose challenge asks for what it needs (step-up). Keys keep all their rights."""

import re

import pytest
import requests

from colabhive_mcp import scopes
from colabhive_mcp.oauth.grants import Grant, Grants
from colabhive_mcp.oauth.errors import OAuthError
from colabhive_mcp.sandbox import DEMO_KEY
from colabhive_mcp.store.memory import MemoryStore

from ..support.http_client import initialize, modern, rpc
from ..support.http_server import HttpServer, log_events
from ..support.oauth_flow import Flow

RESOURCE = "https://mcp.example.com/mcp"
CONTACT = {"name": "Ada", "email": "ada@example.com"}
IMAGE = {"prompt": "a hive", "size": 16}


def test_what_each_scope_allows():
    read, no_billing = scopes.parse("mcp:read"), scopes.parse("mcp:write")  # read is under any narrower one
    assert no_billing == {"mcp:read", "mcp:write"} and scopes.parse(None) == scopes.parse("mcp mcp:read") == {"mcp"}
    assert scopes.parse("mcp:admin") is None and scopes.parse("") == {"mcp"}
    assert scopes.asked("openid mcp:read") == read and scopes.asked("offline_access") == {"mcp"}
    assert scopes.allows(read, [], False) and not scopes.allows(read, ["writes"], False)
    assert not scopes.allows(read, None, False)  # a tool that does not say what it does is no read-only tool
    assert scopes.allows(no_billing, ["writes"], False) and not scopes.allows(no_billing, ["billing"], True)
    assert not scopes.allows(no_billing, [], True)  # named billable by the operator
    assert scopes.spelt(scopes.needed(["writes", "billing"], True) | read) == "mcp:read mcp:write mcp:billing"
    assert scopes.covers(scopes.parse("mcp"), read) and not scopes.covers(read, scopes.parse("mcp"))


def grants():
    return Grants("s" * 32, RESOURCE, MemoryStore(), 3600, 86400)


def test_a_grant_keeps_its_scope_through_code_token_and_refresh_and_never_widens():
    issuer = grants()
    verifier = "v" * 43
    from colabhive_mcp.oauth.grants import s256

    code = issuer.code(Grant(DEMO_KEY, "client", RESOURCE, "mcp:read mcp:write"), "https://app/cb", s256(verifier))
    tokens = issuer.redeem({"code": code, "client_id": "client", "redirect_uri": "https://app/cb",
                            "code_verifier": verifier}, None)
    assert tokens["scope"] == "mcp:read mcp:write"
    assert issuer.key_of(tokens["access_token"]) == (DEMO_KEY, {"mcp:read", "mcp:write"})
    with pytest.raises(OAuthError) as widened:
        issuer.refresh_grant({"refresh_token": tokens["refresh_token"], "client_id": "client", "scope": "mcp"}, None)
    assert widened.value.error == "invalid_scope"
    narrowed = issuer.refresh_grant({"refresh_token": tokens["refresh_token"], "client_id": "client",
                                     "scope": "mcp:read"}, None)
    again = issuer.rotate(narrowed, None)
    assert again["scope"] == "mcp:read" and issuer.key_of(again["access_token"])[1] == {"mcp:read"}
    restored = issuer.rotate(issuer.refresh_grant({"refresh_token": again["refresh_token"], "client_id": "client"},
                                                  None), None)
    assert restored["scope"] == "mcp:read mcp:write"  # the refresh token kept the grant's scope (RFC 6749 §6)
    unknown = issuer.refresh_grant({"refresh_token": restored["refresh_token"], "client_id": "client",
                                    "scope": "offline_access"}, None)
    assert issuer.rotate(unknown, None)["scope"] == "mcp:read mcp:write"  # asking nothing it knows: the grant
    full = issuer.tokens(Grant(DEMO_KEY, "client", RESOURCE), "g", 1)
    assert full["scope"] == "mcp" and issuer.key_of(full["access_token"])[1] == {"mcp"}
    assert len(tokens["access_token"]) - len(full["access_token"]) <= 12  # a letter a scope: tokens stay short


@pytest.fixture(scope="module")
def server(gateway_sandbox):
    server = HttpServer(gateway_sandbox.url, public=True, env={
        "COLABHIVE_OAUTH_CONSENTS_PER_MINUTE": "0", "COLABHIVE_OAUTH_TOKEN_REQUESTS_PER_MINUTE": "0"})
    yield server
    server.stop()


def names(answer):
    return {tool["name"] for tool in answer.json()["result"]["tools"]}


def granted(server, grant):
    """Connect as a host does, the person choosing ``grant`` on the consent page: the token response,
    and the tools its access token lists."""
    token = Flow(server.root, server.url).tokens(DEMO_KEY, grant=grant)
    return token, names(modern(server.url, "tools/list", key=token["access_token"]))


def test_the_consent_page_offers_the_choice_and_the_metadata_names_the_scopes(server):
    flow = Flow(server.root, server.url)
    flow.register()
    page = flow.authorize("c" * 43, scope="mcp:read").text
    choices = re.findall(r'<input type="radio" id="grant-([a-z-]+)" name="grant" value="[a-z-]+"( checked)?>', page)
    assert choices == [("all", ""), ("no-billing", ""), ("read", " checked")]  # what the application asked for
    assert "Read-only tools" in page and "no spending" in page
    for asked, shown in (("openid offline_access", "all"), ("offline_access mcp:read", "read"), ("mcp:write", "no-billing"),
                         ("mcp:read mcp:billing", "all")):  # (the narrowest choice that gives all it asks)
        page = flow.authorize("c" * 43, scope=asked).text  # scopes it does not know are ignored (RFC 6749 §3.3)
        assert f'value="{shown}" checked' in page, asked
    for path in ("/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-authorization-server"):
        assert flow.send("GET", path).json()["scopes_supported"] == ["mcp", "mcp:read", "mcp:write", "mcp:billing"]


def test_a_read_only_grant_lists_and_calls_only_read_only_tools(server, sandbox, journal):
    token, listed = granted(server, "read")
    access = token["access_token"]
    assert token["scope"] == "mcp:read"
    assert "echo" in listed and "crm-create-contact" not in listed and "image-gen-tiny" not in listed
    assert "web-scrape" not in listed and "alpha-classifier" in listed  # (external_network; none at all)
    refused = modern(server.url, "tools/call", {"name": "crm-create-contact", "arguments": CONTACT}, key=access)
    assert refused.status_code == 403
    assert refused.headers["WWW-Authenticate"] == (
        f'Bearer error="insufficient_scope", resource_metadata="{server.root}/.well-known/oauth-protected-resource/mcp",'
        ' scope="mcp:read mcp:write"')  # every scope the call needs, the granted one too
    error = refused.json()["error"]
    assert error["code"] == -31403 and error["data"] == {"scope": "mcp:read mcp:write"}
    assert "crm-create-contact" in error["message"]
    echo = modern(server.url, "tools/call", {"name": "echo", "arguments": {"text": "read"}}, key=access)
    assert echo.json()["result"]["content"][0]["text"] == "read"
    session = initialize(server.url, key=access)  # the handshake era: the same refusal, the same list
    legacy = rpc(server.url, "tools/call", {"name": "image-gen-tiny", "arguments": IMAGE}, key=access,
                 session=session)
    assert legacy.status_code == 403 and 'scope="mcp:read mcp:billing"' in legacy.headers["WWW-Authenticate"]
    assert "crm-create-contact" not in names(rpc(server.url, "tools/list", key=access, session=session))
    assert [e["slug"] for e in journal("invoke")] == ["echo"]  # nothing outside the grant reached the gateway
    assert "crm-create-contact" in names(modern(server.url, "tools/list"))  # the key itself: all of it
    logged = [e for e in log_events(server.stderr(), "mcp.scope.refused") if e["tool"] == "crm-create-contact"]
    assert logged and logged[0]["scope"] == "mcp:read mcp:write" and logged[0]["tenant"]
    assert "ada@example.com" not in server.stderr()  # never the arguments
    counted = requests.get(server.root + "/metrics", timeout=30).text
    assert re.search(r'mcp_guard_decisions_total\{reason="scope_refused"\} [2-9]', counted)


def test_all_but_billing_runs_writes_and_asks_more_for_billable_tools(server, sandbox, journal):
    token, listed = granted(server, "no-billing")
    access = token["access_token"]
    assert token["scope"] == "mcp:read mcp:write"
    assert "crm-create-contact" in listed and "hive-chat" not in listed and "image-gen-tiny" not in listed
    written = modern(server.url, "tools/call", {"name": "crm-create-contact", "arguments": CONTACT}, key=access)
    assert written.status_code == 200 and not written.json()["result"].get("isError")
    billed = modern(server.url, "tools/call", {"name": "image-gen-tiny", "arguments": IMAGE}, key=access)
    assert billed.status_code == 403 and 'scope="mcp:read mcp:write mcp:billing"' in billed.headers["WWW-Authenticate"]
    assert [e["slug"] for e in journal("invoke")] == ["crm-create-contact"]
    issued = [e for e in log_events(server.stderr(), "oauth.code.issued") if e.get("scope") == "mcp:read mcp:write"]
    assert issued


def test_a_grant_of_everything_is_what_hosts_get_by_default(server):
    token, listed = granted(server, None)  # no choice made: what the application asked for
    assert token["scope"] == "mcp" and "image-gen-tiny" in listed


def test_the_built_in_tools_see_no_further_than_the_grant(config, sandbox):
    """``colabhive__search_tools`` finds only the tools the grant lets the request call, and
    ``colabhive__wait_for_result`` does not follow the work of a tool outside it."""
    from colabhive_mcp.protocol import Server, Session, jsonrpc
    from colabhive_mcp.protocol.request import Narrowing
    from colabhive_mcp.tenants.tenant import Tenant

    server, tenant = Server(config), Tenant(config, config.api_key)
    read_only = Narrowing(granted=frozenset({"mcp:read"}))

    def call(name, arguments, narrow):
        message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": name, "arguments": arguments, "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                                                            "io.modelcontextprotocol/clientCapabilities": {}}}}
        return server.handle(jsonrpc.frame_of(message), tenant=tenant, session=Session(id="t"), narrow=narrow)["result"]

    assert "crm-create-contact" in call("colabhive__search_tools", {"query": "contact"}, None)["content"][0]["text"]
    found = call("colabhive__search_tools", {"query": "contact create summarize echo"}, read_only)["content"][0]["text"]
    assert "crm-create-contact" not in found and "cold-summarizer" not in found and "echo" in found
    work = tenant.gateway.invoke("cold-summarizer", {"text": "a long text"}, sync=False)
    refused = call("colabhive__wait_for_result", {"invocation_id": work.id, "wait_s": 1}, read_only)
    assert refused["isError"] and "may not use" in refused["content"][0]["text"]
    followed = call("colabhive__wait_for_result", {"invocation_id": work.id, "wait_s": 1}, None)
    assert work.id in str(followed)  # the key itself follows it (its result, or where it stands)


def test_every_token_of_a_key_begins_with_its_affinity_and_fits_the_sites_buckets():
    issuer = grants()
    key = "hive_" + "k" * 75  # 80 characters
    first = issuer.tokens(Grant(key, "one host", RESOURCE, "mcp:read mcp:write mcp:billing"), "g1", 1)["access_token"]
    second = issuer.tokens(Grant(key, "another host", RESOURCE), "g2", 5)["access_token"]
    other = issuer.tokens(Grant(DEMO_KEY, "one host", RESOURCE), "g3", 1)["access_token"]
    assert first[:19] == second[:19] == "hmcp_at_" + issuer.affinity(key) and other[:19] != first[:19]
    assert Grants("t" * 32, RESOURCE, MemoryStore(), 1, 1).affinity(key) != issuer.affinity(key)  # another secret
    assert max(len(first), len(second)) <= 255 and issuer.fits(Grant(key, "c", RESOURCE, "mcp:read mcp:write"))
    assert not issuer.fits(Grant("hive_" + "k" * 200, "c", RESOURCE))
    long_key = "hive_" + "k" * 83  # a grant it fits, but not with the affinity: the token goes without
    plain = issuer.tokens(Grant(long_key, "c", RESOURCE, "mcp:read"), "g4", 1)["access_token"]
    assert issuer.fits(Grant(long_key, "c", RESOURCE, "mcp:read")) and len(plain) <= 255
    assert not plain.startswith("hmcp_at_" + issuer.affinity(long_key)) and issuer.key_of(plain)[0] == long_key
    assert issuer.key_of(first)[0] == key
    forged = "hmcp_at_" + issuer.affinity(DEMO_KEY) + first[19:]  # another key's affinity on this token
    with pytest.raises(OAuthError):
        issuer.key_of(forged)
