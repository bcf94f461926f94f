"""The protocol core, driven in-process against a tenant on the sandbox gateway (both eras)."""

import dataclasses
import threading
import time

import pytest

from colabhive_mcp.protocol import LEGACY_VERSIONS, Server, jsonrpc
from colabhive_mcp.sandbox import DEMO_KEY_B
from colabhive_mcp.tenants.tenant import Tenant

from ..support.core_client import MODERN, Client, text_of
from ..support.waiting import wait_until


@pytest.fixture
def client(server, tenant):
    return Client(server, tenant)





# -- lifecycle -------------------------------------------------------------------------------

@pytest.mark.parametrize("requested,negotiated", [(v, v) for v in LEGACY_VERSIONS] +
                         [("2026-07-28", "2025-11-25"), ("1999-01-01", "2025-11-25")])
def test_initialize_negotiates_a_legacy_version(client, requested, negotiated):
    result = client.initialize(requested)["result"]
    assert result["protocolVersion"] == negotiated
    assert result["capabilities"]["tools"] == {"listChanged": False} and "logging" in result["capabilities"]
    assert result["serverInfo"]["name"] == "colabhive-mcp" and result["instructions"]
    assert ("title" in result["serverInfo"]) == (negotiated >= "2025-06-18")


def test_requests_before_initialize_are_refused_but_ping_is_answered(client):
    assert client.request("ping") == {"jsonrpc": "2.0", "id": 1, "result": {}}
    answer = client.request("tools/list")
    assert answer["error"]["code"] == -32602 and "initialize" in answer["error"]["message"]
    assert client.request("initialize", {"capabilities": {}})["error"]["code"] == -32602


def test_unknown_methods_and_bad_envelopes(client):
    client.initialize()
    assert client.request("resources/list")["error"]["code"] == -32601
    assert client.send({"jsonrpc": "1.0", "id": 5, "method": "ping"})["error"]["code"] == -32600
    assert client.send({"jsonrpc": "2.0", "id": None, "method": "ping"}) == {
        "jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": 'Invalid Request: "id" must be a string or an integer'}}
    assert client.send({"jsonrpc": "2.0", "id": 6, "method": "ping", "params": [1]})["error"]["code"] == -32602
    assert client.send([1, 2]) is not None  # not a dict: an invalid request, answered
    assert client.send({"jsonrpc": "2.0", "method": "notifications/whatever", "params": 3}) is None
    assert client.send({"jsonrpc": "2.0", "id": 9, "result": {}}) is None  # a response: no answer


def test_logging_set_level_validates_the_level(client):
    client.initialize()
    assert client.request("logging/setLevel", {"level": "debug"})["result"] == {}
    assert client.request("logging/setLevel", {"level": "loud"})["error"]["code"] == -32602


def test_batches_only_under_2025_03_26(server, tenant):
    old = Client(server, tenant)
    old.initialize("2025-03-26")
    batch = [{"jsonrpc": "2.0", "id": "a", "method": "ping"}, {"jsonrpc": "2.0", "method": "notifications/x"},
             {"jsonrpc": "2.0", "id": "b", "method": "tools/list"}]
    answers = server.serve(jsonrpc.frame_of(batch), session=old.session, tenant=tenant)
    assert [a["id"] for a in answers] == ["a", "b"] and answers[1]["result"]["tools"]
    new = Client(server, tenant)
    new.initialize("2025-06-18")
    assert server.serve(jsonrpc.frame_of(batch), session=new.session, tenant=tenant)["error"]["code"] == -32600


# -- 2026-07-28 ------------------------------------------------------------------------------

def test_discover_and_stateless_requests(client):
    result = client.modern("server/discover")["result"]
    assert result["supportedVersions"][0] == MODERN and "2025-11-25" in result["supportedVersions"]
    assert result["resultType"] == "complete" and result["ttlMs"] > 0 and result["cacheScope"] == "public"
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "colabhive-mcp"
    listed = client.modern("tools/list")["result"]
    assert listed["resultType"] == "complete" and listed["cacheScope"] == "private"
    assert listed["ttlMs"] == 0  # lists differ by client (Cursor's profile): none may be cached for the key
    assert "execution" not in listed["tools"][0]


@pytest.mark.parametrize("profile", ["claude-code", "cursor"])
def test_a_list_every_client_gets_alike_is_cacheable_for_the_manifest_ttl(config, tenant, profile):
    pinned = Client(Server(dataclasses.replace(config, client_profile=profile)), tenant)
    listed = pinned.modern("tools/list")["result"]
    assert listed["cacheScope"] == "private" and listed["ttlMs"] == config.manifest_ttl * 1000


def test_modern_envelope_errors(client):
    missing = client.request("tools/list", {"_meta": {"io.modelcontextprotocol/protocolVersion": MODERN}})
    assert missing["error"]["code"] == -32602 and "clientCapabilities" in missing["error"]["message"]
    unsupported = client.request("tools/list", {"_meta": {"io.modelcontextprotocol/protocolVersion": "2030-01-01",
                                                          "io.modelcontextprotocol/clientCapabilities": {}}})
    assert unsupported["error"]["code"] == -32022
    assert unsupported["error"]["data"]["requested"] == "2030-01-01" and MODERN in unsupported["error"]["data"]["supported"]
    assert client.modern("ping")["error"]["code"] == -32601
    assert client.modern("logging/setLevel", {"level": "info"})["error"]["code"] == -32601


def test_a_legacy_client_cannot_discover(client):
    client.initialize()
    assert client.request("server/discover")["error"]["code"] == -32601


# -- tools -----------------------------------------------------------------------------------

def test_tools_list_pages_with_cursors(config, tenant):
    client = Client(Server(config.replace(tools_page_size=5)), tenant)
    client.initialize()
    names, cursor = [], None
    while True:
        result = client.request("tools/list", {"cursor": cursor} if cursor else {})["result"]
        names += [t["name"] for t in result["tools"]]
        cursor = result.get("nextCursor")
        if not cursor:
            break
    assert names == sorted(names) and len(names) == len(set(names)) > 10
    assert "alpha-classifier" in names and "beta-sentiment" not in names  # per-key visibility
    assert all(t["description"] for t in tenant.catalog().listing("2025-11-25"))
    assert client.request("tools/list", {"cursor": "bm90LWEtY3Vyc29y"})["error"]["code"] == -32602


def test_each_key_sees_only_its_own_tools(server, config):
    other = Tenant(config, DEMO_KEY_B)
    client = Client(server, other)
    client.initialize()
    names = {t["name"] for t in client.request("tools/list")["result"]["tools"]}
    assert "beta-sentiment" in names and "alpha-classifier" not in names
    assert client.call("alpha-classifier", {"text": "x"})["error"]["code"] == -32602


@pytest.mark.parametrize("modern", [False, True])
def test_a_fast_call(client, sandbox, modern, journal):
    if not modern:
        client.initialize()
    answer = client.call("hive-chat", {"prompt": "hello"}, modern=modern)
    assert "hello" in text_of(answer) and not answer["result"].get("isError")
    assert (answer["result"].get("resultType") == "complete") == modern
    invokes = journal("invoke")
    assert len(invokes) == 1 and invokes[0]["idempotency_key"]


def test_unknown_tool_is_a_protocol_error(client):
    client.initialize()
    answer = client.call("no-such-tool")
    assert answer["error"] == {"code": -32602, "message": "Unknown tool: no-such-tool"}
    assert client.request("tools/call", {"arguments": {}})["error"]["code"] == -32602
    assert client.request("tools/call", {"name": "echo", "arguments": [1]})["error"]["code"] == -32602


def test_bad_arguments_are_an_error_result_without_an_upstream_call(client, sandbox, journal):
    client.initialize()
    answer = client.call("crm-create-contact", {"name": "Ada"})
    assert answer["result"]["isError"] is True and "'email' is a required property" in text_of(answer)
    assert journal("invoke") == []


def test_a_filtered_tool_is_hidden_and_refused_without_an_upstream_call(config, sandbox, journal):
    tenant = Tenant(config.replace(deny=("crm-*",), min_stability="beta"), config.api_key)
    client = Client(Server(config), tenant)
    client.initialize()
    names = {t["name"] for t in client.request("tools/list")["result"]["tools"]}
    assert "crm-create-contact" not in names and "web-scrape" not in names and "echo" in names
    answer = client.call("crm-create-contact", {"name": "Ada", "email": "ada@example.com"})
    assert answer["result"]["isError"] is True and "deny pattern 'crm-*'" in text_of(answer)
    assert "experimental" in text_of(client.call("web-scrape", {"url": "https://example.com"}))
    assert journal("invoke") == []


def test_a_failing_action_is_an_error_result(client):
    client.initialize()
    answer = client.call("flaky-translate", {"text": "bonjour"})
    assert answer["result"]["isError"] is True and "upstream model crashed" in text_of(answer)


def test_a_gateway_outage_is_an_error_result(client, sandbox):
    client.initialize()
    client.request("tools/list")
    sandbox.faults.add(route="invoke", kind="status", status=500, body={"detail": "boom"})
    answer = client.call("echo", {"text": "x"})
    assert answer["result"]["isError"] is True and "500 boom" in text_of(answer)


def test_a_rejected_key_says_so_and_is_not_asked_about_again_for_a_while(config, server, journal):
    client = Client(server, Tenant(config, "hive_not_a_real_key"))
    client.initialize()
    for method, params in (("tools/list", None), ("tools/call", {"name": "echo", "arguments": {"text": "x"}}),
                           ("tools/list", None)):
        answer = client.request(method, params)
        error = answer["error"]
        assert error["code"] == -31401, answer  # not -32603: nothing is broken but the key
        assert "rejected the API key (401" in error["message"] and "COLABHIVE_API_KEY" in error["message"]
        assert "hive_not_a_real_key" not in str(answer)
    assert len(journal("manifest")) == 1 and not journal("invoke")


@pytest.mark.slow
def test_queued_work_reports_progress_with_a_token(client):
    client.initialize()
    answer = client.call("batch-report", {"seconds": 4}, progressToken="tok-1")
    assert "report ready" in text_of(answer)
    progress = [n["params"] for n in client.notifications if n["method"] == "notifications/progress"]
    assert len(progress) >= 3 and all(p["progressToken"] == "tok-1" for p in progress)
    values = [p["progress"] for p in progress]
    assert values == sorted(values) and len(set(values)) == len(values)
    assert any("step" in p["message"] for p in progress)
    assert not [n for n in client.notifications if n["method"] == "notifications/message"]


@pytest.mark.slow
def test_no_token_no_progress_and_logs_follow_the_level(client):
    client.initialize()
    client.call("batch-report", {"seconds": 2.5})
    assert client.notifications == []
    client.request("logging/setLevel", {"level": "info"})
    client.call("batch-report", {"seconds": 2.5})
    logs = [n["params"] for n in client.notifications if n["method"] == "notifications/message"]
    assert logs and all(l["level"] == "info" and l["data"].startswith("batch-report:") for l in logs)
    client.request("logging/setLevel", {"level": "warning"})
    before = len(client.notifications)
    client.call("batch-report", {"seconds": 2.5})
    assert len(client.notifications) == before


@pytest.mark.slow
def test_modern_requests_log_only_when_their_meta_asks(client):
    client.call("batch-report", {"seconds": 2.5}, modern=True)
    assert client.notifications == []
    client.call("batch-report", {"seconds": 2.5}, modern=True, **{"io.modelcontextprotocol/logLevel": "debug"})
    assert [n for n in client.notifications if n["method"] == "notifications/message"]


@pytest.mark.slow
def test_the_cold_model_is_slow_once(client):
    client.initialize()
    started = time.monotonic()
    first = client.call("cold-summarizer", {"text": "a long text"}, progressToken=1)
    cold = time.monotonic() - started
    assert not first["result"].get("isError")
    assert any("cold start" in n["params"]["message"] for n in client.notifications)
    started = time.monotonic()
    client.call("cold-summarizer", {"text": "another"})
    assert time.monotonic() - started < cold


def test_cancellation_stops_the_call_cancels_upstream_and_sends_nothing(client, server, sandbox, journal):
    client.initialize()
    answers = []
    worker = threading.Thread(target=lambda: answers.append(
        client.call("batch-report", {"seconds": 30}, progressToken="p")))
    worker.start()
    assert wait_until(lambda: client.notifications)
    sent = len(client.notifications)
    client.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 2}})
    worker.join(5)
    assert not worker.is_alive() and answers == [None]
    assert len(client.notifications) == sent
    assert [e["route"] for e in journal("cancel")] == ["cancel"]


def test_a_cancellation_that_overtakes_its_request_still_counts(client, server, sandbox, journal):
    client.initialize()
    server.cancel(client.session, 99)
    assert client.send({"jsonrpc": "2.0", "id": 99, "method": "tools/call",
                        "params": {"name": "echo", "arguments": {"text": "x"}}}) is None
    assert journal("invoke") == []


def test_a_reused_id_never_leaves_a_cancel_for_a_later_request(client, journal):
    """Two calls under one id (a client's mistake): once the short one ends, a cancellation of that id
    still reaches the long one, and is not kept for the next request that reuses the id."""
    client.initialize()
    answers = {}

    def call(seconds):
        answers[seconds] = client.send({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
            "name": "batch-report", "arguments": {"seconds": seconds}}})

    short, long = (threading.Thread(target=call, args=(seconds,)) for seconds in (0.5, 30))
    long.start()
    assert wait_until(lambda: journal("invoke"))
    short.start()
    short.join(10)
    assert "report ready" in text_of(answers[0.5])
    client.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7}})
    long.join(5)
    assert not long.is_alive() and answers[30] is None and len(journal("cancel")) == 1
    assert client.send({"jsonrpc": "2.0", "id": 7, "method": "ping"}) == {"jsonrpc": "2.0", "id": 7, "result": {}}


@pytest.mark.slow
def test_poll_max_wait_returns_a_handle(config, sandbox):
    client = Client(Server(config), Tenant(config.replace(poll_max_wait=1), config.api_key))
    client.initialize()
    answer = client.call("batch-report", {"seconds": 5})
    assert not answer["result"].get("isError")
    assert "still" in text_of(answer) and "inv_" in text_of(answer)


def test_structured_content_follows_the_output_schema(client):
    client.initialize()
    result = client.call("crm-create-contact", {"name": "Ada", "email": "ada@example.com"})["result"]
    assert result["structuredContent"]["email"] == "ada@example.com"
    assert '"ada@example.com"' in result["content"][0]["text"]
    old = Client(client.server, client.tenant)
    old.initialize("2025-03-26")
    assert "structuredContent" not in old.call("crm-create-contact", {"name": "A", "email": "a@example.com"})["result"]


def test_media_results(client):
    client.initialize()
    image = client.call("image-gen-tiny", {"prompt": "bees", "size": 16})["result"]["content"][0]
    assert image["type"] == "image" and image["mimeType"] == "image/png"
    audio = client.call("tts-voice", {"text": "hi"})["result"]["content"][0]
    assert audio["type"] == "audio" and audio["mimeType"] == "audio/wav"
    embedding = text_of(client.call("text-embed-small", {"text": "hi"}))
    assert "384 dimensions" in embedding


@pytest.mark.slow
def test_the_continuation_tool_fetches_what_a_call_left_running(config, sandbox):
    client = Client(Server(config), Tenant(config.replace(poll_max_wait=1), config.api_key))
    client.initialize()
    listed = {t["name"]: t for t in client.request("tools/list")["result"]["tools"]}
    assert listed["colabhive__wait_for_result"]["annotations"]["readOnlyHint"] is True
    assert "colabhive__get_invocation" not in listed  # the former name: answered, not listed
    pending = client.call("batch-report", {"seconds": 3})["result"]
    assert not pending.get("isError")  # the work goes on: not a failure
    following = pending["_meta"]["com.colabhive/continuation"]
    invocation_id = following["invocation_id"]
    assert following["tool"] == "colabhive__wait_for_result" and following["arguments"] == {
        "invocation_id": invocation_id} and invocation_id.startswith("inv_")
    assert f'colabhive__wait_for_result with {{"invocation_id": "{invocation_id}"}}' in pending["content"][0]["text"]
    done = client.call("colabhive__wait_for_result", {"invocation_id": invocation_id, "wait_s": 10})
    assert "report ready" in text_of(done) and not done["result"].get("isError")
    again = client.call("colabhive__get_invocation", {"invocation_id": invocation_id})  # the former name
    assert "report ready" in text_of(again)
    unknown = client.call("colabhive__wait_for_result", {"invocation_id": "inv_nope"})
    assert unknown["result"]["isError"] and "inv_nope" in text_of(unknown)
    other_key = Client(Server(config), Tenant(config, DEMO_KEY_B))
    other_key.initialize()
    assert other_key.call("colabhive__wait_for_result", {"invocation_id": invocation_id})["result"]["isError"]


def test_built_in_tools_obey_the_allow_and_deny_lists_and_keep_their_names(config):
    denied = Client(Server(config), Tenant(config.replace(deny=("colabhive__*",)), config.api_key))
    denied.initialize()
    names = {t["name"] for t in denied.request("tools/list")["result"]["tools"]}
    assert "colabhive__wait_for_result" not in names
    assert denied.call("colabhive__wait_for_result", {"invocation_id": "x"})["result"]["isError"]
    kinds = Client(Server(config), Tenant(config.replace(kinds=("llm",)), config.api_key))
    kinds.initialize()
    assert "colabhive__wait_for_result" in {t["name"] for t in kinds.request("tools/list")["result"]["tools"]}


@pytest.mark.slow
def test_the_wait_can_depend_on_kind_or_latency_class(config):
    tenant = Tenant(config.replace(poll_max_wait=60, poll_max_wait_by=(("batch", 1.0), ("tool", 30.0))), config.api_key)
    assert tenant.max_wait({"kind": "tool", "latencyClass": "batch"}) == 30.0  # the kind wins
    assert tenant.max_wait({"kind": "llm", "latencyClass": "batch"}) == 1.0
    assert tenant.max_wait({"kind": "llm", "latencyClass": "fast"}) == 60
    client = Client(Server(config), Tenant(config.replace(poll_max_wait_by=(("batch", 1.0),)), config.api_key))
    client.initialize()
    assert "still" in text_of(client.call("batch-report", {"seconds": 4}))
