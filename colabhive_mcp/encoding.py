"""JSON as the wire wants it: compact UTF-8, and a large list kept with its own encoding; and
unpadded base64url, in which tokens, cursors and digests carry bytes.

A lone surrogate (a client's ``"\\ud800"`` escape) has no UTF-8 form: it goes back out escaped.
"""

from __future__ import annotations

import base64
import json
import re
from itertools import accumulate
from typing import Any

PARSE_DEPTH = 512  # deeper JSON is refused before it is parsed: the parser recurses once per level
_ESCAPES = re.compile(rb"\\.", re.DOTALL)
_NOT_SYNTAX = bytes(c for c in range(256) if c not in b'"[]{}')  # all but quotes and brackets
_DEPTH = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


# what :func:`to_json` encodes with, by whether NaN is allowed: values read from JSON or built by this
# package, which hold no cycle (one would raise RecursionError): nothing is kept to look for one
_ENCODERS = {allow: json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=allow, check_circular=False)
             for allow in (True, False)}


def to_json(value: Any, allow_nan: bool = True) -> bytes:
    """``value`` as compact JSON in UTF-8 (never a raw newline)."""
    return _ENCODERS[allow_nan].encode(value).encode("utf-8", "backslashreplace")


def too_deep(text: str, limit: int = PARSE_DEPTH) -> bool:
    """Whether JSON ``text`` opens more than ``limit`` arrays and objects inside each other, judged
    on the text (strings skipped), so that no parser ever recurses that deep (a thread with a small
    stack could crash). Cheap for most texts: fewer brackets than ``limit`` in all is never too deep;
    else the brackets outside strings are found at C speed (3 ms for a megabyte)."""
    if text.count("[") + text.count("{") <= limit:
        return False
    return max(accumulate(map(_DEPTH.__getitem__, _brackets_outside_strings(text))), default=0) > limit


def _brackets_outside_strings(text: str) -> bytes:
    """The brackets of JSON ``text`` that lie outside its strings, in order. Once every escape pair is
    gone, quotes open and close strings in turn; so they do once only quotes and brackets are left, and
    once two adjacent quotes are gone too (which moves no bracket in or out of a string). (Text that is
    not JSON: up to its first fault, which a parser stops at, they are the ones a parser sees.)"""
    kept = _ESCAPES.sub(b"", text.encode("utf-8", "surrogatepass")).translate(None, _NOT_SYNTAX).replace(b'""', b"")
    return b"".join(kept.split(b'"')[::2]) if b'"' in kept else kept


class EncodedList(list):
    """A list that also keeps its own JSON encoding (a warm tool list is encoded once, not per request)."""

    def __init__(self, items: list[Any], raw: bytes | None = None) -> None:
        super().__init__(items)
        self.raw = to_json(items) if raw is None else raw

    @classmethod
    def joined(cls, encoded: list[tuple[Any, bytes]]) -> EncodedList:
        """The list of items each given with its own :func:`to_json` (the list's is theirs, joined)."""
        return cls([item for item, _ in encoded], b"[" + b",".join(raw for _, raw in encoded) + b"]")


class UnreadList(EncodedList):
    """An encoded list of ``count`` items whose items are read from their JSON only when something looks
    at them (a list answered as it was encoded, the common case, never is). Encode it with its ``raw``
    (``json.dumps`` would see no items before they are read)."""

    def __init__(self, raw: bytes, count: int) -> None:
        super().__init__([], raw)
        self._count: int | None = count

    def _read(self) -> None:
        if self._count is not None:
            self.extend(json.loads(self.raw))
            self._count = None

    def __len__(self) -> int:
        return super().__len__() if self._count is None else self._count

    def __iter__(self) -> Any:
        self._read()
        return super().__iter__()

    def __getitem__(self, index: Any) -> Any:
        self._read()
        return super().__getitem__(index)

    def __contains__(self, item: Any) -> bool:
        self._read()
        return super().__contains__(item)

    def __eq__(self, other: Any) -> bool:
        self._read()
        return super().__eq__(other)

    def __ne__(self, other: Any) -> bool:
        self._read()
        return super().__ne__(other)

    __hash__ = None  # type: ignore[assignment]  # (as a list's)

    def __reversed__(self) -> Any:
        self._read()
        return super().__reversed__()

    def __add__(self, other: Any) -> Any:
        self._read()
        return list(self) + other

    def __repr__(self) -> str:
        self._read()
        return super().__repr__()

    def copy(self) -> list[Any]:
        self._read()
        return list(self)

    def index(self, *args: Any) -> int:
        self._read()
        return super().index(*args)

    def count(self, item: Any) -> int:
        self._read()
        return super().count(item)


def headed(listing: EncodedList, **facts: Any) -> bytes:
    """An encoded list as it is kept outside its process: a line of JSON (``facts``, and how many
    items it holds), then the list's own JSON, as it is (see :func:`unheaded`)."""
    return json.dumps({**facts, "count": len(listing)}).encode() + b"\n" + listing.raw


def unheaded(kept: bytes) -> tuple[dict[str, Any], UnreadList] | None:
    """The facts and the list :func:`headed` kept (the list unread); ``None`` when ``kept`` is not one."""
    head, _, raw = kept.partition(b"\n")
    try:
        facts = json.loads(head)
    except ValueError:
        return None
    count = facts.get("count") if isinstance(facts, dict) else None
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        return None
    return facts, UnreadList(raw, count)


def b64url(data: bytes) -> str:
    """``data`` as unpadded base64url (RFC 4648 §5): safe in a URL, a header and a file name."""
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def from_b64url(text: str) -> bytes:
    """The bytes of unpadded base64url ``text``; ``ValueError`` (``binascii.Error``) for any other character."""
    return base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
