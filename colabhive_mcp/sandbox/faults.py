"""Fault injection: rules that make the next matching gateway requests fail in a chosen way."""

from __future__ import annotations

import json
import socket
import threading
from dataclasses import dataclass, field
from typing import Any, NoReturn

from werkzeug.wrappers import Response

ROUTES = frozenset({"manifest", "manifest_entry", "invoke", "poll", "cancel", "any"})
_DEFAULTS: dict[str, dict[str, Any]] = {  # each kind's parameters (besides ``after``) and their defaults
    "status": {"status": 503, "body": {"detail": "injected failure"}, "retry_after": None},
    "rate_limit": {"retry_after": 1, "body": {"detail": "rate limit exceeded"}},
    "latency": {"seconds": 1.0},
    "hang": {"seconds": 30.0},
    "reset": {},
    "truncate": {},
    "garbage": {"body": "<html><body>502 Bad Gateway</body></html>"},
    "bad_gzip": {},
}
KINDS = frozenset(_DEFAULTS)


class DropConnection(Exception):
    """Raised by a fault: the request must end without any HTTP answer (see ``drop_connection``)."""


def drop_connection(environ: dict[str, Any]) -> NoReturn:
    """Close the request's connection without answering (needs werkzeug's server, which then
    treats the raised ConnectionAbortedError as a dropped client)."""
    environ["werkzeug.socket"].shutdown(socket.SHUT_RDWR)
    raise ConnectionAbortedError("connection dropped by a sandbox fault")


def _answer(status: int, body: Any, retry_after: Any = None) -> Response:
    """A response with ``body`` as JSON, or as raw text when it is a string."""
    raw = isinstance(body, str)
    response = Response(
        body if raw else json.dumps(body), status, content_type="text/plain" if raw else "application/json"
    )
    if retry_after is not None:
        response.headers["Retry-After"] = str(retry_after)
    return response


def _truncated() -> Response:
    body = b'{"detail": "this answer is cut short by the sandbox", "padding": "' + b"x" * 200 + b'"}'
    response = Response(body[: len(body) // 2], 200, content_type="application/json")
    response.headers["Content-Length"] = str(len(body))
    return response


@dataclass
class Fault:
    """A rule: the next ``count`` requests to ``route`` (and ``slug``) fail as ``kind`` says.

    ``after=True`` serves the request first (an invoke creates its invocation) and then fails
    the answer; otherwise the request never reaches the gateway. ``latency`` delays, then serves.
    """

    route: str
    kind: str
    count: int | None
    slug: str | None = None
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def after(self) -> bool:
        return bool(self.params.get("after"))

    def matches(self, route: str, slug: str | None) -> bool:
        return self.route in ("any", route) and self.slug in (None, slug)

    def strike(self, stop: threading.Event) -> Response | None:
        """The faulty answer (None: serve normally); raises DropConnection for no answer at all.
        Waits end early when ``stop`` is set."""
        p = self.params
        if self.kind in ("latency", "hang"):
            stop.wait(p["seconds"])
        if self.kind in ("hang", "reset"):
            raise DropConnection(self.kind)
        if self.kind == "status":
            return _answer(p["status"], p["body"], p["retry_after"])
        if self.kind == "rate_limit":
            return _answer(429, p["body"], p["retry_after"])
        if self.kind == "truncate":
            return _truncated()
        if self.kind == "garbage":
            return Response(p["body"], 200, content_type="application/json")
        if self.kind == "bad_gzip":
            body = b"\x1f\x8b\x08\x00this is not gzip data"
            return Response(body, 200, headers={"Content-Encoding": "gzip"}, content_type="application/json")
        return None

    def as_dict(self) -> dict[str, Any]:
        return {"route": self.route, "kind": self.kind, "count": self.count, "slug": self.slug, **self.params}


class Faults:
    """The pending fault rules, consumed in the order they were added (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[Fault] = []

    def add(
        self, route: str = "any", kind: str = "status", count: int | None = 1, slug: str | None = None, **params: Any
    ) -> Fault:
        """Add a rule; ``count=None`` keeps it until cleared. Raises ValueError for unknown names."""
        if route not in ROUTES:
            raise ValueError(f"unknown route {route!r}; expected one of {sorted(ROUTES)}")
        if kind not in KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; expected one of {sorted(KINDS)}")
        unknown = set(params) - set(_DEFAULTS[kind]) - {"after"}
        if unknown:
            raise ValueError(f"fault kind {kind!r} takes no parameter {sorted(unknown)}")
        if count is not None and (not isinstance(count, int) or count < 1):
            raise ValueError("count must be a positive integer or None")
        fault = Fault(route, kind, count, slug, {**_DEFAULTS[kind], **params})
        with self._lock:
            self._rules.append(fault)
        return fault

    def take(self, route: str, slug: str | None) -> Fault | None:
        """Consume one use of the first rule matching this request."""
        with self._lock:
            for fault in self._rules:
                if fault.matches(route, slug):
                    if fault.count is not None:
                        fault.count -= 1
                        if fault.count == 0:
                            self._rules.remove(fault)
                    return fault
        return None

    def pending(self) -> list[dict[str, Any]]:
        with self._lock:
            return [fault.as_dict() for fault in self._rules]

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()
