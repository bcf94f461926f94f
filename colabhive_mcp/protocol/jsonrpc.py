"""JSON-RPC 2.0 framing: decoding, envelope checks, and building responses.

Nothing here knows about MCP methods; the rest of :mod:`colabhive_mcp.protocol` does.
"""

from __future__ import annotations

import json
import math
import secrets
from typing import Any

from ..encoding import PARSE_DEPTH, EncodedList, to_json, too_deep
from .. import errors
from ..errors import ColabHiveError

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS, INTERNAL_ERROR = errors.INVALID_PARAMS, errors.INTERNAL_ERROR
KEY_REJECTED, LIMIT_REACHED = errors.KEY_REJECTED, errors.LIMIT_REACHED  # this server's own (see errors.py)
# 2026-07-28 codes
HEADER_MISMATCH = -32020
MISSING_REQUIRED_CLIENT_CAPABILITY = -32021
UNSUPPORTED_PROTOCOL_VERSION = -32022
MAX_DEPTH = 128  # deeper messages are refused: code that walks them recursively would overflow


class JsonRpcError(ColabHiveError):
    """An error that becomes a JSON-RPC ``error`` object (answered in-band: an HTTP 200 unless its
    transport's table says otherwise)."""

    http_status = 200

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.data = data

    def to_dict(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


def decode(raw: bytes | str) -> Any:
    """Parse one JSON text; raise :class:`JsonRpcError` when it is not JSON (parse error) or
    nests deeper than ``MAX_DEPTH`` (invalid request)."""
    try:
        if isinstance(raw, bytes):
            raw = raw.decode("utf-8")
        if too_deep(raw):
            raise JsonRpcError(PARSE_ERROR, f"Parse error: nested deeper than {PARSE_DEPTH} levels")
        message = json.loads(raw, parse_constant=_not_json, parse_float=_finite)
    except UnicodeDecodeError:
        raise JsonRpcError(PARSE_ERROR, "Parse error: the message is not valid UTF-8") from None
    except (ValueError, RecursionError) as exc:
        raise JsonRpcError(PARSE_ERROR, f"Parse error: {_short(exc)}") from None
    if _deeper_than(message, MAX_DEPTH):
        raise JsonRpcError(INVALID_REQUEST, f"Invalid Request: nested deeper than {MAX_DEPTH} levels")
    return message


def _not_json(constant: str) -> Any:
    """``NaN``, ``Infinity`` and ``-Infinity``: Python's json reads them, JSON (RFC 8259) has none."""
    raise ValueError(f"{constant} is not a JSON value")


def _finite(text: str) -> float:
    """A JSON number as a float; one too large for it (``1e999``) would be written back as ``Infinity``."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:20]} is too large")
    return value


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether arrays and objects nest more than ``limit`` levels (level by level: any depth is safe)."""
    level = [value] if isinstance(value, (dict, list)) else []
    for _ in range(limit):
        if not level:
            return False
        level = [child for item in level for child in (item.values() if isinstance(item, dict) else item)
                 if isinstance(child, (dict, list))]
    return bool(level)


_SPLICE = "\u0000" + secrets.token_hex(16)  # unguessable: no client-chosen string can collide with it
_SPLICED = json.dumps(_SPLICE).encode()


def encode(message: Any) -> bytes:
    """Serialise a message compactly as UTF-8 (never contains a raw newline).

    A result's ``tools`` that is an :class:`EncodedList` is spliced in as it was encoded.
    """
    result = message.get("result") if isinstance(message, dict) else None
    tools = result.get("tools") if isinstance(result, dict) else None
    if isinstance(tools, EncodedList) and isinstance(result, dict):
        head, _, tail = to_json({**message, "result": {**result, "tools": _SPLICE}}).partition(_SPLICED)
        return b"".join((head, tools.raw, tail))  # one copy of the (large) list, no re-encoding
    return to_json(message)


def is_valid_id(value: Any) -> bool:
    """MCP request ids are strings or integers (never null, bool or float)."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def check_envelope(message: Any) -> None:
    """Raise :class:`JsonRpcError` (invalid request) unless ``message`` is a JSON-RPC 2.0 object."""
    if not isinstance(message, dict):
        raise JsonRpcError(INVALID_REQUEST, "Invalid Request: a JSON-RPC message must be an object")
    if message.get("jsonrpc") != "2.0":
        raise JsonRpcError(INVALID_REQUEST, 'Invalid Request: "jsonrpc" must be "2.0"')
    if "method" in message:
        if not isinstance(message["method"], str):
            raise JsonRpcError(INVALID_REQUEST, 'Invalid Request: "method" must be a string')
        if "id" in message and not is_valid_id(message["id"]):
            raise JsonRpcError(INVALID_REQUEST, 'Invalid Request: "id" must be a string or an integer')
        if "params" in message and not isinstance(message["params"], dict):
            raise JsonRpcError(INVALID_PARAMS, 'Invalid params: "params" must be an object')
    elif not ("id" in message and ("result" in message or "error" in message)):
        raise JsonRpcError(INVALID_REQUEST, 'Invalid Request: no "method", and not a response either')
    elif not (message["id"] is None or is_valid_id(message["id"])):
        raise JsonRpcError(INVALID_REQUEST, 'Invalid Request: a response\'s "id" must be a string or an integer')


def method_of(message: Any) -> str | None:
    """The message's method when it has a string one; safe on any decoded JSON value.

    Transports look at a frame before the core has checked it: they read its fields only
    through this and :func:`params_of`, never with a bare ``message[...]``.
    """
    method = message.get("method") if isinstance(message, dict) else None
    return method if isinstance(method, str) else None


def params_of(message: Any) -> dict[str, Any]:
    """The message's params when they are an object, else ``{}``; safe on any decoded JSON value."""
    params = message.get("params") if isinstance(message, dict) else None
    return params if isinstance(params, dict) else {}


def meta_of(message: Any) -> dict[str, Any]:
    """``params._meta`` when it is an object, else ``{}``."""
    meta = params_of(message).get("_meta")
    return meta if isinstance(meta, dict) else {}


def is_request(message: dict[str, Any]) -> bool:
    return "method" in message and "id" in message


def request_id(message: Any) -> Any:
    """The message's id when it is a usable one, else ``None`` (answered as ``"id": null``)."""
    if isinstance(message, dict) and is_valid_id(message.get("id")):
        return message["id"]
    return None


def notification(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": method, **({"params": params} if params is not None else {})}


def result(id_: Any, value: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "result": value}


def error(id_: Any, exc: JsonRpcError) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "error": exc.to_dict()}


def internal_error(message: Any) -> dict[str, Any] | None:
    """The answer to a message whose handling failed unexpectedly: ``-32603`` for a request (with
    its id when usable), nothing for a notification or a response."""
    if isinstance(message, dict) and ("id" not in message or "method" not in message):
        return None
    return internal(request_id(message))


def internal(id_: Any) -> dict[str, Any]:
    """``-32603`` for the request ``id_``, whose handling failed unexpectedly."""
    return error(id_, JsonRpcError(INTERNAL_ERROR, "Internal error"))


def _short(exc: Exception, limit: int = 200) -> str:
    text = str(exc)
    return text if len(text) <= limit else text[:limit] + "…"


def as_error(exc: ColabHiveError) -> JsonRpcError:
    """The JSON-RPC error any of the house's errors is answered with (the one mapping to the wire)."""
    return exc if isinstance(exc, JsonRpcError) else JsonRpcError(exc.code, exc.client_message)
