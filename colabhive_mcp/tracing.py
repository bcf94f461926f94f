"""W3C trace context: carried from a client's request to the gateway, and spans when enabled.

A client inside a trace sends ``traceparent`` (and ``tracestate``) in a request's ``_meta``
(SEP-414), or as HTTP headers. Without OpenTelemetry the context is forwarded unchanged to the
gateway on invoke, poll and cancel, and its trace id is logged. With the optional ``otel`` extra
installed and ``OTEL_EXPORTER_OTLP_ENDPOINT`` set, each request becomes a SERVER span, child of
the carried context, each gateway request a CLIENT span, and the gateway gets the spans' context.

What a client sends goes into the gateway's request headers, so only the exact W3C shapes are
carried: a ``traceparent`` of version 00's 55 characters (a later version's extra fields are
not carried: nothing of any size or alphabet rides along), and a ``tracestate`` of at most 32
``key=value`` members in at most 512 printable ASCII characters, or none.
"""

from __future__ import annotations

import os
import re
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Iterator, Mapping

from .logs import log

KEYS = ("traceparent", "tracestate")
# version-traceid-parentid-flags, lower-case hex; version ff and all-zero ids are invalid
_TRACEPARENT = re.compile(r"(?!ff)[0-9a-f]{2}-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")
# a tracestate list member: a simple or multi-tenant key, "=", a value of printable ASCII but "," and "="
_MEMBER = re.compile(r"(?:[a-z][a-z0-9_\-*/]{0,255}|[a-z0-9][a-z0-9_\-*/]{0,240}@[a-z][a-z0-9_\-*/]{0,13})"
                     r"=[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]")
MAX_TRACESTATE_CHARS = 512
MAX_TRACESTATE_MEMBERS = 32

_headers: ContextVar[dict[str, str]] = ContextVar("colabhive_mcp_trace", default={})
_tracer: Any = None  # an OpenTelemetry tracer, once enabled


def carried(source: Mapping[str, Any]) -> dict[str, str]:
    """The valid trace context in ``source`` (a ``_meta`` object or HTTP headers); a malformed
    ``traceparent`` is ignored, and ``tracestate`` means nothing without it."""
    parent = source.get("traceparent")
    if not isinstance(parent, str) or not _TRACEPARENT.fullmatch(parent):
        return {}
    found = {"traceparent": parent}
    state = source.get("tracestate")
    if isinstance(state, str) and _valid_state(state):
        found["tracestate"] = state
    return found


def _valid_state(state: Any) -> bool:
    """Whether ``state`` is a ``tracestate`` to carry: 1 to 32 list members (empty ones aside), bounded."""
    if not isinstance(state, str) or len(state) > MAX_TRACESTATE_CHARS:
        return False
    members = [m for m in (m.strip(" ") for m in state.split(",")) if m]
    return 0 < len(members) <= MAX_TRACESTATE_MEMBERS and all(_MEMBER.fullmatch(m) for m in members)


def headers() -> dict[str, str]:
    """The trace context to send upstream from here (empty outside a traced request)."""
    return _headers.get()


def trace_id(context: Mapping[str, str]) -> str | None:
    parent = context.get("traceparent")
    return parent.split("-")[1] if parent else None


class Span:
    """What a request may say about itself: only recorded when spans are enabled."""

    def __init__(self, otel_span: Any = None) -> None:
        self._span = otel_span

    def set(self, name: str, value: Any) -> None:
        if self._span is not None and value is not None:
            self._span.set_attribute(name, value)

    def fail(self, error_type: str) -> None:
        if self._span is not None:
            from opentelemetry.trace import Status, StatusCode
            self._span.set_attribute("error.type", error_type)
            self._span.set_status(Status(StatusCode.ERROR))


@contextmanager
def span(name: str, attributes: dict[str, Any], context: Mapping[str, str] | None = None, *,
         client: bool = False) -> Iterator[Span]:
    """Run a block as a request served in ``context`` (the carried trace context), or, with
    ``client``, as a request sent from here. Without spans, :func:`headers` is ``context``
    within a served request's block; with them, it is the innermost span's context."""
    if _tracer is None:
        if client:
            yield Span()
            return
        token = _headers.set(dict(context or {}))
        try:
            yield Span()
        finally:
            _headers.reset(token)
        return
    from opentelemetry import propagate, trace
    kind = trace.SpanKind.CLIENT if client else trace.SpanKind.SERVER
    parent = None if client else propagate.extract(context or {})  # a client span: the current one's child
    with _tracer.start_as_current_span(name, context=parent, kind=kind,
                                       attributes={k: v for k, v in attributes.items() if v is not None}) as current:
        inner: dict[str, str] = {}
        propagate.inject(inner)
        token = _headers.set(carried(inner))
        try:
            yield Span(current)
        finally:
            _headers.reset(token)


def enable(provider: Any) -> None:
    """Record spans with an OpenTelemetry ``TracerProvider`` (``None``: stop recording)."""
    global _tracer
    _tracer = provider.get_tracer("colabhive_mcp") if provider is not None else None


def configure(environ: Mapping[str, str] = os.environ) -> bool:
    """Enable spans exported over OTLP/HTTP when an OTLP endpoint is configured and the ``otel``
    extra is installed; the exporter reads the standard ``OTEL_*`` variables. True when enabled."""
    if not (environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")):
        return False
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.bind(hint="install the otel extra to export spans: 'colabhive-mcp[otel]==1.0.0', or "
                      "pip install -e '.[otel]' in a checkout").warning("tracing.unavailable")
        return False
    provider = TracerProvider(resource=Resource.create({"service.name": environ.get("OTEL_SERVICE_NAME", "colabhive-mcp")}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    enable(provider)
    log.info("tracing.enabled")
    return True
