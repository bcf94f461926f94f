"""Tools the server adds to every catalog, named with a prefix that no manifest slug can keep."""

from __future__ import annotations

import json
from typing import Any

from .tools import LISTED_WHEN_CAPPED, RESERVED_PREFIX

GET_INVOCATION = RESERVED_PREFIX + "get_invocation"
SEARCH_TOOLS = RESERVED_PREFIX + "search_tools"
DEFAULT_WAIT_S = 30
DEFAULT_MATCHES = 10

ENTRIES: tuple[dict[str, Any], ...] = (
    {
        "name": GET_INVOCATION,
        "displayName": "Get a ColabHive invocation",
        "description": (
            "Get the result of a ColabHive tool call that was still running when it returned (its answer "
            "named an invocation id). Waits up to wait_s seconds for the work to finish, then returns the "
            "result, or says it is still running so you can ask again."),
        "inputSchema": {
            "type": "object",
            "properties": {
                "invocation_id": {"type": "string", "minLength": 1, "description": "The id, e.g. inv_123."},
                "wait_s": {"type": "number", "minimum": 0, "maximum": 300, "default": DEFAULT_WAIT_S,
                           "description": "How long to wait for the work to finish."},
            },
            "required": ["invocation_id"],
            "additionalProperties": False,
        },
        "sideEffects": [],
        "annotations": {"readOnlyHint": True, "openWorldHint": False},
    },
    {
        "name": SEARCH_TOOLS,
        "displayName": "Search ColabHive tools",
        "description": (
            "Find ColabHive tools that are not in your tool list (this client is shown only some of them). "
            "Returns the matching tools with their descriptions and argument schemas; call one by its name."),
        "inputSchema": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Words to look for in names and descriptions."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": DEFAULT_MATCHES},
            },
            "required": ["query"],
            "additionalProperties": False,
        },
        "sideEffects": [],
        "annotations": {"readOnlyHint": True, "openWorldHint": False},
        LISTED_WHEN_CAPPED: True,
    },
)


def follow_up_hint(invocation_id: str | None) -> str:
    """What the model should do with a call that outlived its wait."""
    return f'Call {GET_INVOCATION} with {{"invocation_id": "{invocation_id}"}} to get the result.'


def search(tools: list[Any], query: str, limit: int = DEFAULT_MATCHES) -> str:
    """The exposed tools that best match ``query``, described for a model to call them."""
    words = [w for w in query.lower().split() if w]
    scored = []
    for tool in tools:
        if tool.builtin:
            continue
        haystack = " ".join(str(tool.definition.get(k, "")) for k in ("name", "title", "description")).lower()
        score = sum(word in haystack for word in words)
        if score:
            scored.append((-score, tool.name, tool))
    if not scored:
        return f"No ColabHive tool matches {query!r}."
    lines = []
    for _, _, tool in sorted(scored)[:limit]:
        summary = tool.definition["description"].split("\n")[0][:300]
        schema = json.dumps(tool.definition["inputSchema"], ensure_ascii=False, separators=(",", ":"))
        lines.append(f"- {tool.name}: {summary}\n  arguments: {schema}")
    return f"{len(lines)} matching tool(s):\n" + "\n".join(lines)
