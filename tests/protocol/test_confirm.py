"""Confirmation of tools with side effects through MCP elicitation, in both eras and transports."""

import sys
import threading

import anyio
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.types import ElicitResult

from colabhive_mcp.protocol import Server, Session, jsonrpc
from colabhive_mcp.sandbox import DEMO_KEY
from colabhive_mcp.tenants.tenant import Tenant

from ..support.catalogue import WRITER
from ..support.core_client import Client as CoreClient
from ..support.environ import server_env
from ..support.http_server import HttpServer

pytestmark = pytest.mark.real_clients

CONTACT = {"name": "Ada", "email": "ada@example.com"}


async def call_with_answer(target, mode, answer):
    asked = []

    async def on_elicit(context, params):
        asked.append(params.message)
        if answer == "accept":
            return ElicitResult(action="accept", content={"confirm": True})
        return ElicitResult(action=answer)

    async with Client(target, mode=mode, elicitation_callback=on_elicit, read_timeout_seconds=60) as client:
        result = await client.call_tool("crm-create-contact", CONTACT)
        readonly = await client.call_tool("echo", {"text": "no question asked"})
    return asked, result, readonly


def check(asked, result, readonly, answer, journal):
    assert len(asked) == 1 and "crm-create-contact" in asked[0] and "writes" in asked[0]
    assert readonly.content[0].text == "no question asked"
    invoked = [e["slug"] for e in journal("invoke")]
    if answer == "accept":
        assert not result.is_error and "ada@example.com" in result.content[0].text
        assert invoked == ["crm-create-contact", "echo"]
    else:
        assert result.is_error and "did not allow" in result.content[0].text
        assert invoked == ["echo"]  # the mutation never reached the gateway


@pytest.mark.parametrize("mode", ["legacy", "auto"])
@pytest.mark.parametrize("answer", ["accept", "decline"])
def test_stdio_asks_before_a_mutation(sandbox, journal, mode, answer):
    target = StdioServerParameters(command=sys.executable, args=[
        "-m", "colabhive_mcp", "stdio", "--api-url", sandbox.url, "--confirm-side-effects", "require"],
        env=server_env(COLABHIVE_API_KEY=DEMO_KEY))
    check(*anyio.run(call_with_answer, target, mode, answer), answer, journal)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_http_asks_before_a_mutation(gateway_sandbox, sandbox, journal, mode):
    server = HttpServer(gateway_sandbox.url, "--http-workers", "1", "--confirm-side-effects", "require")
    try:
        target = streamable_http_client(server.url, http_client=httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {DEMO_KEY}"}, timeout=60))
        check(*anyio.run(call_with_answer, target, mode, "accept"), "accept", journal)
    finally:
        server.stop()


def test_without_elicitation_require_refuses_and_ask_runs(config, journal):
    strict = CoreClient(Server(config.replace(confirm_side_effects="require")), Tenant(config, config.api_key))
    strict.initialize()
    refused = strict.call("crm-create-contact", CONTACT)["result"]
    assert refused["isError"] and "confirmation" in refused["content"][0]["text"]
    modern = strict.call("crm-create-contact", CONTACT, modern=True)
    assert modern["error"]["code"] == -32021 and modern["error"]["data"] == {"requiredCapabilities": {"elicitation": {"form": {}}}}
    assert journal("invoke") == []
    lenient = CoreClient(Server(config.replace(confirm_side_effects="ask")), Tenant(config, config.api_key))
    lenient.initialize()
    assert not lenient.call("crm-create-contact", CONTACT)["result"].get("isError")


@pytest.mark.parametrize("answer", ["accept", "decline"])
def test_a_2025_task_is_created_only_once_the_user_confirms(config, sandbox, journal, answer):
    """2025-11-25: a tools/call that asks for a task is confirmed (elicitation/create) before the task
    exists; declined, nothing reaches the gateway."""
    sandbox.add_action(WRITER, seconds=1.0)
    server, tenant, session = Server(config.replace(confirm_side_effects="require")), Tenant(config, config.api_key), \
        Session(id="a-2025-task")
    invoked_when_asked = []

    def send(message):
        return server.serve(jsonrpc.frame_of(message), tenant=tenant, session=session, notify=on_message)

    def on_message(message):
        if message.get("method") == "elicitation/create":
            invoked_when_asked.append(len(journal("invoke")))
            said = {"action": "accept", "content": {"confirm": True}} if answer == "accept" else {"action": answer}
            threading.Thread(target=send, args=({"jsonrpc": "2.0", "id": message["id"], "result": said},)).start()

    send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}}, "clientInfo": {"name": "t", "version": "1"}}})
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    result = send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "slow-writer", "arguments": {"text": "hi"}, "task": {"ttl": 60000}}})["result"]
    assert invoked_when_asked == [0]
    if answer == "accept":
        assert result["task"]["status"] == "working" and [e["slug"] for e in journal("invoke")] == ["slow-writer"]
    else:
        assert result["isError"] and "did not allow" in result["content"][0]["text"] and journal("invoke") == []


def test_a_request_state_is_bound_to_the_exact_arguments(config, journal):
    client = CoreClient(Server(config.replace(confirm_side_effects="require")), Tenant(config, config.api_key))
    caps = {"io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}
    first = client.modern("tools/call", {"name": "crm-create-contact", "arguments": CONTACT}, **caps)["result"]
    assert first["resultType"] == "input_required" and "confirm" in first["inputRequests"]
    yes = {"confirm": {"action": "accept", "content": {"confirm": True}}}
    other = {"name": "Mallory", "email": "m@example.com"}
    replayed = client.modern("tools/call", {"name": "crm-create-contact", "arguments": other, "inputResponses": yes,
                                            "requestState": first["requestState"]}, **caps)["result"]
    assert replayed["resultType"] == "input_required"  # asked again: the state was for other arguments
    forged = client.modern("tools/call", {"name": "crm-create-contact", "arguments": CONTACT, "inputResponses": yes,
                                          "requestState": first["requestState"][:-3] + "abc"}, **caps)["result"]
    assert forged["resultType"] == "input_required"
    assert journal("invoke") == []
    done = client.modern("tools/call", {"name": "crm-create-contact", "arguments": CONTACT, "inputResponses": yes,
                                        "requestState": first["requestState"]}, **caps)["result"]
    assert done["resultType"] == "complete" and not done.get("isError")
    assert [e["slug"] for e in journal("invoke")] == ["crm-create-contact"]


def test_a_yes_runs_one_mutation_once_even_on_another_worker(gateway_sandbox, sandbox, journal, tmp_path):
    """The same requestState replayed (same arguments) is asked again: one "yes", one write; the
    spent state is remembered in the instance store, so another process refuses it too."""
    caps = {"io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}
    shared = {"COLABHIVE_RUNTIME_DIR": str(tmp_path), "COLABHIVE_CONFIRM_SIDE_EFFECTS": "require"}
    first_worker = HttpServer(gateway_sandbox.url, "--http-workers", "1", env=shared)
    second_worker = HttpServer(gateway_sandbox.url, "--http-workers", "1", env=shared)
    try:
        from ..support.http_client import modern

        asked = modern(first_worker.url, "tools/call", {"name": "crm-create-contact", "arguments": CONTACT,
                                                        "_meta": caps}).json()["result"]
        yes = {"name": "crm-create-contact", "arguments": CONTACT, "_meta": caps, "requestState": asked["requestState"],
               "inputResponses": {"confirm": {"action": "accept", "content": {"confirm": True}}}}
        done = modern(first_worker.url, "tools/call", yes).json()["result"]
        assert done["resultType"] == "complete" and not done.get("isError")
        for worker in (first_worker, second_worker, first_worker):
            again = modern(worker.url, "tools/call", yes).json()["result"]
            assert again["resultType"] == "input_required", again  # asked again: the yes was spent
    finally:
        first_worker.stop()
        second_worker.stop()
    assert [e["slug"] for e in journal("invoke")] == ["crm-create-contact"]


def test_a_yes_given_within_the_budget_is_no_yes_past_it(config, sandbox, journal):
    """2026: a side-effect confirmation asked while the key was within its budget cannot be replayed to
    run the call once the budget is used: the user is asked again, and told what was spent."""
    from colabhive_mcp.tenants.shared import Instance

    sandbox.add_action({"name": "paid-writer", "description": "writes, and bills", "sideEffects": ["writes", "billing"],
                        "inputSchema": {"type": "object"}}, result={"written": True})
    budgeted = config.replace(confirm_side_effects="require", billable_calls_per_hour=1)
    client = CoreClient(Server(budgeted), Tenant(budgeted, budgeted.api_key, Instance.of(budgeted)))
    caps = {"io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}
    asked = client.modern("tools/call", {"name": "paid-writer", "arguments": {"n": 1}}, **caps)["result"]
    assert asked["resultType"] == "input_required" and "budget" not in str(asked["inputRequests"])
    yes = {"confirm": {"action": "accept", "content": {"confirm": True}}}
    image = {"name": "image-gen-tiny", "arguments": {"prompt": "x", "size": 16}}
    other = client.modern("tools/call", image, **caps)["result"]
    other = client.modern("tools/call", {**image, "inputResponses": yes, "requestState": other["requestState"]},
                          **caps)["result"]
    assert other["resultType"] == "complete" and not other.get("isError")  # the budget is used meanwhile
    replayed = client.modern("tools/call", {"name": "paid-writer", "arguments": {"n": 1}, "inputResponses": yes,
                                            "requestState": asked["requestState"]}, **caps)["result"]
    assert replayed["resultType"] == "input_required"
    message = replayed["inputRequests"]["confirm"]["params"]["message"]
    assert "hourly budget of 1 billable ColabHive calls is used" in message
    done = client.modern("tools/call", {"name": "paid-writer", "arguments": {"n": 1}, "inputResponses": yes,
                                        "requestState": replayed["requestState"]}, **caps)["result"]
    assert done["resultType"] == "complete" and not done.get("isError")
    assert [e["slug"] for e in journal("invoke")] == ["image-gen-tiny", "paid-writer"]
