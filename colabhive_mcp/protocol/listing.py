"""``tools/list``: the tenant's catalog as the request's revision spells it, in pages with cursors."""

from __future__ import annotations

import base64
from typing import Any

from ..manifest import ManifestError
from .jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, JsonRpcError
from .request import Request


def tools_list(request: Request, page_size: int, ttl_s: float) -> dict[str, Any]:
    try:
        catalog = request.tenant.catalog(request.profile)
    except ManifestError as exc:
        raise JsonRpcError(INTERNAL_ERROR, f"Cannot load the ColabHive tool list: {exc}") from None
    listing = catalog.listing(request.version)
    if request.narrow is not None:
        listing = [t for t in listing if request.narrow.refusal(catalog.by_name[t["name"]].entry,
                                                                catalog.by_name[t["name"]].builtin) is None]
    fingerprint = f"{catalog.manifest.etag or ''}|{len(listing)}"
    start = _read_cursor(request.params.get("cursor"), fingerprint)
    end = start + page_size
    whole = start == 0 and end >= len(listing)  # the common case: the cached, pre-encoded list as it is
    result: dict[str, Any] = {"tools": listing if whole else listing[start:end]}
    if end < len(listing):
        result["nextCursor"] = _make_cursor(end, fingerprint)
    if request.modern:
        result.update(ttlMs=int(ttl_s * 1000), cacheScope="private")
    return result


def _make_cursor(offset: int, fingerprint: str) -> str:
    return base64.urlsafe_b64encode(f"{offset}:{fingerprint}".encode()).decode().rstrip("=")


def _read_cursor(cursor: Any, fingerprint: str) -> int:
    if cursor is None or cursor == "":
        return 0
    try:
        text = base64.urlsafe_b64decode(str(cursor) + "=" * (-len(str(cursor)) % 4)).decode()
        offset, _, stamp = text.partition(":")
        if stamp == fingerprint and int(offset) >= 0:
            return int(offset)
    except (ValueError, UnicodeDecodeError):
        pass
    raise JsonRpcError(INVALID_PARAMS, "Invalid or expired cursor: list the tools again from the start")
