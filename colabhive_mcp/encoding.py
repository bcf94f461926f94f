"""JSON as the wire wants it: compact UTF-8, and a large list kept with its own encoding.

A lone surrogate (a client's ``"\\ud800"`` escape) has no UTF-8 form: it goes back out escaped.
"""

from __future__ import annotations

import json
from typing import Any


def to_json(value: Any, allow_nan: bool = True) -> bytes:
    """``value`` as compact JSON in UTF-8 (never a raw newline)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=allow_nan).encode(
        "utf-8", "backslashreplace")


class EncodedList(list):
    """A list that also keeps its own JSON encoding (a warm tool list is encoded once, not per request)."""

    def __init__(self, items: list[Any]) -> None:
        super().__init__(items)
        self.raw = to_json(items)
