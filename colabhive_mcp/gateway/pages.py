"""A manifest's pages as a fetch reads them: each page parsed once per process however many keys
read it (:class:`ManifestPage`), and the next page's cursor seen in a body before it is parsed
(:func:`cursor_seen`), so that the next page is asked for while the caller works on this one.
:mod:`.client` fetches the pages in turn with them.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Callable

from .answers import GatewayError, json_body, valid_entries

if TYPE_CHECKING:
    import requests

NEXT_CURSOR = re.compile(rb'"nextCursor"\s*:\s*("(?:[^"\\]|\\.)*")')  # a page's cursor, read from its body unparsed

Prepare = Callable[[dict[str, Any]], "tuple[Any, dict[str, Any]]"]  # an entry -> its key and the entry to keep
YIELD_EVERY = 20  # entries prepared between two offers of the interpreter lock (about 1.5 ms of work)


def prepare_all(entries: Any, prepare: Prepare) -> list[tuple[Any, dict[str, Any]]]:
    """What ``prepare`` makes of each entry, the interpreter lock offered every few entries: a request
    that waits for it (answering while a manifest is read behind it) would otherwise wait for all of
    them (5 ms each time it asks, as often as it asks)."""
    made = []
    for number, entry in enumerate(entries):
        if number % YIELD_EVERY == 0:
            time.sleep(0)
        made.append(prepare(entry))
    return made


class ManifestPage:
    """A page of a manifest as read: its valid entries, its cursor and ETag, and what a fetch's
    ``prepare`` made of its entries. Read once per process for each body (by its SHA-256) while a
    document read from it is held (:attr:`.gateway.ManifestDocument.pages`): the keys of a service mostly see
    the same manifest, whose pages then cost a new key no parsing, and nothing more is kept."""

    _seen: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
    _lock = threading.Lock()

    def __init__(self, response: requests.Response) -> None:
        page = json_body(response)
        if not isinstance(page, dict) or not isinstance(page.get("tools"), list):
            raise GatewayError("the gateway's manifest is not an object with a 'tools' list",
                               status=response.status_code)
        self.entries = valid_entries(page["tools"])
        self.cursor, self.etag = page.get("nextCursor"), page.get("etag")
        self._prepared: dict[Prepare, list[tuple[Any, dict[str, Any]]]] = {}

    @classmethod
    def of(cls, response: requests.Response) -> ManifestPage:
        body = hashlib.sha256(response.content).digest()
        with cls._lock:
            page = cls._seen.get(body)
        if page is None:
            page = cls(response)
            with cls._lock:
                page = cls._seen.setdefault(body, page)
        return page

    def prepared(self, prepare: Prepare) -> list[tuple[Any, dict[str, Any]]]:
        """What ``prepare`` makes of the entries (made once; a racing thread makes the same). From then
        on the page keeps the entries ``prepare`` keeps (one copy shared with other tenants, not its own)."""
        made = self._prepared.get(prepare)
        if made is None:
            made = prepare_all(self.entries, prepare)
            self.entries = [kept for _, kept in made]
            self._prepared[prepare] = made
        return made


def cursor_seen(body: bytes) -> str | None:
    """The ``nextCursor`` of a manifest page as its body's last one reads, before the body is parsed."""
    found = NEXT_CURSOR.match(body, max(body.rfind(b'"nextCursor"'), 0))
    try:
        cursor = json.loads(found.group(1)) if found else None
    except ValueError:
        return None
    return cursor if isinstance(cursor, str) and cursor else None
