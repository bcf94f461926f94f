"""The canonical form of a tool call's arguments: the same arguments, however a client ordered or
spaced them, are the same bytes, and so the same digest (a retry's identity, a confirmation's)."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical(value: Any) -> bytes:
    """Sorted keys, no spaces, UTF-8 (a lone surrogate kept as it came, never an error)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8", "surrogatepass")


def digest(*parts: str | bytes) -> str:
    """The SHA-256 of ``parts`` joined by NUL bytes, in hex."""
    return hashlib.sha256(b"\0".join(p.encode("utf-8", "surrogatepass") if isinstance(p, str) else p
                                     for p in parts)).hexdigest()
