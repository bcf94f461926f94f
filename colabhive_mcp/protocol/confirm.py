"""Asking the user before a tool with side effects runs (MCP elicitation).

Policy ``confirm_side_effects``: ``off``; ``ask`` (confirm when the client can ask its user,
else run); ``require`` (confirm, else refuse). Legacy clients get an ``elicitation/create``
request during the call; 2026 clients get ``resultType: "input_required"`` and retry the call
with their answer and the ``requestState``, which is signed and bound to the key, the tool and
the exact arguments, and expires, so it cannot be replayed for another mutation.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from ..calls.results import error_result
from ..canonical import canonical, digest
from ..catalog.policy import side_effects
from ..catalog.tools import Tool
from ..revisions import revision
from ..signing import Signer
from ..store.interface import InstanceStore, Marked

INPUT_KEY = "confirm"
USED_STATES = "used-states"  # in the instance store: confirmation states already spent
STATE_MAX_AGE_S = 300.0
ASK_TIMEOUT_S = 300.0


FORM_CAPABILITY: dict[str, Any] = {"elicitation": {"form": {}}}


def can_confirm(capabilities: dict[str, Any]) -> bool:
    """Whether the client can show a form: it declared form-mode elicitation (an empty
    ``elicitation`` object means form mode, for older clients). A URL-only client cannot."""
    modes = capabilities.get("elicitation")
    return isinstance(modes, dict) and (not modes or "form" in modes)


def needs_confirmation(policy: str, tool: Tool) -> bool:
    """Whether this tool call must be confirmed: it has (or may have) side effects."""
    return policy != "off" and not tool.builtin and side_effects(tool.entry) != []


def elicitation(tool: Tool, arguments: dict[str, Any], version: str,
                over_budget: str | None = None) -> dict[str, Any]:
    """The ``elicitation/create`` params: a yes/no form describing what would run, and, for a call
    past the key's budget, what was spent (``over_budget``: the spend guard's words)."""
    effects = side_effects(tool.entry)
    what = f"It {', '.join(effects)}." if effects else "It may change things outside ColabHive."
    shown = json.dumps(arguments, ensure_ascii=False)
    spent = f"{over_budget} " if over_budget else ""
    params: dict[str, Any] = {
        "message": f"{spent}Allow the tool {tool.name!r} to run with {shown[:500]}? {what}",
        "requestedSchema": {"type": "object", "required": [INPUT_KEY], "properties": {
            INPUT_KEY: {"type": "boolean", "title": "Run it", "default": False,
                        "description": f"Run {tool.definition.get('title', tool.name)} now"}}},
    }
    if revision(version).elicitation_mode:
        params["mode"] = "form"
    return params


def accepted(answer: Any) -> bool:
    """Only an ``accept`` whose form says yes lets the call through."""
    return (isinstance(answer, dict) and answer.get("action") == "accept"
            and isinstance(answer.get("content"), dict) and answer["content"].get(INPUT_KEY) is True)


def declined(tool: Tool) -> dict[str, Any]:
    return error_result(f"The user did not allow {tool.name!r} to run; nothing was done.")


class RequestStates:
    """The 2026 ``requestState``: which key may run which tool with which arguments, once, for a few
    minutes. A state that was used is remembered in the instance store until it expires."""

    def __init__(self, secret: str | bytes, store: InstanceStore) -> None:
        self._signer = Signer(secret, "r1.", STATE_MAX_AGE_S)
        self._store = store

    def issue(self, binding: str, tool: Tool, arguments: dict[str, Any], past_budget: bool = False) -> str:
        """A state for this call; ``past_budget``: the user is asked to let it run past the key's budget."""
        return self._signer.dumps({"k": binding, "n": tool.name, "a": _digest(arguments), "u": secrets.token_hex(8),
                                   **({"b": 1} if past_budget else {})})

    def valid(self, state: Any, binding: str, tool: Tool, arguments: dict[str, Any], past_budget: bool = False) -> bool:
        """Whether ``state`` lets this call run (``past_budget`` too: a yes given when it was not is no
        yes to that); a state lets one call run, once."""
        payload = self._signer.loads(state)
        if payload is None or payload != {**payload, "k": binding, "n": tool.name, "a": _digest(arguments)}:
            return False
        if past_budget and not payload.get("b"):
            return False
        return self._store.mark(USED_STATES, digest(state), STATE_MAX_AGE_S) is Marked.FIRST


def _digest(arguments: dict[str, Any]) -> str:
    return digest(canonical(arguments))
