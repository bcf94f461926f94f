"""What the HTTP edge reads and writes around JSON-RPC: statuses, headers, bodies and SSE events.

Everything here reads a request as it arrived (any header, any body) without trusting it, and
writes answers that are always JSON-RPC bodies (or SSE events of them), never an HTML page.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import math
import secrets
import socket
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Union

from werkzeug.datastructures import Headers
from werkzeug.exceptions import RequestEntityTooLarge
from werkzeug.http import HTTP_STATUS_CODES
from werkzeug.wrappers import Response

from ... import metrics
from ...errors import ColabHiveError
from ...keys import ApiKey
from ...logs import log
from ...loopback import is_loopback
from ...protocol import jsonrpc, methods
from ...protocol.jsonrpc import Frame, JsonRpcError, RequestFrame
from ...protocol.request import Narrowing
from .incoming import HttpRequest

JSON = "application/json"
SSE = "text/event-stream"
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
INVALID_TOKEN = {"WWW-Authenticate": 'Bearer error="invalid_token"'}
STATUS_BY_CODE = {jsonrpc.PARSE_ERROR: 400, jsonrpc.INVALID_REQUEST: 400, jsonrpc.KEY_REJECTED: 401}
# 2026: 400 only with an error a dual-era client recognises as modern (else it falls back to the
# handshake): a malformed envelope is answered before the core (400 with -32602); a plain -32602 (an
# unknown tool, a stale cursor, an unknown task) is a 200, as in every revision.
MODERN_STATUS_BY_CODE = {**STATUS_BY_CODE, jsonrpc.METHOD_NOT_FOUND: 404, jsonrpc.HEADER_MISMATCH: 400,
                         jsonrpc.MISSING_REQUIRED_CLIENT_CAPABILITY: 400, jsonrpc.UNSUPPORTED_PROTOCOL_VERSION: 400}
TRUE = ("1", "true", "yes", "on")


class HttpError(JsonRpcError):
    """An answer decided before the protocol core: an HTTP status with a JSON-RPC error body."""

    def __init__(self, status: int, code: int, message: str, headers: dict[str, str] | None = None,
                 data: Any = None) -> None:
        super().__init__(code, message, data)
        self.http_status, self.headers = status, headers or {}


def http_answer(exc: ColabHiveError, request_id: Any = None) -> JsonAnswer:
    """The HTTP answer any of the house's errors comes to (the one mapping to statuses and headers):
    its status, a JSON-RPC error body, ``Retry-After`` when it knows when to come back, and the
    bearer challenge with a 401."""
    answer = json_response(jsonrpc.error(request_id, jsonrpc.as_error(exc)), exc.http_status)
    if isinstance(exc, HttpError):
        answer.headers.update(exc.headers)  # its own challenge, or Retry-After, come first
    if exc.retry_after is not None and exc.http_status in (429, 503) and "Retry-After" not in answer.headers:
        answer.headers["Retry-After"] = str(math.ceil(exc.retry_after))
    return answer


# -- reading a request ---------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Post:
    """A POST to ``/mcp`` as the edge reads it, once: what it accepts, whose it is, its headers and
    its frame."""

    wanted: set[str]  # which of JSON and SSE the client takes
    key: ApiKey
    narrow: Narrowing | None
    session_token: str | None  # Mcp-Session-Id
    version: str | None  # MCP-Protocol-Version
    headers: Mapping[str, str]  # the rest (the 2026 routing headers, the W3C trace context)
    sock: socket.socket | None  # the client's connection (a hang-up is watched for during a call)
    address: str  # the client, as budgets count clients
    frame: Frame | HttpError  # the body's frame, or the 400 a body that is not JSON gets


def read_post(request: HttpRequest, key_of: Callable[[HttpRequest], ApiKey]) -> Post:
    """Read a POST once, in the order its refusals are due: what it accepts (406), its type (415),
    its key (401, from ``key_of``), its body (413, or 400 when it cannot be read); a body that is not
    JSON is refused once the key is known to be good."""
    wanted = accepts(request)
    if not wanted:
        raise HttpError(406, jsonrpc.INVALID_REQUEST, f"Accept must allow {JSON} or {SSE}")
    if request.mimetype != JSON:
        raise HttpError(415, jsonrpc.INVALID_REQUEST, f"Content-Type must be {JSON}")
    key = key_of(request)
    narrow, address = narrowing(request), client_address(request)
    frame: Frame | HttpError
    try:
        frame = request_frame(request)  # a body that cannot be read: 400 (or 413) now
    except JsonRpcError as exc:  # not JSON
        frame = HttpError(400, exc.code, exc.message)
    return Post(wanted, key, narrow, request.headers.get("Mcp-Session-Id"), request.headers.get("MCP-Protocol-Version"),
                request.headers, socket_of(request.environ), address, frame)


def accepts(request: HttpRequest) -> set[str]:
    """Which of JSON and SSE the client takes (a missing Accept, or */*, takes both)."""
    header = request.headers.get("Accept", "")
    if not header.strip():
        return {JSON, SSE}
    offered = {part.split(";")[0].strip().lower() for part in header.split(",")}
    if offered & {"*/*", "application/*"}:
        return {JSON, SSE} if "*/*" in offered else {JSON} | (offered & {SSE})
    return offered & {JSON, SSE} | ({SSE} if "text/*" in offered else set())


def body(request: HttpRequest) -> bytes:
    """The whole body, or 413: for a body of unknown length (chunked), Werkzeug's ``get_data()``
    silently stops at ``max_content_length`` and returns what it read so far. A body that cannot
    be read (a malformed chunked encoding, a client gone mid-body) is a 400."""
    try:
        data = request.get_data()
    except RequestEntityTooLarge:
        raise
    except Exception as exc:  # the WSGI server's own error (gunicorn's ParseException, an OSError): the client's
        raise HttpError(400, jsonrpc.PARSE_ERROR, f"Parse error: the request body could not be read "
                        f"({type(exc).__name__})") from None
    limit = request.max_content_length
    if request.content_length is None and limit is not None and len(data) >= limit:
        raise RequestEntityTooLarge()
    return data


def request_frame(request: HttpRequest) -> Frame:
    """The body's JSON-RPC frame, parsed once whoever asks (the edge, a transport, an error's answer);
    raises :class:`JsonRpcError` for a body that is not JSON, every time it is asked, and what
    :func:`body` raises for one that cannot be read."""
    if request.frame is None:
        try:
            request.frame = jsonrpc.parse(body(request))
        except JsonRpcError as exc:
            request.frame = exc
    if isinstance(request.frame, JsonRpcError):
        raise request.frame
    return request.frame


def request_id_of(request: HttpRequest) -> Any:
    """The JSON-RPC id of the request's body, when it can be read (an answer decided at the edge
    carries it); ``None`` for a body that is absent, too large, unreadable or not one request."""
    if request.method != "POST":
        return None
    try:
        return request_frame(request).id
    except Exception:  # whatever kept the body from being a request is already being answered
        return None


def narrowing(request: HttpRequest) -> Narrowing | None:
    """A per-request narrowing of the tool set (``X-ColabHive-Tools: glob,glob``,
    ``X-ColabHive-Read-Only: true``, or the ``tools``/``read_only`` query parameters)."""
    tools = request.headers.get("X-ColabHive-Tools") or request.args.get("tools") or ""
    read_only = (request.headers.get("X-ColabHive-Read-Only") or request.args.get("read_only") or "").lower() in TRUE
    globs = tuple(p.strip() for p in tools.split(",") if p.strip())
    return Narrowing(globs, read_only) if globs or read_only else None


def header_mismatch(headers: Mapping[str, str], frame: Frame) -> str | None:
    """Why a 2026 request's routing headers disagree with its body, or ``None``. A notification has no
    name to check, and needs no ``Mcp-Method`` (the revision asks it of requests): one it sends must match."""
    if frame.envelope is None or headers.get("MCP-Protocol-Version") != frame.envelope.version:
        return "MCP-Protocol-Version header does not match params._meta protocolVersion"
    method = headers.get("Mcp-Method")
    if (method is not None or isinstance(frame, RequestFrame)) and (frame.method is None or method != frame.method):
        return "Mcp-Method header does not match the request's method"
    if isinstance(frame, RequestFrame) and frame.name is not None:  # the method has a name, and the body gave it
        if _decode_header(headers.get("Mcp-Name")) != frame.name:
            return f"Mcp-Name header does not match params.{methods.of(frame.method).named}"
    return None


def _decode_header(value: str | None) -> str | None:
    """Undo the ``=?base64?…?=`` wrapping clients use for values unsafe in a header."""
    if value and value.startswith("=?base64?") and value.endswith("?="):
        try:
            return base64.b64decode(value[9:-2], validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
    return value


def hostname(netloc: str) -> str:
    host = netloc.lower()
    if host.startswith("["):
        return host[: host.find("]") + 1]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def bind_host(bind: str) -> str:
    return bind.rpartition(":")[0].lower()


def local_and_direct(request: HttpRequest) -> bool:
    """Whether the request came from this machine, to a socket of this machine, not through a proxy."""
    sock = socket_of(request.environ)
    local = sock.getsockname()[0] if sock is not None else None
    proxied = any(h in request.headers for h in ("Forwarded", "X-Forwarded-For", "X-Real-IP"))
    return not proxied and is_loopback(request.remote_addr) and (local is None or is_loopback(local))


def client_address(request: HttpRequest) -> str:
    """Who sent the request, as budgets count clients: the peer, or the client a proxy on this machine
    names (the last ``X-Forwarded-For`` entry, which the proxy itself appended, else ``X-Real-IP``).
    An IPv6 client is its /64 (one host's share of addresses), an IPv4-mapped one its IPv4 address."""
    peer = request.remote_addr or ""
    if is_loopback(peer):
        forwarded = request.headers.get("X-Forwarded-For", "").rpartition(",")[2].strip()
        peer = forwarded or request.headers.get("X-Real-IP", "").strip() or peer
    try:
        ip = ipaddress.ip_address(peer.strip("[]").partition("%")[0])  # a zone names a link, not a host
    except ValueError:
        return peer[:64]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


def socket_of(environ: dict[str, Any]) -> socket.socket | None:
    """The client's socket, where the WSGI server exposes it (gunicorn, Werkzeug)."""
    return environ.get("gunicorn.socket") or environ.get("werkzeug.socket")


# -- writing an answer ---------------------------------------------------------------------------

class JsonAnswer:
    """A JSON body sent at once: the status line and headers Werkzeug's ``Response`` would send for
    it, without building one (``headers`` can still be added to before it is sent)."""

    def __init__(self, body: bytes, status: int, headers: dict[str, str] | None = None) -> None:
        self.body, self.status = body, status
        self.headers = Headers(headers)
        self.headers["Content-Type"] = JSON
        self.headers["Content-Length"] = str(len(body))

    def __call__(self, environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response(f"{self.status} {HTTP_STATUS_CODES.get(self.status, 'UNKNOWN')}", self.headers.to_wsgi_list())
        return [] if environ.get("REQUEST_METHOD") == "HEAD" else [self.body]


Answer = Union[Response, JsonAnswer]  # what a handler answers with


def json_response(answer: Any, status: int) -> JsonAnswer:
    return JsonAnswer(jsonrpc.encode(answer), status, INVALID_TOKEN if status == 401 else None)


def status_of(answer: Any, statuses: dict[int, int]) -> int:
    if isinstance(answer, dict) and "error" in answer:
        return statuses.get(answer["error"]["code"], 200)
    return 200


def sse_event(message: Any, event_id: str | None = None) -> bytes:
    head = f"id: {event_id}\n".encode() if event_id else b""
    return head + b"event: message\ndata: " + jsonrpc.encode(message) + b"\n\n"


def not_allowed(allow: str) -> Response:
    return Response(b"", 405, headers={"Allow": allow})


def failed(frame: Frame | None, **fields: Any) -> dict[str, Any] | list[dict[str, Any]] | None:
    """Log an unexpected exception once (scrubbed, with a request id) and give the JSON-RPC answer
    the frame gets instead: ``-32603`` for a request (or no frame at all), nothing for a notification."""
    metrics.ERRORS.labels("internal").inc()
    log.bind(request_id=secrets.token_hex(6), rpc_method=frame and frame.method, **fields
             ).exception("http.internal_error")
    return jsonrpc.internal(None) if frame is None else jsonrpc.internal_error(frame)
