"""One version of a key's manifest: its entries (shared with other keys where identical), its ETag,
and the digest of both; or why none can be served. A snapshot file can stand in for the gateway's."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..errors import ColabHiveError
from ..gateway.client import ManifestDocument
from . import interning


@dataclass(frozen=True)
class Manifest:
    """One version of a tenant's manifest; identical entries are shared with other tenants."""

    entries: tuple[dict[str, Any], ...]
    etag: str | None
    digests: tuple[str, ...] = field(default=(), repr=False, compare=False)  # given: the entries are interned
    by_slug: dict[str, dict[str, Any]] = field(init=False, repr=False, compare=False)
    content: str = field(init=False, repr=False, compare=False)  # the ETag and every entry, as one digest
    pages: tuple[Any, ...] = field(default=(), repr=False, compare=False)  # what the gateway's answer was read from

    def __post_init__(self) -> None:
        if len(self.digests) != len(self.entries):
            pairs = [interning.entry(e) for e in self.entries]
            object.__setattr__(self, "digests", tuple(d for d, _ in pairs))
            object.__setattr__(self, "entries", tuple(e for _, e in pairs))
        object.__setattr__(self, "by_slug", {e["name"]: e for e in self.entries})
        object.__setattr__(self, "content", interning.digest([self.etag, *self.digests]))

    @classmethod
    def fetched(cls, document: ManifestDocument) -> Manifest:
        """The manifest of a document whose entries its fetch interned (a ``prepare`` that calls
        :func:`interning.entry`)."""
        if len(document.prepared) != len(document.entries):
            return cls(document.entries, document.etag)
        return cls(tuple(e for _, e in document.prepared), document.etag, tuple(d for d, _ in document.prepared),
                   document.pages)


class ManifestError(ColabHiveError):
    """No manifest can be served (the gateway failed and there is no copy to fall back on);
    ``retry_after``: when the gateway said to ask again, if it did."""

    http_status = 503


def load_snapshot(path: str) -> Manifest:
    """Read a manifest snapshot: the gateway's manifest body (``{"tools": [...]}``) or a bare list."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as exc:
        raise ManifestError(f"cannot read manifest snapshot {path}: {exc}") from None
    tools = data.get("tools") if isinstance(data, dict) else data
    if not isinstance(tools, list) or not all(isinstance(t, dict) and isinstance(t.get("name"), str) for t in tools):
        raise ManifestError(f"manifest snapshot {path} is not a list of tool entries with names")
    etag = data.get("etag") if isinstance(data, dict) else None
    return Manifest(tuple(tools), etag)
