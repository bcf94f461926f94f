"""What a request is served with: the legacy session it belongs to, and the request itself."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ..cancellation import Cancellation
from ..policy import Policy
from ..profiles import UNKNOWN, Profile
from ..tenant import Tenant
from .eras import LOG_LEVELS
from .jsonrpc import is_valid_id, notification


@dataclass(frozen=True)
class Narrowing:
    """A hosted request's own narrowing of the tool set: it can hide tools, never show one the
    server's own policy hides."""

    tools: tuple[str, ...] = ()  # slug globs: only these (none: all)
    read_only: bool = False

    def policy(self) -> Policy:
        return Policy(allow=self.tools or ("*",), read_only=self.read_only)


@dataclass
class Session:
    """Legacy handshake state: one per stdio process, one per HTTP session."""

    id: str = "stdio"
    transport: str = "stdio"
    version: str | None = None
    client_info: dict[str, Any] = field(default_factory=dict)
    capabilities: dict[str, Any] = field(default_factory=dict)
    log_level: str | None = None


@dataclass
class Request:
    """One request being served, with what its era says about the client."""

    id: Any
    method: str
    params: dict[str, Any]
    version: str
    modern: bool
    tenant: Tenant
    notify: Callable[[dict[str, Any]], None]
    cancelled: Cancellation
    log_level: str | None = None
    session: Session | None = None
    capabilities: dict[str, Any] = field(default_factory=dict)
    profile: Profile = UNKNOWN
    narrow: Policy | None = None
    meta: dict[str, Any] = field(default_factory=dict)  # params._meta when it is an object

    def send(self, method: str, params: dict[str, Any]) -> None:
        """Emit a notification for this request, unless it has been cancelled."""
        if not self.cancelled.is_set():
            self.notify(notification(method, params))

    @property
    def progress_token(self) -> str | int | None:
        """The client's progress token, when it sent a usable one."""
        token = self.meta.get("progressToken")
        return token if is_valid_id(token) else None

    def wants_log(self, level: str) -> bool:
        return self.log_level is not None and LOG_LEVELS.index(level) >= LOG_LEVELS.index(self.log_level)
