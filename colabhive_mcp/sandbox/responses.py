"""JSON responses as the gateway writes them (gzip when the client accepts it)."""

from __future__ import annotations

import gzip
import json
from typing import Any

from werkzeug.wrappers import Request, Response

GZIP_MIN_BYTES = 500


def json_response(request: Request, payload: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """``payload`` as JSON; gzip-encoded when it is large enough and ``Accept-Encoding`` allows."""
    body = json.dumps(payload).encode()
    response = Response(body, status, headers, content_type="application/json")
    response.headers["Vary"] = "Accept-Encoding"
    if len(body) >= GZIP_MIN_BYTES and request.accept_encodings["gzip"]:
        response.set_data(gzip.compress(body))
        response.headers["Content-Encoding"] = "gzip"
    return response


def error_response(request: Request, status: int, detail: Any, headers: dict[str, str] | None = None) -> Response:
    """The gateway's error body: ``{"detail": ...}``."""
    return json_response(request, {"detail": detail}, status, headers)
