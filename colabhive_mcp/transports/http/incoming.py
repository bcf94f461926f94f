"""A request as the HTTP transport reads it: the few facts it needs of the WSGI ``environ``.

Werkzeug's ``Request`` object costs more per request than everything the transport asks of it.
This one reads headers straight from ``environ`` and leaves the host, the body's length and the
body itself to Werkzeug's WSGI functions (``get_host``, ``get_content_length``,
``get_input_stream``), so their checks are Werkzeug's own. Query arguments, rare here, are
Werkzeug's too.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import socket
from dataclasses import dataclass
from functools import cached_property
from urllib.parse import parse_qsl
from typing import Any, Callable, Iterator, Mapping, NamedTuple

from werkzeug.datastructures import MultiDict
from werkzeug.exceptions import RequestEntityTooLarge
from werkzeug.wrappers import Request as WerkzeugRequest
from werkzeug.wsgi import get_content_length, get_host, get_input_stream

from ... import tracing
from ...keys import ApiKey
from ...loopback import is_loopback
from ...protocol import jsonrpc, methods
from ...protocol.jsonrpc import Frame, JsonRpcError, RequestFrame
from ...protocol.request import Narrowing
from .outgoing import JSON, SSE, HttpError

TRUE = ("1", "true", "yes", "on")
_KEYS: dict[str, str] = {}  # header name -> its environ key (the names are the code's own constants)


def environ_key(name: str) -> str:
    """``Mcp-Session-Id`` -> ``HTTP_MCP_SESSION_ID`` (``Content-Type`` and ``Content-Length``: no prefix)."""
    key = _KEYS.get(name)
    if key is None:
        key = name.upper().replace("-", "_")
        key = _KEYS[name] = key if key in ("CONTENT_TYPE", "CONTENT_LENGTH") else "HTTP_" + key
    return key


class Headers(Mapping[str, str]):
    """The request's headers, read from ``environ`` (case-insensitive, as WSGI already made them)."""

    def __init__(self, environ: dict[str, Any]) -> None:
        self.environ = environ

    def __getitem__(self, name: str) -> str:
        return self.environ[environ_key(name)]

    def get(self, name: str, default: Any = None) -> Any:
        return self.environ.get(environ_key(name), default)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and environ_key(name) in self.environ

    def __iter__(self) -> Iterator[str]:
        for key in self.environ:
            if key.startswith("HTTP_") or key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
                yield key.removeprefix("HTTP_").replace("_", "-").title()

    def __len__(self) -> int:
        return sum(1 for _ in self)


class HttpRequest:
    def __init__(self, environ: dict[str, Any], max_content_length: int | None = None) -> None:
        """``max_content_length``: the most :meth:`get_data` reads (past it: 413)."""
        self.environ = environ
        self.max_content_length = max_content_length
        self.headers = Headers(environ)
        self.method = environ.get("REQUEST_METHOD", "GET").upper()
        self.remote_addr: str | None = environ.get("REMOTE_ADDR")
        self._data: bytes | None = None
        self.frame: Any = None  # the body's JSON-RPC frame, or why it is none, once parsed (request_frame)

    @cached_property
    def path(self) -> str:
        """The path, decoded as Werkzeug decodes it (UTF-8 bytes carried in a latin-1 string)."""
        raw = self.environ.get("PATH_INFO") or ""
        return "/" + raw.encode("latin-1", "replace").decode("utf-8", "replace").lstrip("/")

    @cached_property
    def host(self) -> str:
        return get_host(self.environ)

    @cached_property
    def args(self) -> MultiDict[str, str]:
        if not self.environ.get("QUERY_STRING"):
            return MultiDict()
        return WerkzeugRequest(self.environ).args

    @property
    def mimetype(self) -> str:
        return self.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()

    @property
    def content_length(self) -> int | None:
        return get_content_length(self.environ)

    def get_data(self) -> bytes:
        """The whole body, read once and kept (a declared length past ``max_content_length``: 413)."""
        if self._data is None:
            self._data = get_input_stream(self.environ, max_content_length=self.max_content_length).read()
        return self._data


# -- each route's request, read once ---------------------------------------------------------------

class Credential(NamedTuple):
    """Whose a request is: its key, and what an OAuth grant gives of it (``None``: the key itself, all of it)."""

    key: ApiKey
    granted: frozenset[str] | None = None


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


def read_post(request: HttpRequest, credential_of: Callable[[HttpRequest], Credential]) -> Post:
    """Read a POST once, in the order its refusals are due: what it accepts (406), its type (415),
    its key (401, from ``credential_of``), its body (413, or 400 when it cannot be read); a body that
    is not JSON is refused once the key is known to be good."""
    wanted = accepts(request)
    if not wanted:
        raise HttpError(406, jsonrpc.INVALID_REQUEST, f"Accept must allow {JSON} or {SSE}")
    if request.mimetype != JSON:
        raise HttpError(415, jsonrpc.INVALID_REQUEST, f"Content-Type must be {JSON}")
    key, granted = credential_of(request)
    narrow = narrowing(request, granted)
    frame: Frame | HttpError
    try:
        frame = request_frame(request)  # a body too large: 413 now
    except JsonRpcError as exc:  # not JSON, or not readable
        frame = HttpError(400, exc.code, exc.message)
    return Post(wanted, key, narrow, request.headers.get("Mcp-Session-Id"), request.headers.get("MCP-Protocol-Version"),
                request.headers, socket_of(request.environ), client_address(request), frame)


@dataclass(frozen=True, slots=True)
class SessionRequest:
    """A request about a session rather than a message (``GET``/``DELETE /mcp``, ``GET /sse``) as the
    edge reads it, once: whose it is, from where, and the session and event it names."""

    key: ApiKey
    address: str  # the client, as budgets count clients
    session_token: str | None  # Mcp-Session-Id
    last_event_id: str | None  # Last-Event-ID: where a resumed stream starts again


def read_session_request(request: HttpRequest, key_of: Callable[[HttpRequest], ApiKey], *,
                         stream: bool = False) -> SessionRequest:
    """Read it in the order its refusals are due: for a ``stream``, what it accepts (406); its key (401)."""
    if stream and SSE not in accepts(request):
        raise HttpError(406, jsonrpc.INVALID_REQUEST, f"Accept must allow {SSE}")
    return SessionRequest(key_of(request), client_address(request), request.headers.get("Mcp-Session-Id"),
                          request.headers.get("Last-Event-ID"))


@dataclass(frozen=True, slots=True)
class SessionMessage:
    """A message POSTed to the 2024 transport's ``/messages`` as the edge reads it, once."""

    key: ApiKey
    address: str
    session_id: str
    frame: Frame | JsonRpcError  # the body's frame, or why it is none (answered 400, on this response)
    trace: dict[str, str]  # the W3C trace context its headers carry (its work runs after this request ends)
    narrow: Narrowing | None  # what its OAuth grant leaves of the tool set


def read_session_message(request: HttpRequest, credential_of: Callable[[HttpRequest], Credential]) -> SessionMessage:
    """Read it in the order its refusals are due: its key (401), its session's id (400), its body."""
    (key, granted), address = credential_of(request), client_address(request)
    session_id = request.args.get("session_id", "")
    if not session_id:
        raise HttpError(400, jsonrpc.INVALID_REQUEST, "Missing session_id")
    frame: Frame | JsonRpcError
    try:
        frame = request_frame(request)
    except JsonRpcError as exc:
        frame = exc
    return SessionMessage(key, address, session_id, frame, tracing.carried(request.headers),
                          Narrowing(granted=granted) if granted is not None else None)


@dataclass(frozen=True, slots=True)
class OAuthRequest:
    """A request to an OAuth route as the edge reads it, once."""

    method: str
    query: Mapping[str, str]  # the URL's parameters (the first of each name)
    origin: str | None  # the Origin header (browsers send one with every POST)
    content_type: str
    address: str
    body: bytes  # b"" but for a POST
    form: dict[str, str]  # the body read as a form (the first field of each name): the consent and token forms


def read_oauth_request(request: HttpRequest) -> OAuthRequest:
    data = body(request) if request.method == "POST" else b""
    form: dict[str, str] = {}
    if data:
        for name, value in parse_qsl(data.decode("utf-8", "replace"), keep_blank_values=True):
            form.setdefault(name, value)
    return OAuthRequest(request.method, request.args.to_dict(), request.headers.get("Origin"), request.mimetype,
                        client_address(request), data, form)


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
            data = body(request)
            request.frame = jsonrpc.parse(data)
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


def narrowing(request: HttpRequest, granted: frozenset[str] | None = None) -> Narrowing | None:
    """A per-request narrowing of the tool set (``X-ColabHive-Tools: glob,glob``,
    ``X-ColabHive-Read-Only: true``, or the ``tools``/``read_only`` query parameters), and the scopes
    of the OAuth grant the request was made with, if any."""
    tools = request.headers.get("X-ColabHive-Tools") or request.args.get("tools") or ""
    read_only = (request.headers.get("X-ColabHive-Read-Only") or request.args.get("read_only") or "").lower() in TRUE
    globs = tuple(p.strip() for p in tools.split(",") if p.strip())
    return Narrowing(globs, read_only, granted) if globs or read_only or granted is not None else None


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
