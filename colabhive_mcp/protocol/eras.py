"""The two eras of MCP: which revisions exist, and how a message says which one it speaks.

Legacy (2024-11-05 … 2025-11-25) opens with the ``initialize`` handshake, scoped to a session;
modern (2026-07-28) is stateless: every request carries its revision and the client's
capabilities in ``params._meta`` (whether a frame names one is read once, by :mod:`.jsonrpc`);
what each revision can carry is in :mod:`colabhive_mcp.revisions`.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..revisions import LEGACY_VERSIONS, MODERN_VERSIONS, SUPPORTED_VERSIONS
from .jsonrpc import INVALID_PARAMS, META_VERSION, UNSUPPORTED_PROTOCOL_VERSION, JsonRpcError

META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
META_LOG_LEVEL = "io.modelcontextprotocol/logLevel"
META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"
META_SUBSCRIPTION = "io.modelcontextprotocol/subscriptionId"
LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


def envelope_error(meta: Mapping[str, Any]) -> JsonRpcError | None:
    """What is wrong with a 2026 request's ``params._meta`` (a malformed request: over HTTP, a 400),
    or ``None``.

    An unknown version is ``-32022`` listing every version served (a dual-era client may fall back to
    a legacy one, with ``initialize``); a legacy version named per request is ``-32022`` too, listing
    only the versions a request may name (never the one it was refused)."""
    version = meta.get(META_VERSION)
    if not isinstance(version, str):
        return JsonRpcError(INVALID_PARAMS, f"params._meta[{META_VERSION!r}] must be a string")
    if version in LEGACY_VERSIONS:
        return JsonRpcError(UNSUPPORTED_PROTOCOL_VERSION, f"Unsupported protocol version: {version} is served "
                            "after an initialize handshake, not per request",
                            {"supported": list(MODERN_VERSIONS), "requested": version})
    if version not in MODERN_VERSIONS:
        return JsonRpcError(UNSUPPORTED_PROTOCOL_VERSION, f"Unsupported protocol version: {version}",
                            {"supported": list(SUPPORTED_VERSIONS), "requested": version})
    if META_CAPABILITIES not in meta:
        return JsonRpcError(INVALID_PARAMS, f"params._meta is missing the required key {META_CAPABILITIES!r}")
    if not isinstance(meta[META_CAPABILITIES], dict):
        return JsonRpcError(INVALID_PARAMS, f"params._meta[{META_CAPABILITIES!r}] must be an object")
    level = meta.get(META_LOG_LEVEL)
    if level is not None and level not in LOG_LEVELS:
        return JsonRpcError(INVALID_PARAMS, f"Invalid log level: {level!r}")
    return None
