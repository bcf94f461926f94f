"""Tools the server adds to every catalog, named with a prefix that no manifest slug can keep."""

from __future__ import annotations

from typing import Any

from .tools import RESERVED_PREFIX

GET_INVOCATION = RESERVED_PREFIX + "get_invocation"
DEFAULT_WAIT_S = 30

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
)


def follow_up_hint(invocation_id: str | None) -> str:
    """What the model should do with a call that outlived its wait."""
    return f'Call {GET_INVOCATION} with {{"invocation_id": "{invocation_id}"}} to get the result.'
