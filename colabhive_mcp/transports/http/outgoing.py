"""What the HTTP edge writes: statuses, headers, JSON-RPC bodies and SSE events.

Every answer written here is a JSON-RPC body (or SSE events of them), never an HTML page; any of the
house's errors comes to one answer, in one place (:func:`http_answer`). Reading requests is
:mod:`.incoming`'s.
"""

from __future__ import annotations

import math
import secrets
from typing import Any, Union

from werkzeug.datastructures import Headers
from werkzeug.http import HTTP_STATUS_CODES
from werkzeug.wrappers import Response

from ... import metrics
from ...errors import ColabHiveError
from ...logs import log
from ...protocol import jsonrpc
from ...protocol.jsonrpc import Frame, JsonRpcError

JSON = "application/json"
SSE = "text/event-stream"
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
INVALID_TOKEN = {"WWW-Authenticate": 'Bearer error="invalid_token"'}
STATUS_BY_CODE = {jsonrpc.PARSE_ERROR: 400, jsonrpc.INVALID_REQUEST: 400, jsonrpc.KEY_REJECTED: 401,
                  jsonrpc.INSUFFICIENT_SCOPE: 403}
# 2026: 400 only with an error a dual-era client recognises as modern (else it falls back to the
# handshake): a malformed envelope is answered before the core (400 with -32602); a plain -32602 (an
# unknown tool, a stale cursor, an unknown task) is a 200, as in every revision.
MODERN_STATUS_BY_CODE = {**STATUS_BY_CODE, jsonrpc.METHOD_NOT_FOUND: 404, jsonrpc.HEADER_MISMATCH: 400,
                         jsonrpc.MISSING_REQUIRED_CLIENT_CAPABILITY: 400, jsonrpc.UNSUPPORTED_PROTOCOL_VERSION: 400}


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
