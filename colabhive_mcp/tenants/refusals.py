"""What a tenant answers instead of running a call or reaching its work: a tool it does not have, a
call refused before the gateway heard of it (or outside the request's OAuth grant), a gateway that
failed a request about the key's work."""

from __future__ import annotations

from typing import Any, NamedTuple

from ..calls import results
from ..catalog.tools import Catalog, Tool
from .. import scopes
from ..errors import INSUFFICIENT_SCOPE, INVALID_PARAMS, ColabHiveError
from ..gateway.client import GatewayError


class UnknownTool(ColabHiveError, LookupError):
    """No tool of that name exists for this tenant."""

    code = INVALID_PARAMS
    http_status = 200

    def __init__(self, name: str) -> None:
        super().__init__(f"Unknown tool: {name}")


class Unreachable(ColabHiveError):
    """The gateway failed a request about this key's work; the message says so for a person, and
    the gateway's own status and ``Retry-After`` (when it answered) are kept."""

    http_status = 503

    def __init__(self, message: str, status: int | None = None, retry_after: float | None = None) -> None:
        super().__init__(message, retry_after)
        self.status = status  # the gateway's

    @classmethod
    def of(cls, exc: GatewayError, message: str) -> Unreachable:
        return cls(message, exc.status, exc.retry_after)


class Refused(ColabHiveError):
    """A call refused before the gateway hears of it: ``result`` is the ``isError`` answer that says why."""

    http_status = 200

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.result = results.error_result(message)


class Prepared(NamedTuple):
    """A call ready to run: the tool, its catalogue, and the arguments it gets."""

    catalog: Catalog
    tool: Tool
    arguments: dict[str, Any]


class OutOfScope(ColabHiveError):
    """A call of a tool the request's OAuth grant does not cover: HTTP answers 403 with the challenge
    that asks for ``scope`` (every scope the call needs, the granted ones with them), so the host can
    ask its user for more and call again."""

    code = INSUFFICIENT_SCOPE
    http_status = 403

    def __init__(self, tool_name: str, wanted: frozenset[str]) -> None:
        self.scope = scopes.spelt(wanted)
        super().__init__(f"Tool {tool_name!r} needs more than this connection was granted: the scope {self.scope}. "
                         "The application can ask you to grant it (connect again and choose what it may use).")

    @property
    def data(self) -> dict[str, str]:
        return {"scope": self.scope}
