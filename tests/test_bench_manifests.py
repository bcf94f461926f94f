"""The benches' manifests are what they say: the rich one is about 1 MB of actions shaped like real
ones, every schema valid, and the server makes each of them a tool that clients are shown whole."""

import json
import sys
import threading
from pathlib import Path

import jsonschema

from colabhive_mcp.calls.call import CallOptions
from colabhive_mcp.catalog.profiles import NAMES

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from bench_sandbox import BIG_TOOLS, add_rich_manifest, rich_entry  # noqa: E402


def test_the_rich_manifest_is_a_megabyte_of_valid_rich_entries():
    entries = [rich_entry(i) for i in range(BIG_TOOLS)]
    assert 0.8e6 < len(json.dumps({"tools": entries})) < 1.2e6
    for entry in entries:
        jsonschema.Draft202012Validator.check_schema(entry["inputSchema"])
        jsonschema.Draft202012Validator.check_schema(entry["outputSchema"])
        words = json.dumps(entry["inputSchema"])
        assert all(f'"{keyword}"' in words for keyword in ("$defs", "$ref", "anyOf", "pattern", "format", "enum",
                                                            "default", "minLength", "uniqueItems", "additionalProperties"))


def test_every_rich_action_is_a_tool_shown_whole_and_called_as_its_schema_says(sandbox, tenant):
    add_rich_manifest(sandbox)
    catalog = tenant.catalog(NAMES["cursor"])  # a host that takes no $ref: the references inlined
    rich = [tool for tool in catalog.exposed if tool.slug.startswith("rich-action-")]
    assert len(rich) == BIG_TOOLS and all(tool.refusal is None for tool in rich)
    listed = {tool["name"]: tool for tool in catalog.listing("2025-11-25")}
    shown = listed[rich[0].name]
    assert "$ref" not in json.dumps(shown["inputSchema"]) and shown["outputSchema"]["required"] == ["summary"]
    refused = tenant.call_tool(rich[0].name, {"input": "x", "locale": "english"},
                               CallOptions("2025-11-25", threading.Event()))
    assert refused["isError"] and "locale" in refused["content"][0]["text"]  # the $ref'd pattern holds
