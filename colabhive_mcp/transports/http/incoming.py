"""A request as the HTTP transport reads it: the few facts it needs of the WSGI ``environ``.

Werkzeug's ``Request`` object costs more per request than everything the transport asks of it.
This one reads headers straight from ``environ`` and leaves the host, the body's length and the
body itself to Werkzeug's WSGI functions (``get_host``, ``get_content_length``,
``get_input_stream``), so their checks are Werkzeug's own. Query arguments, rare here, are
Werkzeug's too.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any, Iterator, Mapping

from werkzeug.datastructures import MultiDict
from werkzeug.wrappers import Request as WerkzeugRequest
from werkzeug.wsgi import get_content_length, get_host, get_input_stream

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
        self.frame: Any = None  # the body's JSON-RPC frame, or why it is none, once parsed (wire.request_frame)

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
