"""Portable input schemas: local references inlined, cycles cut, object roots, strict mode."""

import json

import jsonschema

from colabhive_mcp.schemas import portable


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
