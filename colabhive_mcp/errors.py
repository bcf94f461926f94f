"""The house's errors: one tree, each saying what it means to a client.

::

    ColabHiveError      message · code (JSON-RPC) · http_status (a hint) · retry_after · data
    ├── GatewayError    a request to the Builder Gateway failed (gateway/client.py)     -32603 · 502
    ├── KeyRejected     the gateway refused the API key itself (keys.py)                -31401 · 401
    ├── LimitReached    a limit is full: the key's, or the server's (tenants/limits.py) -31429 · 429 / 503
    │   └── OverBudget  a billable call past the key's budget (tenants/spend.py)      an isError result
    ├── Unreachable     the gateway failed a request about a key's work (tenants/refusals.py) -32603 · 503
    ├── ManifestError   no tool list can be served (manifest/version.py)                -32603 · 503
    ├── UnknownTool     no tool of that name for this key (tenants/refusals.py)         -32602
    ├── OutOfScope      an OAuth grant does not cover the call (tenants/refusals.py)    -31403 · 403
    ├── Refused         a call refused before the gateway heard of it (tenants/refusals.py) an isError result
    └── JsonRpcError    a protocol error with its own code (here; spoken by protocol/jsonrpc.py)
        └── HttpError   an answer decided at the HTTP edge, with its status (transports/http/outgoing.py)

Code that raises one says what happened; each transport maps the tree to the wire in one place
(:func:`colabhive_mcp.protocol.jsonrpc.as_error` for JSON-RPC, the HTTP edge for statuses and
headers). This module imports nothing of the house: every other one may import it.
"""

from __future__ import annotations

from typing import Any

INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
# this server's own codes (outside the reserved range): the gateway rejected the caller's API key;
# a limit (the key's, or the server's) is full for now: the HTTP answer's Retry-After says when to retry
KEY_REJECTED = -31401
INSUFFICIENT_SCOPE = -31403  # an OAuth grant does not cover the call: HTTP 403, with the challenge that asks for more
LIMIT_REACHED = -31429
BUSY_RETRY_S = 5.0  # what to tell a caller refused for a place that frees when some work ends


class ColabHiveError(Exception):
    code = INTERNAL_ERROR  # the JSON-RPC error code a client is answered with
    http_status = 500  # the HTTP status of an answer this error decides

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after  # seconds after which asking again may work, when known

    @property
    def data(self) -> Any:
        """What a program is told beside the message (a JSON-RPC error's ``data``), if anything."""
        return None

    @property
    def client_message(self) -> str:
        """What a client is told (the message, unless the error has advice to add)."""
        return self.message


class JsonRpcError(ColabHiveError):
    """An error that becomes a JSON-RPC ``error`` object (answered in-band: an HTTP 200 unless its
    transport's table says otherwise)."""

    http_status = 200
    data: Any = None  # its own, given

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.data = data

    def to_dict(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error
