"""JSON-RPC 2.0 framing: bytes become one frozen value per message, checked once; answers are built here.

:func:`parse` (bytes) and :func:`frame_of` (a decoded value) are the only readers of a raw message:
a request, a notification, the client's answer to a request of ours, a batch of those, or an
invalid message with the error it is answered with. Everything after them reads fields. Each
value carries the few MCP facts every layer asks of a frame (the ``_meta`` object, whether it
names its revision there, its progress token, the name its ``Mcp-Name`` header mirrors); what
the methods mean is the rest of :mod:`colabhive_mcp.protocol`'s.
"""

from __future__ import annotations

import json
import math
import secrets
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, Mapping, TypeGuard, Union

from ..encoding import PARSE_DEPTH, EncodedList, to_json, too_deep
from .. import errors
from ..errors import ColabHiveError, JsonRpcError
from . import envelope, methods
from .envelope import Envelope

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS, INTERNAL_ERROR = errors.INVALID_PARAMS, errors.INTERNAL_ERROR
KEY_REJECTED, LIMIT_REACHED = errors.KEY_REJECTED, errors.LIMIT_REACHED  # this server's own (see errors.py)
INSUFFICIENT_SCOPE = errors.INSUFFICIENT_SCOPE
# 2026-07-28 codes
HEADER_MISMATCH = envelope.HEADER_MISMATCH
MISSING_REQUIRED_CLIENT_CAPABILITY = -32021
UNSUPPORTED_PROTOCOL_VERSION = envelope.UNSUPPORTED_PROTOCOL_VERSION  # (the envelope's own refusal)
MAX_DEPTH = 128  # deeper messages are refused: code that walks them recursively would overflow
# 2026: the params field each method's Mcp-Name header mirrors


def _decode(raw: bytes | str) -> Any:
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


RequestId = Union[str, int]
NO_META: Mapping[str, Any] = MappingProxyType({})  # what a frame without params has for _meta


@dataclass(frozen=True, slots=True)
class RequestFrame:
    """A request: it is answered, with a result or an error."""

    id: RequestId
    method: str
    params: dict[str, Any]
    meta: dict[str, Any]  # params._meta when it is an object, else {}
    envelope: Envelope | None  # a 2026 request's _meta, read once (None: a handshake-era request)
    name: str | None  # what its Mcp-Name header mirrors: the tool called, the task named (methods.Method.named)
    progress_token: RequestId | None  # the client's, when it sent a usable one
    raw: dict[str, Any]  # as it came: for the frame log only

    @property
    def modern(self) -> bool:
        """Whether it names its revision in ``_meta``: served statelessly (``initialize`` never is)."""
        return self.envelope is not None


@dataclass(frozen=True, slots=True)
class NotificationFrame:
    """A notification: never answered."""

    method: str
    params: dict[str, Any]
    meta: dict[str, Any]
    envelope: Envelope | None
    id: ClassVar[None] = None

    @property
    def modern(self) -> bool:
        return self.envelope is not None


@dataclass(frozen=True, slots=True)
class ResponseFrame:
    """The client's answer to a request of ours (a confirmation)."""

    id: RequestId | None
    result: Any  # None when it is an error
    method: ClassVar[None] = None
    meta: ClassVar[Mapping[str, Any]] = NO_META
    envelope: ClassVar[None] = None
    modern: ClassVar[bool] = False


@dataclass(frozen=True, slots=True)
class InvalidFrame:
    """Not a JSON-RPC 2.0 message: answered with ``error`` (under ``id`` when it had a usable one),
    unless it looks like a notification, which nobody awaits an answer to."""

    error: JsonRpcError
    id: RequestId | None
    answered: bool
    method: str | None  # its method when it had a string one
    meta: dict[str, Any]  # its params._meta when it had one: its era is read as for any other
    envelope: Envelope | None

    @property
    def modern(self) -> bool:
        return self.envelope is not None


@dataclass(frozen=True, slots=True)
class BatchFrame:
    """A JSON array of messages, each read as one of the values above (a nested array is invalid)."""

    frames: tuple[Single, ...]
    method: ClassVar[None] = None
    id: ClassVar[None] = None
    meta: ClassVar[Mapping[str, Any]] = NO_META
    envelope: ClassVar[None] = None
    modern: ClassVar[bool] = False  # each member says its own era (a 2026 request is never batched)


Single = Union[RequestFrame, NotificationFrame, ResponseFrame, InvalidFrame]  # one message
Frame = Union[Single, BatchFrame]  # what one body or line holds


def parse(raw: bytes | str) -> Frame:
    """One frame from its bytes; raises :class:`JsonRpcError` when it is not JSON (see :func:`_decode`)."""
    return frame_of(_decode(raw))


def frame_of(message: Any) -> Frame:
    """One frame from a decoded JSON value (a list is a batch)."""
    if isinstance(message, list):
        return BatchFrame(tuple(_single(m) for m in message))
    return _single(message)


def _single(message: Any) -> Single:
    if not isinstance(message, dict):
        return _invalid(message, "Invalid Request: a JSON-RPC message must be an object")
    if message.get("jsonrpc") != "2.0":
        return _invalid(message, 'Invalid Request: "jsonrpc" must be "2.0"')
    if "method" in message:
        return _call(message)
    if not ("id" in message and ("result" in message or "error" in message)):
        return _invalid(message, 'Invalid Request: no "method", and not a response either')
    if not (message["id"] is None or is_valid_id(message["id"])):
        return _invalid(message, 'Invalid Request: a response\'s "id" must be a string or an integer')
    return ResponseFrame(message["id"], message.get("result") if "error" not in message else None)


def _call(message: dict[str, Any]) -> Single:
    """A request or a notification, once its method, id and params hold."""
    method = message["method"]
    if not isinstance(method, str):
        return _invalid(message, 'Invalid Request: "method" must be a string')
    if "id" in message and not is_valid_id(message["id"]):
        return _invalid(message, 'Invalid Request: "id" must be a string or an integer')
    params = message.get("params", {})
    if not isinstance(params, dict):
        return _invalid(message, 'Invalid params: "params" must be an object', INVALID_PARAMS)
    meta, read = _era(method, params)
    if "id" not in message:
        return NotificationFrame(method, params, meta, read)
    name_field = methods.of(method).named
    name = params.get(name_field) if name_field else None
    token = meta.get("progressToken")
    return RequestFrame(message["id"], method, params, meta, read, name if isinstance(name, str) else None,
                        token if is_valid_id(token) else None, message)


def _era(method: Any, params: Any) -> tuple[dict[str, Any], Envelope | None]:
    """A message's ``_meta`` object, and its 2026 envelope, read once, when it names its revision there."""
    meta = params.get("_meta") if isinstance(params, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    return meta, envelope.read(meta) if envelope.names_revision(method, meta) else None


def _invalid(message: Any, text: str, code: int = INVALID_REQUEST) -> InvalidFrame:
    fields = message if isinstance(message, dict) else {}
    method = fields.get("method") if isinstance(fields.get("method"), str) else None
    meta, read = _era(method, fields.get("params"))
    return InvalidFrame(JsonRpcError(code, text), _usable_id(message),
                        answered=not ("method" in fields and "id" not in fields), method=method, meta=meta,
                        envelope=read)


def is_valid_id(value: Any) -> TypeGuard[RequestId]:
    """MCP request ids are strings or integers (never null, bool or float)."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _usable_id(message: Any) -> RequestId | None:
    """The message's id when it is a usable one, else ``None`` (answered as ``"id": null``)."""
    if isinstance(message, dict) and is_valid_id(message.get("id")):
        return message["id"]
    return None


def notification(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": method, **({"params": params} if params is not None else {})}


def result(id_: RequestId, value: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "result": value}


def error(id_: RequestId | None, exc: JsonRpcError) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "error": exc.to_dict()}


def errors_for(frame: Frame, exc: JsonRpcError) -> dict[str, Any] | list[dict[str, Any]] | None:
    """The answer a frame gets when it cannot be served: ``exc`` for each of its messages that awaits an
    answer (a request, an invalid message that is not a notification), under its id; nothing when none
    does."""
    if isinstance(frame, BatchFrame):
        return [error(member.id, exc) for member in frame.frames if awaits_answer(member)] or None
    return error(frame.id, exc) if awaits_answer(frame) else None


def awaits_answer(frame: Single) -> bool:
    return isinstance(frame, RequestFrame) or (isinstance(frame, InvalidFrame) and frame.answered)


def internal_error(frame: Frame) -> dict[str, Any] | list[dict[str, Any]] | None:
    """The answer to a frame whose handling failed unexpectedly: ``-32603`` for each request."""
    return errors_for(frame, JsonRpcError(INTERNAL_ERROR, "Internal error"))


def internal(id_: RequestId | None) -> dict[str, Any]:
    """``-32603`` for the request ``id_``, whose handling failed unexpectedly."""
    return error(id_, JsonRpcError(INTERNAL_ERROR, "Internal error"))


def _short(exc: Exception, limit: int = 200) -> str:
    text = str(exc)
    return text if len(text) <= limit else text[:limit] + "…"


def as_error(exc: ColabHiveError) -> JsonRpcError:
    """The JSON-RPC error any of the house's errors is answered with (the one mapping to the wire)."""
    return exc if isinstance(exc, JsonRpcError) else JsonRpcError(exc.code, exc.client_message, exc.data)
