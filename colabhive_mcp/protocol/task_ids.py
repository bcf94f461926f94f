"""Task ids: signed tokens that name the upstream invocation and the tool, bound to the caller's key.

Any worker of any instance reads one with the shared secret, so tasks need no server-side store;
another key, an altered id or an expired one is "not found".
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ..catalog.tools import Tool
from ..signing import Signer
from .jsonrpc import INVALID_PARAMS, JsonRpcError

TTL_MS = 3_600_000


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

    def issue(self, binding: str, invocation_id: str, tool: Tool) -> TaskRef:
        created = now()
        task_id = self._signer.dumps({"i": invocation_id, "n": tool.name, "s": tool.slug, "k": binding, "c": created})
        return TaskRef(task_id, invocation_id, tool.name, tool.slug, created)

    def find(self, binding: str, task_id: Any) -> TaskRef:
        """The task behind ``task_id`` if it belongs to this key, else ``-32602``."""
        payload = self._signer.loads(task_id)
        if payload is None or payload.get("k") != binding:
            raise JsonRpcError(INVALID_PARAMS, "Failed to retrieve task: Task not found")
        return TaskRef(task_id, payload["i"], payload["n"], payload["s"], payload["c"])


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
