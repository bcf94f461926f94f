"""``tools/list``: the tenant's catalog as the request's revision spells it, in pages with cursors.

A known host's profile may change the list (shorter names, fewer tools, strict schemas: see
:mod:`colabhive_mcp.catalog.profiles`). Such a variant is never mistaken for another client's list: its
cursors name the variant, and under 2026 it is sent with ``ttlMs: 0``, so a cache shared by two
clients of one key (``cacheScope: "private"`` allows one per key) never serves it to the other.
"""

from __future__ import annotations

from typing import Any

from ..catalog import profiles
from ..encoding import b64url, from_b64url
from ..manifest.version import ManifestError
from ..settings.config import Config
from .jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, JsonRpcError
from .request import Request


def tools_list(request: Request, config: Config) -> dict[str, Any]:
    try:
        listing, etag = _listing(request)
    except ManifestError as exc:
        raise JsonRpcError(INTERNAL_ERROR, f"Cannot load the ColabHive tool list: {exc}") from None
    variant = profiles.lists_differently(request.profile, config)
    shape = ".".join(map(str, profiles.listing_shape(request.profile))) if variant else ""
    fingerprint = f"{etag or ''}|{len(listing)}|{shape}"
    start = _read_cursor(request.params.get("cursor"), fingerprint)
    end = start + config.tools_page_size
    whole = start == 0 and end >= len(listing)  # the common case: the cached, pre-encoded list as it is
    result: dict[str, Any] = {"tools": listing if whole else listing[start:end]}
    if end < len(listing):
        result["nextCursor"] = _make_cursor(end, fingerprint)
    if request.modern:  # a cache keyed by the key alone must not hand one client's list to another
        cacheable = request.narrow is None and not profiles.lists_by_client(config)
        result.update(ttlMs=int(config.manifest_ttl * 1000) if cacheable else 0, cacheScope="private")
    return result


def _listing(request: Request) -> tuple[list[dict[str, Any]], str | None]:
    """The tools this request is shown (those its narrowing header leaves), and its manifest's ETag."""
    narrow = request.narrow
    if narrow is None:
        return request.tenant.listing(request.profile, request.version)
    catalog = request.tenant.catalog(request.profile)
    by_name = catalog.by_name
    return [t for t in catalog.listing(request.version)
            if not narrow.hides(by_name[t["name"]].entry, by_name[t["name"]].builtin)], catalog.manifest.etag


def _make_cursor(offset: int, fingerprint: str) -> str:
    return b64url(f"{offset}:{fingerprint}".encode())


def _read_cursor(cursor: Any, fingerprint: str) -> int:
    if cursor is None or cursor == "":
        return 0
    try:
        text = from_b64url(str(cursor)).decode()
        offset, _, stamp = text.partition(":")
        if stamp == fingerprint and int(offset) >= 0:
            return int(offset)
    except (ValueError, UnicodeDecodeError):
        pass
    raise JsonRpcError(INVALID_PARAMS, "Invalid or expired cursor: list the tools again from the start")
