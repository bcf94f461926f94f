"""Portable input schemas: local references inlined, cycles cut, object roots, strict mode."""

import json

import jsonschema

from colabhive_mcp.catalog.schemas import TOO_LARGE, Check, portable


def no_refs(schema):
    return '"$ref"' not in json.dumps(schema)


def test_nested_and_pointer_references_are_inlined():
    schema = {"type": "object", "definitions": {"tag": {"type": "string", "maxLength": 20}},
              "$defs": {"address": {"type": "object", "properties": {"city": {"type": "string"},
                                                                    "tags": {"type": "array",
                                                                             "items": {"$ref": "#/definitions/tag"}}}}},
              "properties": {"home": {"$ref": "#/$defs/address", "description": "where"},
                             "work": {"$ref": "#/$defs/address"}}}
    shown = portable(schema)
    assert no_refs(shown)  # inside $defs too: hosts that refuse $ref refuse it anywhere
    assert shown["properties"]["home"]["description"] == "where"  # siblings of $ref are kept
    assert shown["properties"]["work"]["properties"]["tags"]["items"] == {"type": "string", "maxLength": 20}


def test_recursive_references_end():
    schema = {"type": "object", "$defs": {"node": {"type": "object", "properties": {
        "value": {"type": "number"}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}},
              "properties": {"tree": {"$ref": "#/$defs/node"}}}
    shown = portable(schema, strict=True)
    assert no_refs(shown)
    children = shown["properties"]["tree"]["properties"]["children"]["items"]
    assert "recursive" in children["description"]
    jsonschema.Draft202012Validator.check_schema(shown)


def test_root_any_of_becomes_an_object_with_every_branch_property():
    schema = {"anyOf": [{"type": "object", "properties": {"prompt": {"type": "string"}}, "required": ["prompt"]},
                        {"type": "object", "properties": {"messages": {"type": "array"}}, "required": ["messages"]}]}
    shown = portable(schema)
    assert shown["type"] == "object" and set(shown["properties"]) == {"prompt", "messages"}
    assert "anyOf" in shown and "anyOf" not in portable(schema, strict=True)


def test_unresolvable_and_remote_references_are_left_out_or_kept_harmless():
    shown = portable({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing", "type": "string"},
                                                       "b": {"$ref": "https://example.com/schema.json"}}})
    assert shown["properties"]["a"] == {"type": "string"}
    assert shown["properties"]["b"] == {"$ref": "https://example.com/schema.json"}  # never fetched


def test_non_object_roots_and_empty_schemas():
    assert portable({"type": "string"}) == {"type": "object", "properties": {}}
    assert portable(None) == {"type": "object", "properties": {}}
    assert portable({})["type"] == "object"


def test_very_deep_schemas_do_not_blow_the_stack():
    schema = node = {"type": "object", "properties": {}}
    for _ in range(500):
        child = {"type": "object", "properties": {}}
        node["properties"]["x"] = child
        node = child
    assert portable(schema)["type"] == "object"


def doubling(levels=24):
    """About 2.8 KB: each definition uses the next one twice, so inlining doubles at every level."""
    defs = {f"d{i}": {"type": "object", "properties": {"left": {"$ref": f"#/$defs/d{i + 1}"}, "right": {"$ref": f"#/$defs/d{i + 1}"}}}
            for i in range(levels)}
    defs[f"d{levels}"] = {"type": "integer", "minimum": 0}
    return {"type": "object", "$defs": defs, "properties": {"tree": {"$ref": "#/$defs/d0"}}, "required": ["tree"]}


def test_a_schema_that_would_grow_exponentially_is_shown_compact_and_its_meaning_kept():
    import time

    schema = doubling()
    assert 2000 < len(json.dumps(schema)) < 3500
    started = time.perf_counter()
    for strict in (False, True):
        shown = portable(schema, strict)
        assert no_refs(shown) and len(json.dumps(shown)) <= len(json.dumps(schema))
        assert shown["properties"]["tree"]["description"] == TOO_LARGE and shown["required"] == ["tree"]
        jsonschema.Draft202012Validator.check_schema(shown)
    assert time.perf_counter() - started < 5  # inlined it would be 2^24 copies: the budget stops it early
    check = Check(schema)  # what arguments are checked against: the original
    assert not check.problems({"tree": {"left": {"left": {}}}})
    assert check.problems({"tree": {"left": {"left": {"left": "not an object"}}}})


def test_a_schema_within_the_budget_is_still_inlined_whole():
    shown = portable(doubling(levels=6))
    assert no_refs(shown) and TOO_LARGE not in json.dumps(shown)
    leaf = shown["properties"]["tree"]
    for _ in range(6):
        leaf = leaf["properties"]["right"]
    assert leaf == {"type": "integer", "minimum": 0}


def nested(depth):
    """A schema whose deepest value is ``depth`` levels below its root."""
    schema = {"type": "string"}
    for _ in range(depth - 1):
        schema = {"items": schema}
    return {"type": "object", "properties": {"x": schema}}


def with_values(count):
    """A schema of ``count`` values in all, with definitions (which a schema past the budget loses)."""
    return {"type": "object", "$defs": {"unused": {"type": "string"}}, "enum": [list(range(count - 7))]}


def test_a_schema_without_local_references_is_shown_as_it_is_and_every_other_one_as_before():
    from colabhive_mcp.catalog.schemas import (MAX_DEPTH, MAX_INLINED_NODES, STRICT_DROPPED, _compact, _inline,
                                               _object_root)

    def before(schema, strict=False):  # what portable showed before plain schemas were left as they are
        try:
            inlined = _inline(schema, schema, (), 0, [MAX_INLINED_NODES])
        except Exception:
            inlined = _compact(schema)
        return _object_root({k: v for k, v in inlined.items() if not (strict and k in STRICT_DROPPED)}, strict)

    flat = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(10)}}
    cases = [flat, nested(MAX_DEPTH - 2), nested(MAX_DEPTH - 1), nested(MAX_DEPTH), nested(MAX_DEPTH + 2),
             {"type": "object", "properties": {"$ref": {"type": "string"}}},  # a property named $ref
             {"type": "object", "properties": {"a": {"$ref": "https://example.com/s.json"}}},  # not a local one
             {"type": "object", "properties": {"a": {"$ref": "#/$defs/a"}}, "$defs": {"a": {"type": "integer"}}},
             with_values(MAX_INLINED_NODES), with_values(MAX_INLINED_NODES + 1)]  # the budget's edge
    for schema in cases:
        assert portable(schema) == before(schema) and portable(schema, True) == before(schema, True)
    assert portable(flat)["properties"] is flat["properties"]  # left as it is: not copied
    assert portable(nested(MAX_DEPTH + 2)) != nested(MAX_DEPTH + 2)  # too deep: cut, as before


def test_a_value_that_fits_no_alternative_is_told_what_to_give():
    from colabhive_mcp.catalog.schemas import Check

    either = Check({"type": "object", "anyOf": [{"required": ["prompt"]}, {"required": ["messages", "model"]}]})
    assert either.problems({}) == ["at the top level: give `prompt` or `messages` and `model`"]
    assert either.problems({"messages": []}) == ["at the top level: give `prompt` or `model`"]
    typed = Check({"type": "object", "properties": {"size": {"oneOf": [{"type": "integer", "minimum": 1},
                                                                        {"enum": ["small", "large"]}]}}})
    said = typed.problems({"size": "huge"})
    assert said == ["at size: fits none of the 2 forms it may take ('huge' is not of type 'integer' or 'huge' is "
                    "not one of ['small', 'large'])"], said


def test_the_cli_and_the_model_are_told_the_same_words(sandbox):
    import subprocess
    import sys

    from colabhive_mcp.cli.demo import StdioPeer
    from colabhive_mcp.sandbox import DEMO_KEY

    from ..support.environ import server_env

    env = server_env(COLABHIVE_API_KEY=DEMO_KEY)
    peer = StdioPeer([sys.executable, "-m", "colabhive_mcp", "stdio", "--api-url", sandbox.url], env=env)
    try:
        peer.initialize()
        answer = peer.request("tools/call", {"name": "hive-chat", "arguments": {}})
    finally:
        peer.close()
    told_the_model = answer["result"]["content"][0]["text"]
    assert told_the_model == "Invalid arguments for tool 'hive-chat': at the top level: give `prompt` or `messages`"
    cli = subprocess.run([sys.executable, "-m", "colabhive_mcp", "call", "hive-chat", "--api-url", sandbox.url],
                         env=env, capture_output=True, text=True, timeout=60)
    assert told_the_model in cli.stdout + cli.stderr and cli.returncode == 1
