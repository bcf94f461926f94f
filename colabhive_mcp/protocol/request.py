"""What a request is served with: the legacy session it belongs to, and the request itself."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ..calls.cancellation import Cancellation
from ..catalog.policy import Policy
from ..catalog.profiles import UNKNOWN, Profile
from ..tenants.tenant import Tenant
from .envelope import LOG_LEVELS
from .jsonrpc import RequestFrame, RequestId, notification


@dataclass(frozen=True)
class Narrowing:
    """A hosted request's own narrowing of the tool set: it can hide tools, never show one the
    server's own policy hides. Its headers ask for some; an OAuth grant's scopes are one too."""

    tools: tuple[str, ...] = ()  # slug globs: only these (none: all)
    read_only: bool = False
    granted: frozenset[str] | None = None  # the scopes of the grant the request was made with (None: a key's)

    def policy(self, billable: tuple[str, ...] = ()) -> Policy:
        """As a policy; ``billable``: the slug globs the server counts billable (what the scopes see)."""
        return Policy(allow=self.tools or ("*",), read_only=self.read_only, granted=self.granted, billable=billable)


@dataclass
class Session:
    """Legacy handshake state: one per stdio process, one per HTTP session."""

    id: str = "stdio"
    transport: str = "stdio"
    version: str | None = None
    client_info: dict[str, Any] = field(default_factory=dict)
    capabilities: dict[str, Any] = field(default_factory=dict)
    log_level: str | None = None


@dataclass(frozen=True)
class Request:
    """One request being served: its frame, with what its era says about the client."""

    frame: RequestFrame
    version: str  # the revision it is served under: its session's, or the one its _meta names
    tenant: Tenant
    notify: Callable[[dict[str, Any]], None]
    cancelled: Cancellation
    capabilities: dict[str, Any]
    profile: Profile = UNKNOWN
    log_level: str | None = None
    session: Session | None = None  # the legacy session (None: a 2026 request, stateless)
    narrow: Policy | None = None

    @property
    def id(self) -> RequestId:
        return self.frame.id

    @property
    def method(self) -> str:
        return self.frame.method

    @property
    def params(self) -> dict[str, Any]:
        return self.frame.params

    @property
    def modern(self) -> bool:
        return self.frame.modern

    @property
    def progress_token(self) -> RequestId | None:
        return self.frame.progress_token

    def send(self, method: str, params: dict[str, Any]) -> None:
        """Emit a notification for this request, unless it has been cancelled."""
        if not self.cancelled.is_set():
            self.notify(notification(method, params))

    def wants_log(self, level: str) -> bool:
        return self.log_level is not None and LOG_LEVELS.index(level) >= LOG_LEVELS.index(self.log_level)
