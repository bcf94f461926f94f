"""JSON as the wire wants it: compact UTF-8, and a large list kept with its own encoding.

A lone surrogate (a client's ``"\\ud800"`` escape) has no UTF-8 form: it goes back out escaped.
"""

from __future__ import annotations

import json
import re
from typing import Any

PARSE_DEPTH = 512  # deeper JSON is refused before it is parsed: the parser recurses once per level
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKETS = re.compile(r"[\[\]{}]")


def to_json(value: Any, allow_nan: bool = True) -> bytes:
    """``value`` as compact JSON in UTF-8 (never a raw newline)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=allow_nan).encode(
        "utf-8", "backslashreplace")


def too_deep(text: str, limit: int = PARSE_DEPTH) -> bool:
    """Whether JSON ``text`` opens more than ``limit`` arrays and objects inside each other, judged
    on the text (strings skipped), so that no parser ever recurses that deep (a thread with a small
    stack could crash). Cheap for most texts: fewer brackets than ``limit`` in all is never too deep."""
    if text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    for bracket in _BRACKETS.findall(_STRINGS.sub("", text)):
        depth += 1 if bracket in "[{" else -1
        if depth > limit:
            return True
    return False


class EncodedList(list):
    """A list that also keeps its own JSON encoding (a warm tool list is encoded once, not per request)."""

    def __init__(self, items: list[Any]) -> None:
        super().__init__(items)
        self.raw = to_json(items)
