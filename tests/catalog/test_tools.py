"""Manifest entries → MCP tools: names, descriptions, schemas, annotations, policy, listings."""

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from colabhive_mcp.catalog.policy import Policy
from colabhive_mcp.catalog.profiles import Profile
from colabhive_mcp.catalog.tools import Catalog, build_definition, tool_annotations, tool_name
from colabhive_mcp.manifest.version import Manifest
from colabhive_mcp.revisions import REVISIONS

SAFE = r"^[A-Za-z0-9_.\-]+$"


def entry(name, **fields):
    return {"name": name, "description": f"{name} does things", **fields}


@pytest.mark.parametrize("slug", ["hive-chat", "llm/gpt 4o (mini)", "ünïcode-módel", "x" * 200, "///", "a.b_c-d"])
def test_names_are_safe_bounded_and_stable(slug):
    name = tool_name(slug, 48)
    assert len(name) <= 48
    assert __import__("re").fullmatch(SAFE, name)
    assert tool_name(slug, 48) == name  # deterministic (the hash does not depend on the process)


def test_safe_short_slugs_keep_their_name_and_sanitised_ones_do_not_collide():
    assert tool_name("hive-chat", 48) == "hive-chat"
    assert tool_name("a/b", 48) != tool_name("a b", 48)
    assert tool_name("a/b", 48).startswith("a_b_")
    long_a, long_b = "model-" + "a" * 80, "model-" + "a" * 79 + "b"
    assert tool_name(long_a, 48) != tool_name(long_b, 48)


def test_description_mentions_side_effects_latency_cost_and_stability():
    text = build_definition(entry("crm", sideEffects=["writes", "billing"], latencyClass="slow",
                                  costHint="$0.01 per call", stability="beta"), "crm")["description"]
    assert text.startswith("crm does things")
    for part in ("Side effects: writes, billing.", "Slow:", "Cost: $0.01 per call.", "Stability: beta."):
        assert part in text


def test_input_schema_always_has_an_object_root():
    assert build_definition(entry("a"), "a")["inputSchema"] == {"type": "object", "properties": {}}
    schema = build_definition(entry("b", inputSchema={"properties": {"x": {"type": "string"}}}), "b")["inputSchema"]
    assert schema["type"] == "object" and "x" in schema["properties"]
    original = {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
                "$defs": {"a": {"type": "string"}}, "properties": {"x": {"$ref": "#/$defs/a"}},
                "additionalProperties": False}
    shown = build_definition(entry("c", inputSchema=original), "c")["inputSchema"]
    assert shown["properties"]["x"] == {"type": "string"} and shown["$defs"] == original["$defs"]
    assert shown["$schema"] == original["$schema"] and shown["additionalProperties"] is False
    strict = build_definition(entry("c", inputSchema=original), "c", strict=True)["inputSchema"]
    assert "$defs" not in strict and "$schema" not in strict and strict["properties"]["x"] == {"type": "string"}


@pytest.mark.parametrize("fields,expected", [
    ({"sideEffects": []}, {"readOnlyHint": True, "openWorldHint": False}),
    ({"sideEffects": ["writes"]}, {"readOnlyHint": False, "destructiveHint": True, "openWorldHint": False}),
    ({"sideEffects": ["external_network"]}, {"readOnlyHint": False, "openWorldHint": True}),
    ({}, {"readOnlyHint": False, "destructiveHint": True, "openWorldHint": True}),  # unknown: conservative
    ({"sideEffects": ["writes"], "annotations": {"readOnlyHint": True}}, {"readOnlyHint": True}),  # gateway wins
])
def test_annotations_are_derived_from_side_effects_unless_given(fields, expected):
    derived = tool_annotations(entry("t", **fields))
    assert {k: derived[k] for k in expected} == expected


@pytest.mark.parametrize("policy,hidden", [
    (Policy(), set()),
    (Policy(allow=("hive-*",)), {"crm-create", "web", "exp"}),
    (Policy(deny=("crm-*", "web")), {"crm-create", "web"}),
    (Policy(kinds=("llm",)), {"crm-create", "web", "exp"}),
    (Policy(read_only=True), {"crm-create", "web"}),
    (Policy(side_effects=("external_network",)), {"crm-create"}),
    (Policy(side_effects=()), {"crm-create", "web"}),
    (Policy(min_stability="beta"), {"exp"}),
    (Policy(min_stability="stable"), {"exp", "web"}),
])
def test_policy_filters(policy, hidden):
    entries = (entry("hive-chat", kind="llm", sideEffects=[], stability="stable"),
               entry("crm-create", kind="operation", sideEffects=["writes"], stability="stable"),
               entry("web", kind="tool", sideEffects=["external_network"], stability="beta"),
               entry("exp", kind="tool", sideEffects=[], stability="experimental"))
    catalog = Catalog(Manifest(entries, '"e"'), policy, Profile("test"))
    assert {t.name for t in catalog.by_name.values() if t.refusal} == hidden
    assert [t.name for t in catalog.exposed] == sorted(set(catalog.by_name) - hidden)


def test_unknown_side_effects_are_hidden_in_read_only_mode():
    assert "does not say" in Policy(read_only=True).refusal(entry("x"))
    assert Policy().refusal(entry("x")) is None


def test_listing_is_sorted_and_spelled_for_each_revision():
    entries = (entry("zeta", displayName="Zeta", sideEffects=[], outputSchema={"type": "object"}),
               entry("alpha", sideEffects=[]))
    catalog = Catalog(Manifest(entries, None), Policy(), Profile("test"))
    for version, facts in REVISIONS.items():
        listing = catalog.listing(version)
        assert [t["name"] for t in listing] == ["alpha", "zeta"]
        assert all(set(t) <= set(facts.tool_fields) for t in listing)
    assert "annotations" not in catalog.listing("2024-11-05")[1]
    assert catalog.listing("2025-06-18")[1]["title"] == "Zeta"
    assert catalog.listing("2025-06-18")[1]["_meta"]["com.colabhive/slug"] == "zeta"
    assert catalog.listing("2025-11-25") is catalog.listing("2025-11-25")  # built once


def test_argument_errors_name_the_field():
    schema = {"type": "object", "required": ["email"],
              "properties": {"email": {"type": "string", "format": "email"}, "n": {"type": "integer"}}}
    catalog = Catalog(Manifest((entry("crm", inputSchema=schema),), None), Policy(), Profile("test"))
    tool = catalog.by_name["crm"]
    assert tool.argument_errors({"email": "a@b.co"}) is None
    assert "'email' is a required property" in tool.argument_errors({})
    message = tool.argument_errors({"email": "a@b.co", "n": "three"})
    assert "at n" in message and "'three' is not of type 'integer'" in message


def test_what_the_gateway_alone_can_judge_is_left_to_it():
    """A format is an annotation in 2020-12 (a gateway may not check it), and a ``$ref`` to another
    document is never fetched from here: neither refuses a call the gateway may accept."""
    asked = []

    class Schemas(BaseHTTPRequestHandler):
        def do_GET(self):
            asked.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b'{"type": "integer"}')

    with ThreadingHTTPServer(("127.0.0.1", 0), Schemas) as schemas:
        threading.Thread(target=schemas.serve_forever, daemon=True).start()
        schema = {"type": "object", "required": ["n"], "properties": {
            "day": {"type": "string", "format": "date"}, "contact": {"type": "string", "format": "email"},
            "shape": {"$ref": f"http://127.0.0.1:{schemas.server_address[1]}/shape.json"}, "n": {"type": "integer"}}}
        catalog = Catalog(Manifest((entry("crm", inputSchema=schema),), None), Policy(), Profile("test"))
        tool = catalog.by_name["crm"]
        assert tool.argument_errors({"day": "2024-1-5", "contact": "ada at example", "n": 1}) is None
        assert tool.argument_errors({"shape": "a circle", "n": 1}) is None
        assert "'n' is a required property" in tool.argument_errors({"shape": "a circle"})  # found before the $ref
        assert "'x' is not of type 'integer'" in tool.argument_errors({"n": "x"})  # what can be judged still is
        schemas.shutdown()
    assert asked == []


def test_an_invalid_schema_leaves_validation_to_the_gateway():
    catalog = Catalog(Manifest((entry("odd", inputSchema={"type": "object", "properties": 5}),), None), Policy(), Profile("test"))
    assert catalog.by_name["odd"].argument_errors({"anything": 1}) is None


def test_the_built_in_prefix_is_reserved():
    assert tool_name("colabhive__get_invocation", 48) != "colabhive__get_invocation"


def test_a_listing_keeps_its_encoding_and_a_message_splices_it_in_unchanged():
    import json

    from colabhive_mcp.protocol import jsonrpc

    entries = (entry("zeta", displayName="Zêta ✓"), entry("alpha"))
    listing = Catalog(Manifest(entries, None), Policy(), Profile("test")).listing("2025-11-25")
    message = {"jsonrpc": "2.0", "id": "x", "result": {"tools": listing, "nextCursor": "c"}}
    assert json.loads(jsonrpc.encode(message)) == json.loads(json.dumps(message))
    assert b"\n" not in jsonrpc.encode(message)
