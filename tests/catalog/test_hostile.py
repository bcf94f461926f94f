"""A hostile manifest: names, schemas and results that break clients, made safe for every one."""

import json
import re
import sys

import anyio
import pytest
from mcp import Client as SdkClient
from mcp import StdioServerParameters

from colabhive_mcp.catalog.profiles import NAMES
from colabhive_mcp.gateway.client import GatewayError
from colabhive_mcp.protocol import Server
from colabhive_mcp.sandbox import DEMO_KEY
from colabhive_mcp.tenants.refusals import Unreachable
from colabhive_mcp.tenants.tenant import Tenant

from ..support.core_client import Client
from ..support.environ import server_env
from ..support.hostile_manifest import HOSTILE

NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")
def by_slug(tools):
    return {t["_meta"]["com.colabhive/slug"]: t for t in tools}


@pytest.mark.parametrize("client_name,name_max,strict", [("claude-ai", 48, False), ("cursor-vscode", 40, True),
                                                         ("some new client", 48, False)])
def test_every_tool_lists_safely_for_each_profile(hostile, server, tenant, client_name, name_max, strict):
    client = Client(server, tenant)
    client.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                  "clientInfo": {"name": client_name, "version": "1"}})
    tools = client.request("tools/list")["result"]["tools"]
    assert len(json.dumps(tools)) < 1_000_000  # the doubling schema is shown compact, not 2^24 times over
    names = [t["name"] for t in tools]
    assert names == sorted(names) and len(set(names)) == len(names)
    assert all(NAME.match(n) and len(n) <= name_max for n in names)
    listed = by_slug([t for t in tools if "_meta" in t])
    assert {slug for slug, *_ in HOSTILE} <= set(listed)
    assert listed["llm_chat"]["name"] == "llm_chat"  # a safe slug keeps its name; the others get a hash
    for tool in tools:
        schema = json.dumps(tool["inputSchema"])
        assert tool["inputSchema"]["type"] == "object" and '"$ref"' not in schema
        assert ('"$defs"' in schema) is False if strict else True


def call(client, tools, slug, arguments):
    return client.call(by_slug(tools)[slug]["name"], arguments)["result"]


def test_every_hostile_tool_is_callable_within_the_budgets(hostile, server, tenant):
    client = Client(server, tenant)
    client.initialize()
    tools = client.request("tools/list")["result"]["tools"]
    for slug, _schema, arguments, result, _output in HOSTILE[:7]:
        answer = call(client, tools, slug, arguments)
        assert not answer.get("isError") and answer["content"][0]["text"] == result, slug
    image = call(client, tools, "big-image", {})["content"][0]
    assert image["type"] == "text" and "not shown" in image["text"]
    text = call(client, tools, "big-text", {})["content"][0]["text"]
    assert len(text) < 101_000 and "truncated: 100000 of 1000000 characters shown" in text
    embedding = call(client, tools, "wide-embedding", {})["content"][0]["text"]
    assert "4096 dimensions" in embedding and len(embedding) < 300
    liar = call(client, tools, "liar", {})
    assert liar["isError"] and "structuredContent" not in liar and "output schema" in liar["content"][-1]["text"]


def test_injected_argument_keys_are_dropped_unless_the_schema_wants_them(sandbox, server, tenant):
    sandbox.add_action({"name": "echo-args", "description": "echo", "sideEffects": [],
                        "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}},
                                        "additionalProperties": False}})
    sandbox.add_action({"name": "wants-id", "description": "needs toolCallId", "sideEffects": [],
                        "inputSchema": {"type": "object", "properties": {"toolCallId": {"type": "string"}}}})
    client = Client(server, tenant)
    client.request("initialize", {"protocolVersion": "2025-03-26", "capabilities": {},
                                  "clientInfo": {"name": "n8n-mcp-client", "version": "1"}})
    echoed = client.call("echo-args", {"q": "x", "toolCallId": "call_123"})["result"]
    assert json.loads(echoed["content"][0]["text"]) == {"q": "x"}
    kept = client.call("wants-id", {"toolCallId": "call_123"})["result"]
    assert json.loads(kept["content"][0]["text"]) == {"toolCallId": "call_123"}
    given = {"q": "x", "toolCallId": "call_123"}
    prepared = tenant.prepare("echo-args", given, NAMES["n8n"])
    assert prepared.arguments == {"q": "x"} and given == {"q": "x", "toolCallId": "call_123"}  # the caller's, untouched


def test_a_gateway_failure_about_a_task_keeps_its_status_and_retry_after(tenant, sandbox):
    sandbox.faults.add(route="poll", kind="status", status=503, retry_after=7, count=None)
    with pytest.raises(Unreachable) as failed:
        tenant.invocation("inv_0123456789abcdef")
    assert failed.value.status == 503 and failed.value.retry_after == 7
    assert isinstance(failed.value.__cause__, GatewayError)


def test_a_capped_list_keeps_everything_reachable_through_search(config, sandbox):
    capped = config.replace(max_tools=8)
    client = Client(Server(capped), Tenant(capped, config.api_key))
    client.initialize()
    names = [t["name"] for t in client.request("tools/list")["result"]["tools"]]
    assert len(names) == 8 and "colabhive__search_tools" in names and "tts-voice" not in names
    found = client.call("colabhive__search_tools", {"query": "speech"})["result"]["content"][0]["text"]
    assert "tts-voice" in found and '"text"' in found
    assert client.call("tts-voice", {"text": "hi"})["result"]["content"][0]["type"] == "audio"  # still callable
    uncapped = Client(Server(config), Tenant(config, config.api_key))
    uncapped.initialize()
    assert "colabhive__search_tools" not in [t["name"] for t in uncapped.request("tools/list")["result"]["tools"]]


async def sdk_lists_and_calls_everything(target):
    async with SdkClient(target, mode="auto", read_timeout_seconds=60) as client:
        tools = (await client.list_tools()).tools
        results = {}
        for tool in tools:
            slug = (tool.meta or {}).get("com.colabhive/slug")
            arguments = next((a for s, _, a, _, _ in HOSTILE if s == slug), None)
            if arguments is not None:
                results[slug] = await client.call_tool(tool.name, arguments)
        return tools, results


@pytest.mark.real_clients
def test_the_official_sdk_lists_and_calls_the_hostile_manifest(hostile):
    target = StdioServerParameters(command=sys.executable, args=["-m", "colabhive_mcp", "stdio", "--api-url",
                                                                 hostile.url], env=server_env(COLABHIVE_API_KEY=DEMO_KEY))
    tools, results = anyio.run(sdk_lists_and_calls_everything, target)
    assert set(results) == {slug for slug, *_ in HOSTILE}
    assert all(not r.is_error for slug, r in results.items() if slug != "liar")


def test_profiles_are_chosen_by_client_name_and_overridable(config):
    from colabhive_mcp.catalog.profiles import for_client

    assert for_client({"name": "cursor-vscode"}, config).name == "cursor"
    assert for_client({"name": "claude-ai"}, config).name == "claude-desktop"
    assert for_client({"name": "Visual Studio Code"}, config).strict_schemas is True
    assert for_client(None, config).name == "unknown"
    forced = for_client({"name": "cursor"}, config.replace(client_profile="inspector", max_tools=5,
                                                           drop_arguments=("sessionId",)))
    assert (forced.name, forced.max_tools, forced.drop_arguments) == ("inspector", 5, ("sessionId",))
