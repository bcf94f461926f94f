"""Tasks: long tool calls as handles the client polls, mapped onto upstream invocations.

A task id is a signed token that names the invocation and the tool and is bound to the
caller's key, so any worker of any instance answers for it by asking the gateway, with no
server-side state; another key gets "not found". Both designs are served:

- 2025-11-25 core tasks: ``tools/call`` with ``params.task`` on a tool whose
  ``execution.taskSupport`` is ``optional``; ``tasks/get``, ``tasks/result`` (blocks),
  ``tasks/cancel``. No ``tasks/list``: it could not be bound to the key without a store.
- 2026-07-28 extension ``io.modelcontextprotocol/tasks``: for a declaring client the server
  answers ``tools/call`` of a slow or batch tool with ``resultType: "task"``; ``tasks/get``
  carries the result inline; ``tasks/cancel`` and ``tasks/update`` acknowledge.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from . import results
from .gateway import GatewayError
from .invocation import follow, status_message
from .jsonrpc import INVALID_PARAMS, MISSING_REQUIRED_CLIENT_CAPABILITY, JsonRpcError
from .signing import Signer
from .tenant import Tenant
from .tools import Tool

EXTENSION = "io.modelcontextprotocol/tasks"
RELATED_TASK = "io.modelcontextprotocol/related-task"
TTL_MS = 3_600_000
POLL_INTERVAL_MS = 2_000
RESULT_WAIT_S = TTL_MS / 1000
STATUS = {"queued": "working", "running": "working", "submitted": "working", "succeeded": "completed",
          "completed": "completed", "failed": "failed", "cancelled": "cancelled"}


@dataclass(frozen=True)
class TaskRef:
    """What a task id says: the upstream invocation, the tool, and when the task was created."""

    task_id: str
    invocation_id: str
    tool: str  # the MCP name the client called
    slug: str
    created: str


class TaskIds:
    def __init__(self, secret: str | bytes) -> None:
        self._signer = Signer(secret, "t1.", TTL_MS / 1000)

    def issue(self, tenant: Tenant, invocation_id: str, tool: Tool) -> TaskRef:
        created = _now()
        task_id = self._signer.dumps({"i": invocation_id, "n": tool.name, "s": tool.slug, "k": tenant.binding,
                                      "c": created})
        return TaskRef(task_id, invocation_id, tool.name, tool.slug, created)

    def find(self, tenant: Tenant, task_id: Any) -> TaskRef:
        """The task behind ``task_id`` if it belongs to this tenant's key, else ``-32602``."""
        payload = self._signer.loads(task_id)
        if payload is None or payload.get("k") != tenant.binding:
            raise JsonRpcError(INVALID_PARAMS, "Failed to retrieve task: Task not found")
        return TaskRef(task_id, payload["i"], payload["n"], payload["s"], payload["c"])


def start(ids: TaskIds, tenant: Tenant, tool: Tool, arguments: dict[str, Any]) -> tuple[TaskRef, dict[str, Any]]:
    """Invoke without waiting; the task stands for the invocation."""
    invocation = tenant.gateway.invoke(tool.slug, arguments, sync=False, idempotency_key=str(uuid.uuid4()))
    return ids.issue(tenant, invocation["invocation_id"], tool), invocation


def task_fields(ref: TaskRef, invocation: dict[str, Any], status: str | None = None) -> dict[str, Any]:
    """The ``Task`` object (2025-11-25 field names) for where the invocation stands."""
    fields = {"taskId": ref.task_id, "status": status or STATUS.get(invocation.get("status"), "working"),
              "createdAt": ref.created, "lastUpdatedAt": invocation.get("updated_at") or _now(),
              "ttl": TTL_MS, "pollInterval": POLL_INTERVAL_MS}
    if fields["status"] == "working":
        fields["statusMessage"] = status_message(invocation)
    return fields


def modern_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """The extension's spelling: ``ttlMs`` and ``pollIntervalMs``."""
    renamed = {k: v for k, v in fields.items() if k not in ("ttl", "pollInterval")}
    return {**renamed, "ttlMs": fields["ttl"], "pollIntervalMs": fields["pollInterval"]}


def fetch(tenant: Tenant, ref: TaskRef) -> dict[str, Any]:
    try:
        invocation, _ = tenant.gateway.get_invocation(ref.invocation_id)
    except GatewayError as exc:
        if exc.status == 404:
            raise JsonRpcError(INVALID_PARAMS, "Failed to retrieve task: Task not found") from None
        raise JsonRpcError(-32603, f"Cannot reach ColabHive for this task: {exc.message}") from None
    return invocation


def outcome(tenant: Tenant, ref: TaskRef, invocation: dict[str, Any], version: str) -> dict[str, Any]:
    """The ``CallToolResult`` of a terminal invocation, as the tool would have answered."""
    tool = tenant.catalog().by_slug.get(ref.slug)
    return results.tool_result(invocation, ref.tool, version, tool.output_check if tool else None)


def wait(tenant: Tenant, ref: TaskRef, cancelled: threading.Event) -> dict[str, Any] | None:
    """Block until the invocation is terminal (``tasks/result``); ``None`` when the wait ends first
    (the request was cancelled, the server is stopping): the task itself keeps running."""
    invocation = fetch(tenant, ref)
    try:
        outcome = follow(tenant.gateway, invocation, cancelled=cancelled, max_wait=RESULT_WAIT_S,
                         backoff=tenant.backoff)  # a cancelled wait leaves the task running: only tasks/cancel stops it
    except GatewayError as exc:
        return {"status": "failed", "error": results.gateway_failure(ref.tool, exc)}
    return outcome.invocation if outcome.state == "done" else None


def cancel(tenant: Tenant, ref: TaskRef) -> dict[str, Any]:
    try:
        return tenant.gateway.cancel(ref.invocation_id) or fetch(tenant, ref)
    except GatewayError as exc:
        raise JsonRpcError(-32603, f"Cannot reach ColabHive to cancel this task: {exc.message}") from None


def require_extension(capabilities: dict[str, Any]) -> None:
    """2026: ``tasks/*`` only for clients that declare the extension (``-32021`` otherwise)."""
    if EXTENSION not in (capabilities.get("extensions") or {}):
        raise JsonRpcError(MISSING_REQUIRED_CLIENT_CAPABILITY, f"tasks/* needs the {EXTENSION} extension",
                           {"requiredCapabilities": {"extensions": {EXTENSION: {}}}})


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
