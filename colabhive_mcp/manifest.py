"""The manifest cache: TTL, ETag revalidation, one upstream fetch at a time, stale on failure.

A :class:`Manifest` is immutable; the cache swaps in a new one when the gateway has news.
Threads that find the copy stale while another thread is fetching wait for that fetch
instead of starting their own, so a burst of cold requests costs one upstream GET.
"""

from __future__ import annotations

import json
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from . import metrics, interning
from .gateway import Gateway, GatewayError
from .keys import KeyRejected
from .logs import log

RETRY_AFTER_FAILURE_S = 5.0


@dataclass(frozen=True)
class Manifest:
    """One version of a tenant's manifest; identical entries are shared with other tenants."""

    entries: tuple[dict[str, Any], ...]
    etag: str | None
    digests: tuple[str, ...] = field(init=False, repr=False, compare=False)
    by_slug: dict[str, dict[str, Any]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        pairs = [interning.entry(e) for e in self.entries]
        object.__setattr__(self, "digests", tuple(d for d, _ in pairs))
        object.__setattr__(self, "entries", tuple(e for _, e in pairs))
        object.__setattr__(self, "by_slug", {e["name"]: e for e in self.entries})


class ManifestError(Exception):
    """No manifest can be served (the gateway failed and there is no copy to fall back on)."""


class ManifestCache:
    """A tenant's manifest, fetched lazily and revalidated after ``ttl`` seconds."""

    def __init__(self, gateway: Gateway, *, ttl: float = 60.0, pin: str | None = None,
                 snapshot: Manifest | None = None, rejection_ttl: float = 30.0, conditional: bool = True,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``pin`` refuses any manifest whose ETag differs; a ``snapshot`` is served forever; a key
        the gateway rejected is answered from memory for ``rejection_ttl`` seconds; without
        ``conditional``, the manifest is fetched whole (no ``If-None-Match``) when it expires."""
        self.gateway = gateway
        self.ttl = ttl
        self.conditional = conditional
        self.pin = pin
        self.rejection_ttl = rejection_ttl
        self.clock = clock
        self._current = snapshot
        self._expires = math.inf if snapshot is not None else 0.0
        self._rejection: KeyRejected | None = None
        self._fetch_lock = threading.Lock()

    @property
    def current(self) -> Manifest | None:
        return self._current

    def get(self) -> Manifest:
        """The manifest, revalidated first if its TTL ran out. Raises :class:`KeyRejected` (also
        from memory, for a while after the gateway said so) or :class:`ManifestError`."""
        current = self._current
        if current is not None and self.clock() < self._expires and self._rejection is None:
            metrics.MANIFEST.labels("hit").inc()
            return current
        with self._fetch_lock:
            if self.clock() < self._expires:
                if self._rejection is not None:
                    raise self._rejection
                if self._current is not None:
                    metrics.MANIFEST.labels("hit").inc()
                    return self._current  # another thread refreshed it while we waited
            return self._refresh()

    def invalidate(self) -> None:
        """Make the next :meth:`get` revalidate with the gateway."""
        self._expires = 0.0

    def _refresh(self) -> Manifest:
        current = self._current
        etag = current.etag if current else None
        started = time.perf_counter()
        try:
            document = self.gateway.fetch_manifest(etag if self.conditional else None)
        except KeyRejected as exc:  # no stale copy for a key that is no longer accepted
            self._rejection, self._expires = exc, self.clock() + self.rejection_ttl
            metrics.MANIFEST.labels("rejected").inc()
            raise
        except GatewayError as exc:
            return self._fall_back(exc)
        took_ms = round((time.perf_counter() - started) * 1000, 1)
        self._rejection, self._expires = None, self.clock() + self.ttl
        if document is None and current is None:
            return self._fall_back(GatewayError("the gateway answered 304 to an unconditional request"))
        if document is None or (current is not None and document.etag and document.etag == etag):
            log.bind(status=304 if document is None else 200, etag=etag, duration_ms=took_ms,
                     bytes=document.size if document else 0, tools=len(current.entries),
                     tenant=self.gateway.key_id).info("manifest.fetched")
            metrics.MANIFEST.labels("not_modified").inc()
            return current  # unchanged: the same object, so nobody is told the list changed
        if self.pin and document.etag != self.pin:
            return self._fall_back(GatewayError(
                f"the gateway's manifest is now {document.etag}, but this server is pinned to {self.pin}"))
        log.bind(status=200, etag=document.etag, duration_ms=took_ms, bytes=document.size,
                 tools=len(document.entries), tenant=self.gateway.key_id).info("manifest.fetched")
        self._current = Manifest(document.entries, document.etag)
        metrics.MANIFEST.labels("fetched").inc()
        return self._current

    def _fall_back(self, exc: GatewayError) -> Manifest:
        """Serve the copy we have (and say so), or fail when there is none."""
        current = self._current
        self._expires = self.clock() + min(self.ttl, RETRY_AFTER_FAILURE_S)
        if current is None:
            self._expires = 0.0
            log.bind(error=exc.message, status=exc.status, tenant=self.gateway.key_id).warning("manifest.unavailable")
            metrics.MANIFEST.labels("error").inc()
            raise ManifestError(f"cannot load the tool manifest: {exc.message}") from exc
        log.bind(error=exc.message, status=exc.status, etag=current.etag,
                 tenant=self.gateway.key_id).warning("manifest.stale")
        metrics.MANIFEST.labels("stale").inc()
        return current


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
