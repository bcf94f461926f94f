"""Tools the server adds to every catalog, named with a prefix that no manifest slug can keep."""

from __future__ import annotations

import json
from typing import Any

from .tools import LISTED_WHEN_CAPPED, NEVER_LISTED, RESERVED_PREFIX

WAIT_FOR_RESULT = RESERVED_PREFIX + "wait_for_result"
GET_INVOCATION = RESERVED_PREFIX + "get_invocation"  # its name before 1.0: still answered, no longer listed
SEARCH_TOOLS = RESERVED_PREFIX + "search_tools"
DEFAULT_MATCHES = 10
_WAIT_SCHEMA = {
    "type": "object",
    "properties": {
        "invocation_id": {"type": "string", "minLength": 1, "description": "The invocation id the earlier answer "
                                                                          "named, e.g. inv_123."},
        "wait_s": {"type": "number", "minimum": 0, "maximum": 600,
                   "description": "Wait at most this many seconds (default: as long as this client allows)."},
    },
    "required": ["invocation_id"],
    "additionalProperties": False,
}

ENTRIES: tuple[dict[str, Any], ...] = (
    {
        "name": WAIT_FOR_RESULT,
        "displayName": "Wait for a ColabHive result",
        "description": (
            "Wait for the result of a ColabHive tool call that was still running when it answered: its answer "
            "said to call this tool and gave the invocation_id to pass. Waits as long as this client allows, then "
            "returns the tool's result exactly as the tool would have, or says again that the work continues "
            "and to call this tool once more. Never starts the work again."),
        "inputSchema": _WAIT_SCHEMA,
        "sideEffects": [],
        "annotations": {"readOnlyHint": True, "openWorldHint": False},
    },
    {
        "name": GET_INVOCATION,
        "displayName": "Get a ColabHive invocation",
        "description": f"The former name of {WAIT_FOR_RESULT}, which it answers exactly.",
        "inputSchema": _WAIT_SCHEMA,
        "sideEffects": [],
        "annotations": {"readOnlyHint": True, "openWorldHint": False},
        NEVER_LISTED: True,
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


def continuation(invocation_id: str | None) -> dict[str, Any]:
    """The call that gets a kept invocation's result: the tool to call and its arguments."""
    return {"tool": WAIT_FOR_RESULT, "arguments": {"invocation_id": invocation_id}}


def follow_up_hint(invocation_id: str | None) -> str:
    """What the model should do with a call whose work continues (or may continue) upstream."""
    return f'Call {WAIT_FOR_RESULT} with {{"invocation_id": "{invocation_id}"}} to get the result.'


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
