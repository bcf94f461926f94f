"""Prometheus metrics, with bounded labels (never a key; tool names capped), correct under
several gunicorn workers: with ``PROMETHEUS_MULTIPROC_DIR`` set (``serve`` sets it), every
worker writes its own files and ``/metrics`` adds them up.

A tenant's tool slugs are its own, and without ``metrics_token`` ``/metrics`` answers anyone who
reaches a loopback bind: every local user. There a tool is labelled by a digest of its slug,
``sha256:`` and the first 12 hex digits of its SHA-256 (``printf %s SLUG | sha256sum`` finds it;
each call's log record has the slug), and only the server's own tools by name. With the token set,
only the operator reads ``/metrics``, and every tool is labelled by its slug.

A process that serves no ``/metrics`` (the stdio server) says so with :func:`unread`: its metrics
then keep nothing, and prometheus_client (13 ms to import) is never loaded.
"""

from __future__ import annotations

import hashlib
import os
import threading
from typing import Any

MAX_TOOL_LABELS = 1000
LATENCY_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900)
# name: (kind, metric, help, options); made on first use, so prometheus_client is not imported at start-up
_SPECS: dict[str, tuple[str, str, str, dict[str, Any]]] = {
    "TOOL_CALLS": ("Counter", "mcp_tool_calls_total", "Tool calls, by tool and outcome",
                   {"labelnames": ["tool", "status"]}),
    "TOOL_LATENCY": ("Histogram", "mcp_tool_latency_seconds", "Time from tools/call to its answer",
                     {"buckets": LATENCY_BUCKETS}),
    "POLLS": ("Histogram", "mcp_polls_per_call", "Upstream polls one tool call needed",
              {"buckets": (0, 1, 2, 3, 5, 8, 13, 21, 34, 55)}),
    "IN_FLIGHT": ("Gauge", "mcp_calls_in_flight", "Tool calls running now", {"multiprocess_mode": "livesum"}),
    "ERRORS": ("Counter", "mcp_errors_total", "Errors, by kind", {"labelnames": ["kind"]}),
    "GUARD_DECISIONS": ("Counter", "mcp_guard_decisions_total", "Calls past a key's budget (refused, declined or "
                        "confirmed by the user) or outside an OAuth grant's scope, by reason", {"labelnames": ["reason"]}),
    "TENANTS": ("Gauge", "mcp_tenants_resident", "Tenants (API keys) held in the pool",
                {"multiprocess_mode": "livesum"}),
    "UPSTREAM": ("Counter", "colabhive_upstream_requests_total", "Requests to the Builder Gateway",
                 {"labelnames": ["route", "status"]}),
    "UPSTREAM_LATENCY": ("Histogram", "colabhive_upstream_latency_seconds", "Builder Gateway response time",
                         {"labelnames": ["route"], "buckets": LATENCY_BUCKETS}),
    "OAUTH": ("Counter", "mcp_oauth_events_total", "OAuth: codes and tokens issued, refusals by the RFC's error",
              {"labelnames": ["event", "reason"]}),
    "MANIFEST": ("Counter", "mcp_manifest_requests_total",
                 "Manifest cache lookups: hit, stale_while_revalidate, fetched, not_modified, stale, error, rejected", {"labelnames": ["result"]}),
}


class _Unread:
    """A metric nobody can read: it takes every update and keeps nothing."""

    def labels(self, *_values: str) -> _Unread:
        return self

    def inc(self, _amount: float = 1) -> None:
        pass

    dec = set = observe = inc


def unread() -> None:
    """This process serves no ``/metrics``: every metric not yet used keeps nothing from now on."""
    with _lock:
        _made.update({name: _made.get(name) or _Unread() for name in _SPECS})


def _ensure() -> None:
    """Make every metric once (the first use of any of them)."""
    with _lock:
        if not _made:
            import prometheus_client

            _made.update({name: getattr(prometheus_client, kind)(metric, doc, **options)
                          for name, (kind, metric, doc, options) in _SPECS.items()})


def __getattr__(name: str) -> Any:
    """``metrics.TOOL_CALLS`` and the others (module attributes made on first use)."""
    if name not in _SPECS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    _ensure()
    globals()[name] = _made[name]  # later lookups skip this function
    return _made[name]


_made: dict[str, Any] = {}
_tools_seen: set[str] = set()
_lock = threading.Lock()


def tool_label(slug: str, named: bool) -> str:
    """A tool's label: its slug when ``named``, else a digest of it; ``other`` once
    ``MAX_TOOL_LABELS`` have been seen."""
    label = slug if named else "sha256:" + hashlib.sha256(slug.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    if label in _tools_seen:
        return label
    with _lock:
        if len(_tools_seen) < MAX_TOOL_LABELS:
            _tools_seen.add(label)
            return label
    return "other"


def upstream_route(method: str, path: str) -> str:
    """The contract route of a gateway request path (a bounded label)."""
    if path.startswith("/mcp/manifest"):
        return "manifest"
    if path.endswith(":invoke"):
        return "invoke"
    if path.endswith(":cancel"):
        return "cancel"
    return "poll" if method == "GET" else "other"


def render() -> tuple[bytes, str]:
    """The exposition text: every worker's numbers added up in multiprocess mode."""
    from prometheus_client import CollectorRegistry, generate_latest, multiprocess
    from prometheus_client.exposition import CONTENT_TYPE_LATEST

    _ensure()  # a worker that served nothing yet still shows every metric
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(), CONTENT_TYPE_LATEST
