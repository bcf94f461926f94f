"""Tasks: long tool calls as handles the client polls, mapped onto upstream invocations.

A task id names the invocation and is bound to the caller's key (:mod:`.task_ids`), so any worker
of any instance answers for it by asking the gateway, with no server-side state. Both designs:

- 2025-11-25 core tasks: ``tools/call`` with ``params.task`` on a tool whose
  ``execution.taskSupport`` is ``optional``; ``tasks/get``, ``tasks/result`` (blocks),
  ``tasks/cancel``. No ``tasks/list``: it could not be bound to the key without a store.
- 2026-07-28 extension ``io.modelcontextprotocol/tasks``: for a declaring client the server
  answers ``tools/call`` of a slow or batch tool with ``resultType: "task"``; ``tasks/get``
  carries the result inline; ``tasks/cancel`` and ``tasks/update`` acknowledge.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..calls import results
from ..calls.polling import status_message
from ..catalog.tools import Tool
from ..invocation import Invocation
from ..logs import log
from ..revisions import TASKS_VERSIONS, revision
from ..tenants.limits import LimitReached
from ..tenants.spend import NOTHING, Charge
from ..tenants.refusals import Unreachable
from .context import Context
from .jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND, MISSING_REQUIRED_CLIENT_CAPABILITY, JsonRpcError
from .request import Request
from .task_ids import TTL_MS, TaskRef, now

EXTENSION = "io.modelcontextprotocol/tasks"
RELATED_TASK = "io.modelcontextprotocol/related-task"
POLL_INTERVAL_MS = 2_000


def wanted(request: Request) -> bool:
    """A 2025-11-25 call that asks for a task, or a 2026 call from a client with the extension."""
    if request.modern:
        return declared(request)
    return revision(request.version).core_tasks and isinstance(request.params.get("task"), dict)


def without_task(request: Request, tool: Tool) -> None:
    """A task asked of a tool that does not run as one: a 2026 call simply runs; a legacy one is refused."""
    if not request.modern:
        raise JsonRpcError(METHOD_NOT_FOUND, f"Tool {tool.name!r} does not run as a task (taskSupport forbidden)")


def create(context: Context, request: Request, tool: Tool, arguments: dict[str, Any],
           charge: Charge = NOTHING) -> dict[str, Any]:
    """The task for a long-running tool, ``charge``-d to the key's budget (given back when it does not start)."""
    try:
        invocation = request.tenant.start(tool, arguments, TTL_MS / 1000, charge)
    except LimitReached as exc:
        return exc.result
    except Unreachable as exc:
        return results.error_result(str(exc))
    ref = context.task_ids.issue(request.tenant.binding, invocation.id, tool)
    fields = task_fields(ref, invocation)
    log.bind(tool=tool.name, slug=tool.slug, tenant=request.tenant.key_id, invocation_id=ref.invocation_id,
             era="modern" if request.modern else "legacy").info("mcp.task.created")
    return {"resultType": "task", **modern_fields(fields)} if request.modern else {"task": fields}


def get(context: Context, request: Request) -> dict[str, Any]:
    ref = _task(context, request)
    invocation = _fetch(request, ref)
    fields = task_fields(ref, invocation)
    if not request.modern:
        return fields
    fields = modern_fields(fields)
    if fields["status"] in ("completed", "failed"):  # an upstream failure is a completed isError result
        fields.update(status="completed", result=_outcome(request, ref, invocation))
    return fields


def result(context: Context, request: Request) -> dict[str, Any]:
    """``tasks/result`` blocks until the invocation is terminal, for ``stream_max_age`` at most; a wait
    that ends first (that long, the request was cancelled, the server is stopping) leaves the task
    running: only ``tasks/cancel`` stops it."""
    ref = _task(context, request)
    try:
        invocation = request.tenant.wait(_fetch(request, ref), request.cancelled, context.config.stream_max_age)
    except Unreachable as exc:
        invocation = Invocation(ref.invocation_id, "failed", error=str(exc))
    if invocation is None:
        raise JsonRpcError(INTERNAL_ERROR, "Stopped waiting before the task finished (the wait reached its "
                           "limit, or the server is restarting); the task is still running: call tasks/result again")
    answer = _outcome(request, ref, invocation)
    answer.setdefault("_meta", {})[RELATED_TASK] = {"taskId": ref.task_id}
    return answer


def cancel(context: Context, request: Request) -> dict[str, Any]:
    """Stop the task's work upstream, and say where it then stands as the gateway says it: a task that
    finished first cannot be cancelled, and one the gateway cannot stop is not said to be (the 2026
    extension's cancel is an acknowledgment only, even then: ``tasks/get`` says how the work ends)."""
    ref = _task(context, request)
    if not request.modern and _fetch(request, ref).terminal:
        raise JsonRpcError(INVALID_PARAMS, "Cannot cancel a task that has already finished")
    try:
        invocation = request.tenant.stop(ref.invocation_id)
    except Unreachable as exc:
        raise JsonRpcError(INTERNAL_ERROR, f"Cannot cancel this task: {exc}") from None
    if invocation is None:  # no cancel route, or no such invocation (any more): which one, the gateway says
        _fetch(request, ref)
        if request.modern:
            return {}
        raise JsonRpcError(INTERNAL_ERROR, "Cannot cancel this task: ColabHive has no way to stop its work, which "
                           "goes on (tasks/get says how it ends)")
    if request.modern:
        return {}
    if invocation.terminal and invocation.status != "cancelled":
        raise JsonRpcError(INVALID_PARAMS, "Cannot cancel a task that has already finished")
    return task_fields(ref, invocation, status="cancelled")  # (the gateway may still be stopping it)


def update(context: Context, request: Request) -> dict[str, Any]:
    _task(context, request)
    return {}  # no task of ours ever waits for input


def task_fields(ref: TaskRef, invocation: Invocation, status: str | None = None) -> dict[str, Any]:
    """The ``Task`` object (2025-11-25 field names) for where the invocation stands."""
    status = status or ("completed" if invocation.succeeded else invocation.status if invocation.terminal else "working")
    fields = {"taskId": ref.task_id, "status": status,
              "createdAt": ref.created, "lastUpdatedAt": _updated(ref.created, invocation.updated_at),
              "ttl": TTL_MS, "pollInterval": POLL_INTERVAL_MS}
    if fields["status"] == "working":
        fields["statusMessage"] = status_message(invocation)
    elif fields["status"] == "failed":
        fields["statusMessage"] = results.failure_message(invocation.error)
    return fields


def _updated(created: str, updated: str | None) -> str:
    """When the task last changed: the gateway's time, but never before the task was created (the
    two clocks differ, and the task is created after its invocation)."""
    if updated is not None:
        try:
            return updated if datetime.fromisoformat(updated) >= datetime.fromisoformat(created) else created
        except (TypeError, ValueError):  # not a time (or one with a zone against one without)
            pass
    return now()  # absent, or not a time: now is as good as the gateway's


def modern_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """The extension's spelling: ``ttlMs`` and ``pollIntervalMs``."""
    renamed = {k: v for k, v in fields.items() if k not in ("ttl", "pollInterval")}
    return {**renamed, "ttlMs": fields["ttl"], "pollIntervalMs": fields["pollInterval"]}


def declared(request: Request) -> bool:
    """Whether a 2026 client declared the tasks extension."""
    extensions = request.capabilities.get("extensions")
    return isinstance(extensions, dict) and EXTENSION in extensions


def require_extension(request: Request, what: str) -> None:
    """Refuse a 2026 request that needs the tasks extension its client did not declare (-32021)."""
    if not declared(request):
        raise JsonRpcError(MISSING_REQUIRED_CLIENT_CAPABILITY, f"{what} needs the {EXTENSION} extension",
                           {"requiredCapabilities": {"extensions": {EXTENSION: {}}}})


def _task(context: Context, request: Request) -> TaskRef:
    if request.modern:
        require_extension(request, "tasks/*")
    elif not revision(request.version).core_tasks:
        raise JsonRpcError(METHOD_NOT_FOUND, f"Method not found: {request.method} (tasks need protocol "
                           f"{' or '.join(TASKS_VERSIONS)})")
    return context.task_ids.find(request.tenant.binding, request.params.get("taskId"))


def _fetch(request: Request, ref: TaskRef) -> Invocation:
    try:
        invocation = request.tenant.invocation(ref.invocation_id)
    except Unreachable as exc:
        raise JsonRpcError(INTERNAL_ERROR, f"Cannot reach ColabHive for this task: {exc}") from None
    if invocation is None:
        raise JsonRpcError(INVALID_PARAMS, "Failed to retrieve task: Task not found")
    return invocation


def _outcome(request: Request, ref: TaskRef, invocation: Invocation) -> dict[str, Any]:
    """The ``CallToolResult`` of a terminal invocation, as the tool would have answered."""
    tool = request.tenant.catalog().by_slug.get(ref.slug)
    return results.tool_result(invocation, ref.tool, request.version, tool.output_check if tool else None)
