"""``tools/call``: a task when the client asked for one, else the call itself, within its host's
deadline; either after the user's confirmation when the tool has side effects and the policy
asks, and within the key's limits."""

from __future__ import annotations

from typing import Any

from ..calls import results
from ..calls.call import CallOptions, Gate
from ..catalog import profiles
from ..catalog.tools import Tool
from ..tenants.refusals import Refused
from ..tenants.spend import OverBudget
from . import confirm, tasks
from .context import Context
from .jsonrpc import INVALID_PARAMS, MISSING_REQUIRED_CLIENT_CAPABILITY, JsonRpcError
from .progress import reporter
from .request import Request


def tools_call(context: Context, request: Request) -> dict[str, Any]:
    name, arguments = request.params.get("name"), request.params.get("arguments", {})
    if not isinstance(name, str) or not name:
        raise JsonRpcError(INVALID_PARAMS, "tools/call needs params.name (a string)")
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise JsonRpcError(INVALID_PARAMS, "tools/call params.arguments must be an object")
    gate = _gate(context, request)
    if tasks.wanted(request):  # an unknown tool raises UnknownTool (-32602), answered by the core
        try:
            _, tool, kept = request.tenant.prepare(name, arguments, request.profile, request.narrow)
        except Refused as refused:
            return refused.result  # refused before anything ran
        if tool.long_running:
            stop, charge = request.tenant.admit(tool, kept, gate, attaches=False)  # (a task invokes anew)
            return stop if stop is not None else tasks.create(context, request, tool, kept, charge)  # else no task
        tasks.without_task(request, tool)  # the call runs as a call (2026), or is refused
    progress = request.progress_token is not None  # a host that resets its timer on progress hears it
    result = request.tenant.call_tool(name, arguments, CallOptions(
        request.version, request.cancelled, on_update=reporter(request), gate=gate, closing=context.closing,
        profile=request.profile, narrow=request.narrow, deadline=profiles.wait_budget(request.profile, progress),
        heartbeat=profiles.heartbeat(request.profile, progress, context.config.progress_heartbeat)))
    if result is None and request.cancelled.by_server:
        return results.stopped_result(name)
    return result if result is not None else {"content": []}


def _gate(context: Context, request: Request) -> Gate | None:
    """The confirmation step, for tools with side effects if the policy asks for one, and for calls
    past the key's budget if the spend guard asks (:mod:`colabhive_mcp.tenants.spend`); ``None``
    when nothing is ever asked (a call past a budget is then refused)."""
    if not context.confirms:
        return None
    policy = context.config.confirm_side_effects

    def gate(tool: Tool, arguments: dict[str, Any], over: OverBudget | None) -> dict[str, Any] | None:
        """``None`` to run the tool, else the result to answer instead; past a budget (``over``), only
        the user's yes runs it."""
        if over is None and not confirm.needs_confirmation(policy, tool):
            return None
        if not confirm.can_confirm(request.capabilities):
            if over is not None:
                return over.result
            if policy == "ask":
                return None
            if request.modern:
                raise JsonRpcError(MISSING_REQUIRED_CLIENT_CAPABILITY,
                                   f"Tool {tool.name!r} needs the user's confirmation (form-mode elicitation)",
                                   {"requiredCapabilities": confirm.FORM_CAPABILITY})
            return results.error_result(
                f"Tool {tool.name!r} has side effects and this server runs it only with the user's "
                "confirmation, which this client cannot ask for (no form-mode elicitation capability).")
        form = confirm.elicitation(tool, arguments, request.version, over.situation if over else None)
        if not request.modern:
            answer = context.inflight.ask(request, "elicitation/create", form, confirm.ASK_TIMEOUT_S)
            return None if confirm.accepted(answer) else confirm.declined(tool)
        answers = request.params.get("inputResponses") or {}
        if confirm.INPUT_KEY in answers and context.request_states.valid(
                request.params.get("requestState"), request.tenant.binding, tool, arguments, over is not None):
            return None if confirm.accepted(answers[confirm.INPUT_KEY]) else confirm.declined(tool)
        return {"resultType": "input_required",
                "inputRequests": {confirm.INPUT_KEY: {"method": "elicitation/create", "params": form}},
                "requestState": context.request_states.issue(request.tenant.binding, tool, arguments, over is not None)}

    return gate
