"""The two eras of MCP: which revisions exist, and how a message says which one it speaks.

Legacy (2024-11-05 … 2025-11-25) opens with the ``initialize`` handshake, scoped to a session;
modern (2026-07-28) is stateless: every request carries its revision and the client's
capabilities in ``params._meta``. Transports and the core read both facts from here.
"""

from __future__ import annotations

from typing import Any

from .jsonrpc import meta_of, method_of

LEGACY_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
MODERN_VERSIONS = ("2026-07-28",)
SUPPORTED_VERSIONS = MODERN_VERSIONS + LEGACY_VERSIONS
BATCH_VERSION = "2025-03-26"  # the one revision with JSON-RPC batches
TASKS_VERSION = "2025-11-25"  # the one legacy revision with (experimental) core tasks

META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
META_LOG_LEVEL = "io.modelcontextprotocol/logLevel"
META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"
META_SUBSCRIPTION = "io.modelcontextprotocol/subscriptionId"
LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


def is_modern(message: Any) -> bool:
    """Whether the message is a 2026-07-28 request (``initialize`` never is); safe on any JSON value."""
    return method_of(message) != "initialize" and META_VERSION in meta_of(message)


def wants_notifications(message: Any, session_log_level: str | None = None) -> bool:
    """Whether serving this request may send notifications before its answer: a tool call with a
    progress token, or one whose client asked for log messages."""
    meta = meta_of(message)
    return method_of(message) == "tools/call" and (
        "progressToken" in meta or META_LOG_LEVEL in meta or session_log_level is not None)
