"""A hostile manifest: names, schemas and results that break MCP clients (see test_hostile)."""

import base64

TEXT = {"type": "object", "properties": {"text": {"type": "string"}}}
RECURSIVE = {"type": "object", "$defs": {"node": {"type": "object", "properties": {
    "label": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}},
    "properties": {"tree": {"$ref": "#/$defs/node"}}, "required": ["tree"]}
ROOT_ANY_OF = {"anyOf": [{"type": "object", "properties": {"prompt": {"type": "string"}}, "required": ["prompt"]},
                         {"type": "object", "properties": {"messages": {"type": "array"}}, "required": ["messages"]}]}
DOUBLING = {"type": "object", "properties": {"tree": {"$ref": "#/$defs/d0"}}, "required": ["tree"], "$defs": {
    **{f"d{i}": {"type": "object", "properties": {"left": {"$ref": f"#/$defs/d{i + 1}"},
                                                  "right": {"$ref": f"#/$defs/d{i + 1}"}}} for i in range(24)},
    "d24": {"type": "integer"}}}  # 2.7 KB that inlining would make 2^24 copies of
HOSTILE = [  # (slug, inputSchema, arguments, result, outputSchema)
    ("model-" + "x" * 194, TEXT, {"text": "long name"}, "ok", None),
    ("résumé writer v2", TEXT, {"text": "unicode"}, "ok", None),
    ("llm/chat", TEXT, {"text": "slash"}, "slash", None),
    ("llm chat", TEXT, {"text": "space"}, "space", None),
    ("llm_chat", TEXT, {"text": "plain"}, "plain", None),
    ("tree-walker", RECURSIVE, {"tree": {"label": "a", "children": [{"label": "b"}]}}, "walked", None),
    ("doubling-tree", DOUBLING, {"tree": {"left": {"right": {}}}}, "grown", None),
    ("any-of-root", ROOT_ANY_OF, {"prompt": "hi"}, "anyOf ok", None),
    ("big-image", TEXT, {}, {"image_b64": base64.b64encode(b"\x89PNG" + b"\0" * 5_000_000).decode(),
                             "mime_type": "image/png"}, None),
    ("big-text", TEXT, {}, "y" * 1_000_000, None),
    ("wide-embedding", TEXT, {}, {"embedding": [0.001 * i for i in range(4096)]}, None),
    ("liar", TEXT, {}, {"id": 5}, {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}),
]
