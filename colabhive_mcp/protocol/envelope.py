"""The two eras of MCP, and a 2026 message's envelope read once.

Legacy (2024-11-05 … 2025-11-25) opens with the ``initialize`` handshake, scoped to a session;
modern (2026-07-28) is stateless: every request carries its revision and the client's capabilities
in ``params._meta``. :mod:`.jsonrpc` reads that envelope once, as it parses the frame, into an
:class:`Envelope` (what is wrong with it included); nothing downstream reads those ``_meta`` keys
again. What each revision can carry is in :mod:`colabhive_mcp.revisions`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..errors import INVALID_PARAMS, JsonRpcError
from ..revisions import LEGACY_VERSIONS, MODERN_VERSIONS, SUPPORTED_VERSIONS
from .methods import INITIALIZE

HEADER_MISMATCH = -32020  # a 2026 request's routing headers disagree with its body
UNSUPPORTED_PROTOCOL_VERSION = -32022
META_VERSION = "io.modelcontextprotocol/protocolVersion"  # a 2026-07-28 request names its revision here
META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
META_LOG_LEVEL = "io.modelcontextprotocol/logLevel"
META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"
META_SUBSCRIPTION = "io.modelcontextprotocol/subscriptionId"
LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


@dataclass(frozen=True, slots=True)
class Envelope:
    """A 2026 message's ``params._meta``, read once: the revision as it names it (its routing header
    must repeat it, served or not), the client's capabilities, info and log level, and what is wrong
    with it (``refusal``: a malformed request, over HTTP a 400, answered before anything else)."""

    version: Any
    capabilities: dict[str, Any]
    client_info: dict[str, Any] | None
    log_level: str | None
    refusal: JsonRpcError | None


def names_revision(method: Any, meta: Mapping[str, Any]) -> bool:
    """Whether a message is a 2026 one: its ``_meta`` names a revision (``initialize`` never is)."""
    return method != INITIALIZE and META_VERSION in meta


def read(meta: Mapping[str, Any]) -> Envelope:
    """The envelope of a 2026 message's ``_meta``."""
    capabilities, info = meta.get(META_CAPABILITIES), meta.get(META_CLIENT_INFO)
    return Envelope(meta.get(META_VERSION), capabilities if isinstance(capabilities, dict) else {},
                    info if isinstance(info, dict) else None, meta.get(META_LOG_LEVEL), _refusal(meta))


def unsupported(requested: str, supported: tuple[str, ...], why: str = "") -> JsonRpcError:
    """``-32022`` for a revision not served (as asked), listing those that are."""
    return JsonRpcError(UNSUPPORTED_PROTOCOL_VERSION, f"Unsupported protocol version: {requested}{why}",
                        {"supported": list(supported), "requested": requested})


def legacy_header_refusal(version: str | None) -> JsonRpcError | None:
    """Why a request without a 2026 envelope cannot carry this ``MCP-Protocol-Version`` header: a 2026
    revision (``-32020``: its body lacks its ``_meta``, so a dual-era client does not take this server
    for a legacy one), or one not served at all (``-32022``); ``None`` for a handshake revision or none."""
    if version is None or version in LEGACY_VERSIONS:
        return None
    if version in MODERN_VERSIONS:
        return JsonRpcError(HEADER_MISMATCH, f"MCP-Protocol-Version is {version} but params._meta has no "
                            f"{META_VERSION!r}: a {version} request carries its version and the client's "
                            "capabilities in params._meta")
    return unsupported(version, SUPPORTED_VERSIONS)


def _refusal(meta: Mapping[str, Any]) -> JsonRpcError | None:
    """What is wrong with a 2026 envelope, or ``None``. An unknown version is ``-32022`` listing every
    version served (a dual-era client may fall back to a legacy one, with ``initialize``); a legacy
    version named per request is ``-32022`` too, listing only the versions a request may name."""
    version = meta.get(META_VERSION)
    if not isinstance(version, str):
        return JsonRpcError(INVALID_PARAMS, f"params._meta[{META_VERSION!r}] must be a string")
    if version in LEGACY_VERSIONS:
        return unsupported(version, MODERN_VERSIONS, " is served after an initialize handshake, not per request")
    if version not in MODERN_VERSIONS:
        return unsupported(version, SUPPORTED_VERSIONS)
    if META_CAPABILITIES not in meta:
        return JsonRpcError(INVALID_PARAMS, f"params._meta is missing the required key {META_CAPABILITIES!r}")
    if not isinstance(meta[META_CAPABILITIES], dict):
        return JsonRpcError(INVALID_PARAMS, f"params._meta[{META_CAPABILITIES!r}] must be an object")
    level = meta.get(META_LOG_LEVEL)
    if level is not None and level not in LOG_LEVELS:
        return JsonRpcError(INVALID_PARAMS, f"Invalid log level: {level!r}")
    return None
