"""What the 2026-07-28 revision's text asks, point by point, over real processes and raw JSON-RPC:
answers a dual-era client reads as "modern", capabilities that tell the truth and are respected,
listens that end with a goodbye, tasks' small print, and profiles that never leak between clients.
(End of input on stdio: tests/transports/test_stdio.py.)"""

import sys
import time
from datetime import datetime

import pytest
import requests

from colabhive_mcp.cli.demo import StdioPeer
from colabhive_mcp.sandbox import DEMO_KEY

from ..support.http_server import HttpServer, rpc_messages
from ..support.http_client import initialize, modern, post, rpc
from ..support.environ import server_env

pytestmark = pytest.mark.slow

MODERN = "2026-07-28"
VERSION = "io.modelcontextprotocol/protocolVersion"
CAPS = "io.modelcontextprotocol/clientCapabilities"
CLIENT = "io.modelcontextprotocol/clientInfo"
SUBSCRIPTION = "io.modelcontextprotocol/subscriptionId"
TASKS = "io.modelcontextprotocol/tasks"
CONTACT = {"name": "Ada", "email": "ada@example.com"}
MODERN_ERRORS = (-32020, -32021, -32022)  # what a dual-era client recognises as a modern server's 400


@pytest.fixture(scope="module")
def server(gateway_sandbox):
    """Hosted, two workers; mutations need confirming; listens live 3 s; tool lists in pages of 5."""
    server = HttpServer(gateway_sandbox.url, "--http-workers", "2", "--confirm-side-effects", "require",
                        "--stream-max-age", "3", "--tools-page-size", "5")
    yield server
    server.stop()


def error_of(response, status):
    assert response.status_code == status, (response.status_code, response.text)
    return response.json()


def caps(**capabilities):
    return {"_meta": {CAPS: capabilities}}


# -- a 2026 request is answered in 2026 terms ---------------------------------------------------------

def test_a_2026_header_on_a_body_without_meta_is_a_modern_400_with_the_id(server):
    answer = error_of(rpc(server.url, "tools/list", {}, id_="no-meta", **{
        "MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/list"}), 400)
    assert answer["id"] == "no-meta" and answer["error"]["code"] in MODERN_ERRORS
    assert "Mcp-Session-Id" not in answer["error"]["message"]  # not "send initialize first": that reads legacy


def test_a_batch_under_the_2026_header_is_an_invalid_request_not_a_header_mismatch(server):
    member = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": {VERSION: MODERN, CAPS: {}}}}
    answer = error_of(post(server.url, [member], key=DEMO_KEY, **{"MCP-Protocol-Version": MODERN}), 400)
    assert answer["error"]["code"] == -32600 and "not a batch" in answer["error"]["message"]


def test_a_notification_needs_no_mcp_method_header_but_one_it_sends_must_match(server):
    """The revision asks Mcp-Method of requests; a notification's POST is not bound to it."""
    body = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {
        "requestId": "gone", "_meta": {VERSION: MODERN, CAPS: {}}}}
    assert post(server.url, body, key=DEMO_KEY, **{"MCP-Protocol-Version": MODERN}).status_code == 202
    wrong = post(server.url, body, key=DEMO_KEY, **{"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/list"})
    assert error_of(wrong, 400)["error"]["code"] == -32020


@pytest.mark.parametrize("case,status", [("no key", 401), ("html only", 406), ("text body", 415),
                                         ("no session", 400), ("unknown session", 404)])
def test_edge_errors_carry_the_request_id_when_the_body_could_be_read(server, case, status):
    body = {"jsonrpc": "2.0", "id": 41, "method": "tools/list"}
    headers = {"text body": {"Content-Type": "text/plain"}, "unknown session": {"Mcp-Session-Id": "not-a-session"}}
    answer = error_of(post(server.url, body, key=None if case == "no key" else DEMO_KEY,
                           accept="text/html" if case == "html only" else "application/json, text/event-stream",
                           **headers.get(case, {})), status)
    assert answer["id"] == 41 and answer["error"]["code"] < 0


def test_an_unreadable_body_still_gets_a_null_id(server):
    assert error_of(post(server.url, b'{"id": 41, "method": ', key=None), 401)["id"] is None


def test_plain_invalid_params_are_not_mistaken_for_a_legacy_server(server):
    """-32602 for an unknown tool, a stale cursor or an unknown task is a 200: a 400 without a modern
    error code would send a dual-era client back to the handshake. A malformed envelope is a 400."""
    extension = {"_meta": {CAPS: {"extensions": {TASKS: {}}}}}
    for response in (modern(server.url, "tools/call", {"name": "no-such-tool", "arguments": {}}),
                     modern(server.url, "tools/list", {"cursor": "bm90LWEtY3Vyc29y"}),
                     modern(server.url, "tasks/get", {"taskId": "t1.forged.task", **extension},
                            **{"Mcp-Name": "t1.forged.task"})):
        assert error_of(response, 200)["error"]["code"] == -32602
    missing = post(server.url, {"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"_meta": {
        VERSION: MODERN}}}, **{"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/list"})
    assert error_of(missing, 400)["error"]["code"] == -32602 and CAPS in missing.json()["error"]["message"]
    assert error_of(modern(server.url, "prompts/list"), 404)["error"]["code"] == -32601


@pytest.mark.parametrize("requested", ["2025-11-25", "1900-01-01"])
def test_an_unsupported_version_is_never_listed_as_supported(server, requested):
    response = post(server.url, {"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": {"_meta": {
        VERSION: requested, CAPS: {}}}}, **{"MCP-Protocol-Version": requested, "Mcp-Method": "tools/list"})
    error = error_of(response, 400)["error"]
    assert error["code"] == -32022 and error["data"]["requested"] == requested
    assert requested not in error["data"]["supported"] and MODERN in error["data"]["supported"]
    discovered = modern(server.url, "server/discover").json()["result"]["supportedVersions"]
    assert set(error["data"]["supported"]) <= set(discovered)


def test_an_unknown_version_header_is_refused_with_the_versions_served(server):
    error = error_of(rpc(server.url, "tools/list", {}, id_=10, **{"MCP-Protocol-Version": "2031-01-01"}), 400)
    assert error["id"] == 10 and error["error"]["code"] == -32022
    assert {MODERN, "2025-11-25"} <= set(error["error"]["data"]["supported"])


# -- capabilities tell the truth, and the client's are respected --------------------------------------

def test_both_eras_declare_logging_which_they_send(server):
    assert "logging" in modern(server.url, "server/discover").json()["result"]["capabilities"]
    initialized = post(server.url, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
    assert "logging" in initialized.json()["result"]["capabilities"]
    logged = modern(server.url, "tools/call", {"name": "batch-report", "arguments": {"seconds": 1}, "_meta": {
        "io.modelcontextprotocol/logLevel": "debug"}})
    assert any(m.get("method") == "notifications/message" for m in rpc_messages(logged))


def test_a_url_only_client_is_never_sent_a_form(server, sandbox, journal):
    url_only = modern(server.url, "tools/call", {"name": "crm-create-contact", "arguments": CONTACT,
                                                 **caps(elicitation={"url": {}})})
    error = error_of(url_only, 400)["error"]
    assert error["code"] == -32021 and error["data"] == {"requiredCapabilities": {"elicitation": {"form": {}}}}
    form = modern(server.url, "tools/call", {"name": "crm-create-contact", "arguments": CONTACT,
                                             **caps(elicitation={})}).json()["result"]
    assert form["resultType"] == "input_required"  # an empty elicitation object means form mode
    session = post(server.url, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {"url": {}}},
        "clientInfo": {"name": "t", "version": "1"}}}).headers["Mcp-Session-Id"]
    legacy = rpc(server.url, "tools/call", {"name": "crm-create-contact", "arguments": CONTACT}, session=session,
                 **{"MCP-Protocol-Version": "2025-11-25"})
    messages = rpc_messages(legacy)
    assert not [m for m in messages if m.get("method") == "elicitation/create"]
    assert messages[-1]["result"]["isError"] and "form-mode elicitation" in messages[-1]["result"]["content"][0]["text"]
    assert journal("invoke") == []


def test_under_ask_a_url_only_client_runs_the_tool_unasked(sandbox, journal):
    peer = StdioPeer([sys.executable, "-m", "colabhive_mcp", "stdio", "--api-url", sandbox.url,
                      "--confirm-side-effects", "ask"], env=server_env(COLABHIVE_API_KEY=DEMO_KEY))
    try:
        answer = peer.request("tools/call", {"name": "crm-create-contact", "arguments": CONTACT, "_meta": {
            VERSION: MODERN, CAPS: {"elicitation": {"url": {}}}}})["result"]
        assert answer["resultType"] == "complete" and not answer.get("isError")
        assert [e["slug"] for e in journal("invoke")] == ["crm-create-contact"]
        assert not [n for n in peer.notifications if n.get("method") == "elicitation/create"]
    finally:
        peer.close()


def test_listening_for_task_ids_needs_the_tasks_extension(server):
    refused = modern(server.url, "subscriptions/listen", {"notifications": {"taskIds": ["t1.a.b"]}})
    error = error_of(refused, 400)["error"]
    assert error["code"] == -32021 and error["data"] == {"requiredCapabilities": {"extensions": {TASKS: {}}}}


# -- listens end with a goodbye ---------------------------------------------------------------------

def test_a_listen_ends_at_stream_max_age_with_its_completion_result(server):
    """The server ends it (3 s here), so it says so: its response, tagged, then the end of the
    stream. Task ids it does not report on are left out of the acknowledgment."""
    with requests.post(server.url, json={"jsonrpc": "2.0", "id": "sub-1", "method": "subscriptions/listen", "params": {
            "_meta": {VERSION: MODERN, CAPS: {"extensions": {TASKS: {}}}},
            "notifications": {"toolsListChanged": True, "taskIds": ["t1.a.b"]}}},
            headers={"Authorization": f"Bearer {DEMO_KEY}", "Accept": "text/event-stream",
                     "MCP-Protocol-Version": MODERN, "Mcp-Method": "subscriptions/listen"}, timeout=30) as listened:
        messages = rpc_messages(listened)
    acknowledged, goodbye = messages[0], messages[-1]
    assert acknowledged["method"] == "notifications/subscriptions/acknowledged"
    assert acknowledged["params"]["notifications"] == {"toolsListChanged": True}
    assert goodbye["id"] == "sub-1" and goodbye["result"]["resultType"] == "complete"
    assert goodbye["result"]["_meta"][SUBSCRIPTION] == "sub-1"
    assert not [m for m in messages if m.get("method") == "notifications/cancelled"]  # (as over stdio)


# -- tasks' small print -----------------------------------------------------------------------------

def test_a_failed_task_says_why_and_never_changed_before_it_was_created(server):
    session = initialize(server.url)
    created = rpc(server.url, "tools/call", {"name": "batch-report", "arguments": {"seconds": 1, "fail": True},
                                             "task": {}}, session=session).json()["result"]["task"]
    seen = [created]
    deadline = time.monotonic() + 30
    while seen[-1]["status"] == "working" and time.monotonic() < deadline:
        time.sleep(0.1)
        seen.append(rpc(server.url, "tasks/get", {"taskId": created["taskId"]}, session=session).json()["result"])
    assert seen[-1]["status"] == "failed" and seen[-1]["statusMessage"]
    for task in seen:
        assert datetime.fromisoformat(task["lastUpdatedAt"]) >= datetime.fromisoformat(task["createdAt"]), task


# -- client profiles never leak between two clients of one key ---------------------------------------

def test_a_profile_variant_is_never_cached_or_paged_for_another_client(server):
    """Cursor's profile lists fewer tools with shorter names. While lists differ by client, none is
    cacheable (a cache shared by the key's clients must keep neither Cursor's list for another client
    nor the default list for Cursor), and a variant's cursors are not another's."""
    cursor_client = {"_meta": {CLIENT: {"name": "cursor-vscode", "version": "1"}}}
    varied = modern(server.url, "tools/list", cursor_client).json()["result"]
    plain = modern(server.url, "tools/list", {"_meta": {CLIENT: {"name": "some-agent", "version": "1"}}}).json()["result"]
    assert varied["cacheScope"] == plain["cacheScope"] == "private"
    assert varied["ttlMs"] == plain["ttlMs"] == 0
    narrowed = modern(server.url, "tools/list", **{"X-ColabHive-Tools": "echo"}).json()["result"]
    assert narrowed["ttlMs"] == 0  # a cache cannot tell it from the whole list
    foreign = modern(server.url, "tools/list", {"cursor": varied["nextCursor"]})
    assert error_of(foreign, 200)["error"]["code"] == -32602
    own = modern(server.url, "tools/list", {"cursor": varied["nextCursor"], **cursor_client}).json()["result"]
    assert {t["name"] for t in own["tools"]}.isdisjoint(t["name"] for t in varied["tools"])


def test_with_one_profile_for_every_client_the_hosted_lists_are_cacheable(gateway_sandbox):
    """``client_profile`` pinned (here from the environment, as a deployment sets it): every client gets
    the same list, cacheable for the manifest's TTL, on every worker."""
    pinned = HttpServer(gateway_sandbox.url, "--http-workers", "2", env={"COLABHIVE_CLIENT_PROFILE": "cursor",
                                                                          "COLABHIVE_MANIFEST_TTL": "90"})
    try:
        for name in ("cursor-vscode", "some-agent", "claude-code"):
            listed = modern(pinned.url, "tools/list", {"_meta": {CLIENT: {"name": name, "version": "1"}}}).json()
            assert listed["result"]["ttlMs"] == 90_000 and listed["result"]["cacheScope"] == "private"
    finally:
        pinned.stop()

