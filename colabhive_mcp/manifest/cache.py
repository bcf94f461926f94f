"""The manifest cache: TTL, ETag revalidation, one upstream fetch at a time, stale on failure.

A :class:`~colabhive_mcp.manifest.version.Manifest` is immutable; the cache swaps in a new one when the gateway has news.
Threads that find the copy stale while another thread is fetching serve that copy meanwhile, and
with none yet they wait for that fetch instead of starting their own, so a burst of cold requests
costs one upstream GET. With an :class:`~colabhive_mcp.manifest.instance_copy.InstanceCopy`, the workers of
an instance share that work through its store (:mod:`colabhive_mcp.manifest.instance_copy`).
"""

from __future__ import annotations

import contextvars
import math
import threading
import time
from functools import partial
from typing import TYPE_CHECKING, Any, Callable

from .. import metrics
from ..encoding import EncodedList
from ..gateway.client import Gateway, GatewayError
from ..gateway.pages import prepare_all
from ..keys import KeyRejected
from ..logs import log
from . import interning
from .instance_copy import LOOK_AGAIN_S, SOON_LOOK_S, InstanceCopy, looked_for
from .version import Manifest, ManifestError

if TYPE_CHECKING:
    from .saved import SavedManifest

RETRY_AFTER_FAILURE_S = 5.0
SOON_S = 1.0  # how long a worker serves its copy while another one gets newer news
LISTING_WAIT_S = 0.5  # how long a worker waits for the tool list another one is writing, rather than make it


class ManifestCache:
    """A tenant's manifest, fetched lazily and revalidated after ``ttl`` seconds."""

    def __init__(self, gateway: Gateway, *, ttl: float = 60.0, pin: str | None = None,
                 snapshot: Manifest | None = None, rejection_ttl: float = 30.0, conditional: bool = True,
                 stale_while_revalidate: float = 0.0,
                 instance: InstanceCopy | None = None, saved: SavedManifest | None = None,
                 prepare: Callable[[dict[str, Any]], tuple[str, dict[str, Any]]] = interning.entry,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``pin`` refuses any manifest whose ETag differs; a ``snapshot`` is served forever; a key
        the gateway rejected is answered from memory for ``rejection_ttl`` seconds; without
        ``conditional``, the manifest is fetched whole (no ``If-None-Match``) when it expires; for
        ``stale_while_revalidate`` seconds past its expiry, the copy is served at once while one
        revalidation runs on a thread of its own (RFC 5861);
        ``instance``: the copy shared by the instance's workers; ``saved``: the copy an earlier
        process kept on disk, which the first fetch asks the gateway about (served only on its 304);
        ``prepare``: what a fetch does with each entry while the next page is on its way (at least
        :func:`interning.entry`: the entry's digest, and the process's one copy of it)."""
        self.gateway = gateway
        self.prepare = prepare
        self.instance = instance
        self.saved = saved
        self.ttl = ttl
        self.conditional = conditional
        self.stale_while_revalidate = stale_while_revalidate
        self.pin = pin
        self.rejection_ttl = rejection_ttl
        self.clock = clock
        self._current = snapshot
        self._expires = math.inf if snapshot is not None else 0.0
        self._rejection: KeyRejected | None = None
        self._fetch_lock = threading.Lock()
        self._asked = -math.inf  # when (time.monotonic()) the gateway was asked what it last answered with a manifest
        self._unsaved: Manifest | None = None  # fetched, and not yet written to ``saved``
        self._save_lock = threading.Lock()
        self._shared_listings: dict[str, tuple[str | None, str | None, EncodedList]] = {}  # variant -> a list as read:
        # (the content, the ETag of the manifest) it was made of
        self._unsaved_listings: dict[str, tuple[str | None, EncodedList]] = {}  # made of the manifest saved, not yet written

    @property
    def current(self) -> Manifest | None:
        return self._current

    @property
    def asks(self) -> bool:
        """Whether :meth:`get` would wait for the gateway now: nothing is held yet, or the gateway's
        refusal of the key is old enough to ask it again (a refusal it remembers is answered at once)."""
        return self._current is None or (self._rejection is not None and self.clock() >= self._expires)

    def vouched(self) -> bool:
        """Whether, with no copy of its own yet, this worker may take the key as accepted: another worker
        got its manifest from the gateway within the TTL (what it would load and serve meanwhile), or
        is getting the first one now and does (waited for as long as a fetch may take)."""
        if self._current is not None or self.instance is None:
            return False
        known = looked_for(self.instance.age, self.instance.fetching, self.gateway.timeout, SOON_LOOK_S)
        return known is not None and known[1] < self.ttl  # (an older copy is served while it is revalidated: see get)

    def shared_listing(self, variant: str, wait: bool = True) -> tuple[str | None, EncodedList] | None:
        """A tool list made the ``variant`` way that this worker need not make, and the ETag of the manifest
        it was made of: with no copy of its own yet, another worker's of a manifest the gateway gave within
        the TTL (see :meth:`InstanceCopy.listing`; one it is making is waited for a moment, if ``wait``),
        or an earlier start's (see :meth:`SavedManifest.listing`); with a copy within its TTL, an earlier
        start's list of it (see :meth:`listing_saved_of`)."""
        if self._rejection is not None:
            return None
        current = self._current
        if self.instance is not None:
            return None if current is not None else self._another_workers_listing(variant, wait)
        if self.saved is None or (current is not None and self.clock() >= self._expires):
            return None  # (a copy past its TTL is asked about first)
        return self._saved_listing(variant, current)

    def listing_saved_of(self, manifest: Manifest, variant: str) -> tuple[str | None, EncodedList] | None:
        """The list an earlier start saved of ``manifest`` (the same ETag: the gateway's word on it since),
        made the ``variant`` way, if there is one."""
        return None if self.saved is None or self._rejection is not None else self._saved_listing(variant, manifest)

    def _another_workers_listing(self, variant: str, wait: bool) -> tuple[str | None, EncodedList] | None:
        assert self.instance is not None
        named = self.instance.named(self.ttl)
        if named is None:
            return None
        etag, content = named
        kept = self._shared_listings.get(variant)
        if kept is None or kept[0] != content:
            try:  # (one read for every tenant and thread of the process that wants it, while one holds it)
                listing = interning.held(("listing", content, variant),
                                         partial(self._instance_listing, content, variant, wait))
            except LookupError:
                return None
            kept = self._shared_listings[variant] = (content, etag, listing)
        return kept[1], kept[2]

    def _saved_listing(self, variant: str, manifest: Manifest | None) -> tuple[str | None, EncodedList] | None:
        """An earlier start's ``variant`` list: of ``manifest``, or (``None``: no copy yet) of the manifest it
        saved, while the gateway's word on that is younger than the TTL."""
        assert self.saved is not None
        kept = self._shared_listings.get(variant)
        if kept is None:
            saved = self.saved.listing(variant, self.ttl if manifest is None else math.inf)
            if saved is None:
                return None
            kept = self._shared_listings[variant] = (None, *saved)
        if manifest is not None and (manifest.etag is None or kept[1] != manifest.etag):
            return None  # a list of another manifest than the gateway's
        return kept[1], kept[2]

    def _instance_listing(self, content: str, variant: str, wait: bool) -> EncodedList:
        assert self.instance is not None
        listing = self.instance.listing(content, variant, LISTING_WAIT_S if wait else 0)
        if listing is None:
            raise LookupError(f"no {variant} list of {content}")
        return listing

    @property
    def listed_etag(self) -> str | None:
        """The ETag of the manifest whose list another worker or an earlier start made was answered, if one was."""
        return next((etag for _, etag, _ in self._shared_listings.values()), None)

    def claim_listing(self, variant: str, manifest: Manifest | None = None) -> bool:
        """Whether this worker is to make this key's ``variant`` list (of ``manifest``, once known) for the
        others: they share a copy, and none of them makes it or made it lately. They wait for it from now
        (see :meth:`InstanceCopy.claim_listing`)."""
        return self.instance is not None and self.instance.claim_listing(
            variant, None if manifest is None else manifest.content)

    def made_listing(self, variant: str, made: tuple[Manifest, EncodedList] | None, claimed: bool) -> None:
        """A list made the ``variant`` way of a manifest (``None``: none could be made, or it was made
        before): the other workers get it when this worker ``claimed`` it; the next start, when the
        manifest is the one saved, with the next :meth:`save`."""
        if claimed:
            assert self.instance is not None
            self.instance.share_listing(variant, None if made is None else (made[0].content, made[1]))
        if made is not None and self.saved is not None and made[0] is self._current:
            with self._save_lock:
                self._unsaved_listings[variant] = (made[0].etag, made[1])

    def get(self, *, behind: bool = True, accepted: Callable[[], None] | None = None) -> Manifest:
        """The manifest, revalidated first if its TTL ran out (while another thread revalidates it,
        the copy held: a slow gateway keeps one thread waiting, not every request of the tenant; and
        within ``stale_while_revalidate`` of its expiry, nobody waits: the revalidation runs behind,
        unless the caller, itself in the background, would rather wait for it: not ``behind``).
        ``accepted`` is called as soon as the gateway accepts the key, when this call asks it.
        Raises :class:`KeyRejected` (also from memory, for a while after the gateway said so) or
        :class:`ManifestError`."""
        current = self._current
        if current is not None and self._rejection is None:  # (read last: a fetch sets it before the expiry)
            now = self.clock()
            if now < self._expires or self._fetch_lock.locked():
                metrics.MANIFEST.labels("hit").inc()
                return current
            if behind and now < self._expires + self.stale_while_revalidate and self._revalidate_behind():
                metrics.MANIFEST.labels("stale_while_revalidate").inc()
                return current
        elif current is None and behind:
            adopted = self._adopt_instance_copy()
            if adopted is not None and self._revalidate_behind():
                metrics.MANIFEST.labels("stale_while_revalidate").inc()
                return adopted
        with self._fetch_lock:
            if self.clock() < self._expires:
                if self._rejection is not None:
                    raise self._rejection
                if self._current is not None:
                    metrics.MANIFEST.labels("hit").inc()
                    return self._current  # another thread refreshed it while we waited
            return self._refresh(accepted)

    def _adopt_instance_copy(self) -> Manifest | None:
        """With no copy of its own yet, a worker takes the instance's, if another worker's confirmation
        of it is recent enough to be served while it is revalidated (a copy the gateway refused since
        is not: its confirmation is gone)."""
        if self.instance is None or not self.stale_while_revalidate or not self._fetch_lock.acquire(blocking=False):
            return None
        try:
            return self._current or self._from_instance(self.ttl + self.stale_while_revalidate)
        finally:
            self._fetch_lock.release()

    def _revalidate_behind(self) -> bool:
        """Start the revalidation on a thread of its own, which holds the fetch lock until it is done;
        ``False`` when another thread holds that lock (its answer is on the way)."""
        if not self._fetch_lock.acquire(blocking=False):
            return True  # (a revalidation under way: the copy is served meanwhile)
        context = contextvars.copy_context()  # its logs' fields, its trace

        def revalidate() -> None:
            try:
                if self.clock() >= self._expires:
                    self._refresh()
            except (KeyRejected, ManifestError):  # remembered (or logged) by the fetch: the next list hears it
                pass
            except Exception:  # a bug: logged, and the next list revalidates as usual
                log.bind(tenant=self.gateway.key_id).exception("manifest.revalidation_failed")
            finally:
                self._fetch_lock.release()

        try:
            threading.Thread(target=context.run, args=(revalidate,), name="manifest-revalidate", daemon=True).start()
        except BaseException:
            self._fetch_lock.release()
            raise
        return True

    def refresh(self, since: float = math.inf) -> Manifest:
        """The manifest, asked of the gateway now, whatever the TTL and whatever another worker is
        fetching (e.g. after an action was published), unless it answered this cache a question asked
        after ``since`` (a :func:`time.monotonic` reading; by default, it is asked); the instance's
        copy follows the answer, and no answer to a question asked before undoes it."""
        with self._fetch_lock:
            if self._current is not None and self._asked > since and self._rejection is None:
                return self._current
            if self.instance is not None:
                self.instance.expire()
            return self._fetch()

    def _refresh(self, accepted: Callable[[], None] | None = None) -> Manifest:
        """Under the fetch lock: the instance's fresh copy, else the gateway's answer (one worker
        asks it; the others wait a moment for that answer, serving what they have meanwhile)."""
        if self.instance is None:
            return self._fetch(accepted)
        shared = self._from_instance()
        if shared is not None:
            return shared
        claimed = self.instance.claim(self.gateway.timeout + 5)
        if not claimed:
            shared = self._await_instance()
            if shared is not None:
                return shared
        try:
            return self._fetch(accepted)
        finally:
            if claimed:
                self.instance.release()

    def _from_instance(self, within: float | None = None) -> Manifest | None:
        """The copy another worker got from the gateway ``within`` seconds (by default, the TTL; our own
        object when it is the same)."""
        assert self.instance is not None
        known = self.instance.age()
        if known is None or known[1] >= (self.ttl if within is None else within):
            return None
        etag, age = known
        current = self._current
        if current is None or etag is None or current.etag != etag:
            copy = self.instance.load()
            if copy is None or copy.etag != etag or (self.pin and copy.etag != self.pin):
                return None
            if current is None or copy.digests != current.digests:
                self._current = current = copy
        self._rejection, self._expires = None, self.clock() + self.ttl - age
        metrics.MANIFEST.labels("instance").inc()
        return current

    def _await_instance(self) -> Manifest | None:
        """Another worker is asking the gateway: serve our copy meanwhile (and look again in a
        second), or, with none, wait a while for theirs."""
        if self._current is not None:
            self._expires = self.clock() + min(self.ttl, SOON_S)
            metrics.MANIFEST.labels("hit").inc()
            return self._current
        assert self.instance is not None  # (news, or none once its fetch ended without any)
        return looked_for(self._from_instance, self.instance.fetching, self.gateway.timeout, LOOK_AGAIN_S)

    def _fetch(self, accepted: Callable[[], None] | None = None) -> Manifest:
        current = self._current
        known = current or self._saved()  # what the gateway is asked about
        etag = known.etag if known else None
        asked = self.instance.clock() if self.instance is not None else 0.0
        started, sent = time.perf_counter(), time.monotonic()
        meanwhile = None  # a copy saved by an earlier process is made ready while the gateway is asked about it,
        # unless lists made of it were saved too: a 304 then has them answered, made as they are
        if current is None and known is not None and self.conditional and not (self.saved and self.saved.listed()):
            meanwhile = partial(prepare_all, known.entries, self.prepare)
        try:
            document = self.gateway.fetch_manifest(etag if self.conditional else None, self.prepare, meanwhile,
                                                   accepted)
        except KeyRejected as exc:  # no stale copy for a key that is no longer accepted
            self._rejection, self._expires = exc, self.clock() + self.rejection_ttl
            if self.instance is not None:
                self.instance.expire()  # nor does another worker serve its copy
            if self.saved is not None:
                self.saved.forget()  # nor does a later start ask about it
            metrics.MANIFEST.labels("rejected").inc()
            raise
        except GatewayError as exc:
            return self._fall_back(exc)
        took_ms = round((time.perf_counter() - started) * 1000, 1)
        self._rejection, self._expires, self._asked = None, self.clock() + self.ttl, sent
        if document is None or (known is not None and document.etag and document.etag == etag):
            if known is None:
                return self._fall_back(GatewayError("the gateway answered 304 to an unconditional request"))
            log.bind(status=304 if document is None else 200, etag=etag, duration_ms=took_ms,
                     bytes=document.size if document else 0, tools=len(known.entries),
                     tenant=self.gateway.key_id).info("manifest.fetched")
            metrics.MANIFEST.labels("not_modified").inc()
            if current is None and self.saved is not None:
                self._current = known  # the saved copy, now the gateway's answer
                self.saved.used()
            return self._recorded(known, False, asked)  # unchanged: the same object (nobody is told of a change)
        if self.pin and document.etag != self.pin:
            return self._fall_back(GatewayError(
                f"the gateway's manifest is now {document.etag}, but this server is pinned to {self.pin}"))
        log.bind(status=200, etag=document.etag, duration_ms=took_ms, bytes=document.size,
                 tools=len(document.entries), tenant=self.gateway.key_id).info("manifest.fetched")
        metrics.MANIFEST.labels("fetched").inc()
        fetched = Manifest.fetched(document)
        if current is not None and fetched.content == current.content:  # read whole, and the same: no ETag said so
            return self._recorded(current, False, asked)  # (the same object: nobody is told of a change)
        self._current = self._recorded(fetched, True, asked)
        if self.saved is not None and self._current.etag:
            self._unsaved = self._current  # written by the next save(), once the answer is out
        return self._current

    def save(self) -> None:
        """Write the manifest fetched last to ``saved``, unless it is there already, and the lists made of
        it (a caller does this once its answer is out: 1 MB of JSON then costs the answer nothing)."""
        with self._save_lock:
            manifest, self._unsaved = self._unsaved, None
            listings, self._unsaved_listings = self._unsaved_listings, {}
            if (manifest is not None or listings) and self.saved is not None:
                self.saved.save(manifest, listings)

    def _saved(self) -> Manifest | None:
        """The copy saved on disk by an earlier process, before this one has any (unless pinned elsewhere)."""
        copy = self.saved.load() if self.saved is not None else None
        return copy if copy is not None and (not self.pin or copy.etag == self.pin) else None

    def _recorded(self, manifest: Manifest, changed: bool, asked: float) -> Manifest:
        """``manifest``, the gateway's answer to a question asked at ``asked``, recorded as the
        instance's copy; unless the instance has the answer to a later question: then that one (or,
        while it is on its way, ours for a moment)."""
        if self.instance is None or not self.instance.confirm(manifest, changed, asked):
            return manifest
        newer = self._from_instance()
        if newer is None:
            self._expires = self.clock() + min(self.ttl, SOON_S)
            return manifest
        return newer

    def _fall_back(self, exc: GatewayError) -> Manifest:
        """Serve the instance's last good copy (what any of its workers last got from the gateway:
        maybe newer than ours) or ours (and say so), or fail when there is none."""
        if self.instance is not None:
            copy = self.instance.load()
            if copy is not None and (self._current is None or copy.etag != self._current.etag) and (
                    not self.pin or copy.etag == self.pin):
                self._current = copy
        current = self._current
        self._expires = self.clock() + min(self.ttl, RETRY_AFTER_FAILURE_S)
        if current is None:
            self._expires = 0.0
            log.bind(error=exc.message, status=exc.status, tenant=self.gateway.key_id).warning("manifest.unavailable")
            metrics.MANIFEST.labels("error").inc()
            raise ManifestError(f"cannot load the tool manifest: {exc.message}", exc.retry_after) from exc
        log.bind(error=exc.message, status=exc.status, etag=current.etag,
                 tenant=self.gateway.key_id).warning("manifest.stale")
        metrics.MANIFEST.labels("stale").inc()
        return current
