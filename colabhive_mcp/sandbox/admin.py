"""The ``/_sandbox/`` inspection and control routes (no API key: the sandbox binds loopback)."""

from __future__ import annotations

import json
from typing import Any, Callable, Mapping

from werkzeug.routing import Rule
from werkzeug.wrappers import Request, Response

from .responses import error_response, json_response
from .state import SandboxState

ADMIN_RULES = [
    Rule("/_sandbox/journal", endpoint="admin.journal", methods=["GET"]),
    Rule("/_sandbox/reset", endpoint="admin.reset", methods=["POST"]),
    Rule("/_sandbox/faults", endpoint="admin.faults", methods=["GET", "POST", "DELETE"]),
    Rule("/_sandbox/actions", endpoint="admin.add_action", methods=["POST"]),
    Rule("/_sandbox/keys", endpoint="admin.add_key", methods=["POST"]),
    Rule("/_sandbox/actions/<path:slug>", endpoint="admin.remove_action", methods=["DELETE"]),
]


def _object(request: Request) -> dict[str, Any]:
    body = json.loads(request.get_data() or b"{}")
    if not isinstance(body, dict):
        raise ValueError("the request body must be a JSON object")
    return body


def _journal(state: SandboxState, request: Request) -> Response:
    return json_response(request, state.journal.entries())


def _reset(state: SandboxState, request: Request) -> Response:
    state.reset()
    return json_response(request, {"reset": True})


def _faults(state: SandboxState, request: Request) -> Response:
    """GET lists the pending rules, POST adds one (``Faults.add`` fields), DELETE clears them."""
    if request.method == "POST":
        return json_response(request, state.faults.add(**_object(request)).as_dict(), 201)
    if request.method == "DELETE":
        state.faults.clear()
    return json_response(request, state.faults.pending())


def _add_action(state: SandboxState, request: Request) -> Response:
    """Body: ``{"entry": {...}, "keys": [...] | null, "result": ..., "seconds": 0}``."""
    body = _object(request)
    entry = body.get("entry")
    if not isinstance(entry, dict):
        raise ValueError("'entry' must be an object")
    state.add_action(entry, body.get("keys"), body.get("result"), body.get("seconds", 0.0))
    return json_response(request, {"added": entry["name"]}, 201)


def _add_key(state: SandboxState, request: Request) -> Response:
    """Body: ``{"key": "hive_..."}``; the key is accepted until the next reset."""
    state.add_key(str(_object(request).get("key")))
    return Response(status=204)


def _remove_action(state: SandboxState, request: Request, slug: str) -> Response:
    if not state.registry.remove(slug):
        return error_response(request, 404, f"no action named {slug!r}")
    return Response(status=204)


_HANDLERS: dict[str, Callable[..., Response]] = {
    "admin.journal": _journal,
    "admin.reset": _reset,
    "admin.faults": _faults,
    "admin.add_action": _add_action,
    "admin.remove_action": _remove_action,
    "admin.add_key": _add_key,
}


def handle(state: SandboxState, request: Request, endpoint: str, values: Mapping[str, Any]) -> Response:
    """Serve one admin route; malformed input is a 400."""
    try:
        return _HANDLERS[endpoint](state, request, **values)
    except (ValueError, TypeError) as exc:
        return error_response(request, 400, str(exc))
