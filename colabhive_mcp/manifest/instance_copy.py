"""A tenant's manifest as the workers of its instance share it, through the instance store.

The worker whose copy expires first asks the gateway (conditionally) and records the answer; the
others take it from the store, so a tenant's manifest costs the instance one GET per TTL, and when
the gateway fails, every worker serves the last good copy, even one that never fetched it itself
(:class:`colabhive_mcp.manifest.cache.ManifestCache` does the asking). A copy names its manifest's content,
which the store holds once for every key whose manifest it is: a new key with a known manifest
writes a few bytes, and a thousand keys holding one manifest take its size once. A new content is
written after the answer that brought it, in parts (:meth:`InstanceCopy._store_content`).

The copy also carries the encoded tool lists its workers made of it (:meth:`InstanceCopy.share_listing`,
one for each way of listing: policy, client shape, revision), so that another worker answers a
``tools/list`` for a key it has never seen without building anything.

Answers are recorded in the order their questions were asked, not the order they arrive: an
answer to a question asked before another worker's (or before a refresh, which may follow a
publication) never replaces that newer one, so no worker takes the older manifest as fresh.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from typing import Callable, Iterator, TypeVar

from ..encoding import EncodedList, UnreadList, headed, unheaded
from ..store.interface import InstanceStore
from .version import Manifest

COPIES, CONFIRMED, FETCHING, WRITING = "manifest", "manifest-confirmed", "manifest-fetching", "manifest-writing"
CONTENTS, STORED = "manifest-content", "manifest-content-stored"  # a manifest's entries, once for every key holding it
PARTS, PART_ENTRIES = "manifest-content-part", 25  # the content is written in parts of so many entries
LISTINGS, LISTED = "manifest-list", "manifest-list-written"  # "content:variant" -> a tool list (encoding.headed); when
LISTING = "manifest-listing-making"  # "key digest:variant" -> the worker making that list
T = TypeVar("T")
LOOK_AGAIN_S = 0.05  # how often a worker looks whether another one's fetch has landed
FIRST_LOOK_S = 0.005  # how soon it looks first (the other may only be writing it), then twice as late each time
SOON_LOOK_S = 0.002  # how often, at most, a worker looks for what another is about to write and its client
# waits for (its word on a new key, a list), for the first EAGER_S: a read that finds nothing costs microseconds
EAGER_S = 0.25  # then (a slow gateway) no more often than every LOOK_AGAIN_S
KEPT_S = 3600.0  # how long after its last confirmation the instance keeps a tenant's copy
WRITE_WAIT_S = 1.0  # how long a worker waits to write the instance's copy while another one does
WRITE_HELD_S = 30.0  # how long that turn lasts at most (a worker that died holding it)
LISTS_FIRST_S = 1.0  # how long a new content's write waits at most for the lists this worker claimed


def looked_for(look: Callable[[], T | None], under_way: Callable[[], bool], seconds: float, most: float) -> T | None:
    """What ``look`` finds, looked for again while another worker is ``under_way`` with it, for ``seconds``
    at most: after :data:`FIRST_LOOK_S` (or ``most``, if sooner), then twice as late each time, up to
    ``most`` seconds apart for :data:`EAGER_S`, and :data:`LOOK_AGAIN_S` after that if longer (a real wait
    for another process: real time)."""
    started = time.monotonic()
    deadline, pause = started + seconds, min(FIRST_LOOK_S, most)
    while (found := look()) is None:
        if time.monotonic() >= deadline or not under_way():
            return None
        time.sleep(pause)
        pause = min(2 * pause, most if time.monotonic() - started < EAGER_S else max(most, LOOK_AGAIN_S))
    return found


def on_a_thread(run: Callable[[], None]) -> None:
    threading.Thread(target=run, name="manifest-content", daemon=True).start()


class InstanceCopy:
    """One tenant's manifest as its instance knows it: the last good copy, when the gateway was
    asked for it (``at``: the order of answers too), and whether a worker is asking the gateway now.
    Keyed by the key's digest."""

    def __init__(self, store: InstanceStore, digest: str, clock: Callable[[], float] = time.time,
                 in_background: Callable[[Callable[[], None]], None] = on_a_thread) -> None:
        """``clock``: the wall clock, which the instance's workers share; ``in_background``: what runs the
        write of a new manifest's content (:meth:`_store_content`)."""
        self.store, self.digest, self.clock = store, digest, clock
        self._in_background = in_background
        self._lock = threading.Lock()
        self._writes = 0  # content writes under way
        self._release_when_written = False  # the claim to ask the gateway goes once they are done
        self._claims: list[float] = []  # the lists this worker is to give the others, until when each is waited for
        self._lists_written = threading.Condition(self._lock)

    def age(self) -> tuple[str | None, float] | None:
        """The confirmed copy's ETag and seconds since the gateway was asked for it; ``None``: no
        copy to take without asking."""
        confirmed = self.store.get(CONFIRMED, self.digest)
        if confirmed is None or confirmed.get("expired"):
            return None
        return confirmed["etag"], self.clock() - confirmed["at"]

    def named(self, within: float) -> tuple[str | None, str] | None:
        """The ETag and content of the copy the gateway gave within ``within`` seconds, if any."""
        known = self.age()
        if known is None or known[1] >= within:
            return None
        copy = self.store.get(COPIES, self.digest)
        if copy is None or copy["etag"] != known[0] or "content" not in copy:  # (a copy of before: whole)
            return None
        return copy["etag"], copy["content"]

    def listing(self, content: str, variant: str, wait: float) -> UnreadList | None:
        """The tool list a worker made of the manifest ``content``, listed the ``variant`` way, if one did
        (one a worker of this key is making is waited for, ``wait`` seconds at most)."""
        made = looked_for(lambda: self.store.get(LISTINGS, f"{content}:{variant}"),
                          lambda: self.store.get(LISTING, f"{self.digest}:{variant}") is not None, wait, SOON_LOOK_S)
        kept = unheaded(made) if isinstance(made, bytes) else None
        return None if kept is None else kept[1]

    def claim_listing(self, variant: str, content: str | None = None) -> bool:
        """Become the worker that makes this key's ``variant`` list for the others, who wait a moment
        for it from now on; ``False``: another one is making it, or (``content`` known) one made it lately."""
        if content is not None and self.store.get(LISTED, f"{content}:{variant}") is not None:
            return False
        claimed = self.store.add(LISTING, f"{self.digest}:{variant}", os.getpid(), WRITE_HELD_S)
        if claimed:
            with self._lock:
                self._claims.append(time.monotonic() + LISTS_FIRST_S)
        return claimed

    def share_listing(self, variant: str, made: tuple[str, EncodedList] | None) -> None:
        """Give the others the list claimed: a manifest's content and the list ``made`` of it (``None``:
        none could be made), in the background (a megabyte for a big manifest), unless one was lately;
        kept half as long again as a copy, and written again after a copy's time."""
        def write() -> None:
            try:
                if made is not None and self.store.add(LISTED, f"{made[0]}:{variant}", True, KEPT_S):
                    content, listing = made
                    if not self.store.put(LISTINGS, f"{content}:{variant}", headed(listing), KEPT_S * 1.5):
                        self.store.delete(LISTED, f"{content}:{variant}")
            finally:
                self.store.delete(LISTING, f"{self.digest}:{variant}")
                with self._lock:
                    if self._claims:
                        self._claims.pop(0)
                    self._lists_written.notify_all()

        self._in_background(write)

    def load(self) -> Manifest | None:
        copy = self.store.get(COPIES, self.digest)
        if copy is None:
            return None
        if "entries" in copy:  # (a copy of before: whole)
            return Manifest(tuple(copy["entries"]), copy["etag"])
        content = self.store.get(CONTENTS, copy["content"])
        if content is None or "parts" not in content:  # none, or a content of before (whole): as none
            return None
        parts = [self.store.get(PARTS, f"{copy['content']}:{number}") for number in range(content["parts"])]
        return None if None in parts else Manifest(tuple(e for part in parts for e in part), copy["etag"])

    def _store_content(self, manifest: Manifest) -> None:
        """Write the content a copy names unless it was lately (by any key's copy), in the background:
        the request that fetched it answers meanwhile (a megabyte takes ten milliseconds to write), and a
        worker that holds the claim to ask the gateway holds it until the content is written, so that
        another one that needs it waits for it rather than asks again. It is written in parts, each
        waiting its turn for the interpreter lock, so that the write never holds up this worker's
        requests for more than a moment. Content lives half as long again as a copy, so it outlives
        every copy that names it."""
        if self.store.add(STORED, manifest.content, True, KEPT_S / 2):  # not written lately: this worker writes it
            with self._lock:
                self._writes += 1
            self._in_background(lambda: self._write_content(manifest))

    def _write_content(self, manifest: Manifest) -> None:
        """The parts, then the content that names them (which no reader takes before it is whole). A
        write the store refuses leaves the content unwritten, for the next copy that names it to write.
        The lists this worker claimed go first: another worker waits for them (and needs no content to
        answer with them), and both writes take this worker's one interpreter lock."""
        written = False
        try:
            with self._lock:  # (a claim never given, say a thread that could not start, is waited for no longer)
                self._lists_written.wait_for(lambda: max(self._claims, default=0.0) <= time.monotonic(), LISTS_FIRST_S)
            starts = range(0, len(manifest.entries), PART_ENTRIES)
            for number, start in enumerate(starts):
                time.sleep(0)  # this worker's requests first: each part waits its turn for the interpreter lock
                if not self.store.put(PARTS, f"{manifest.content}:{number}",
                                      manifest.entries[start:start + PART_ENTRIES], KEPT_S * 1.5):
                    break
            else:
                written = self.store.put(CONTENTS, manifest.content, {"parts": len(starts)}, KEPT_S * 1.5)
        finally:
            if not written:
                self.store.delete(STORED, manifest.content)
            with self._lock:
                self._writes -= 1
                release = self._release_when_written and not self._writes
                if release:
                    self._release_when_written = False
            if release:
                self.store.delete(FETCHING, self.digest)

    def confirm(self, manifest: Manifest, changed: bool, asked: float) -> bool:
        """The gateway answered ``manifest`` to a question asked at ``asked`` (``changed``: a new
        document, not a 304): record it, unless the answer to a later question is recorded (or a
        later :meth:`expire`). Returns whether one is: ours is outdated, and not recorded. The copy
        is written again before it could expire, so it outlives every confirmation."""
        with self._writing() as turn:
            if not turn:
                return False
            confirmed = self.store.get(CONFIRMED, self.digest)
            if confirmed is not None and confirmed["at"] > asked:
                return True
            now = self.clock()
            same = confirmed if confirmed is not None and not changed and confirmed["etag"] == manifest.etag else None
            copied = same.get("copied", 0.0) if same is not None else 0.0
            copy = now - copied > KEPT_S / 2
            if copy:
                self.store.put(COPIES, self.digest, {"etag": manifest.etag, "content": manifest.content}, KEPT_S)
            self.store.put(CONFIRMED, self.digest, {"etag": manifest.etag, "at": asked,
                                                    "copied": now if copy else copied}, KEPT_S)
        if copy:
            self._store_content(manifest)
        return False

    def expire(self) -> None:
        """Let no worker take the copy without asking the gateway first (it stays the fallback), nor
        record an answer to a question asked before now (it would be older than the news)."""
        with self._writing() as turn:
            if turn:
                confirmed = self.store.get(CONFIRMED, self.digest) or {"etag": None, "copied": 0.0}
                self.store.put(CONFIRMED, self.digest, {**confirmed, "at": self.clock(), "expired": True}, KEPT_S)

    @contextlib.contextmanager
    def _writing(self) -> Iterator[bool]:
        """This worker's turn to read and write the confirmation (waiting a moment while another
        worker has it), so that nothing comes between the read and the write; ``False``: no turn
        (the store fails, or the holder died): nothing is written this time."""
        deadline = time.monotonic() + WRITE_WAIT_S
        while not (turn := self.store.add(WRITING, self.digest, os.getpid(), WRITE_HELD_S)):
            if time.monotonic() >= deadline:
                break
            time.sleep(LOOK_AGAIN_S)
        try:
            yield turn
        finally:
            if turn:
                self.store.delete(WRITING, self.digest)

    def claim(self, seconds: float) -> bool:
        """Become the worker that asks the gateway (for ``seconds`` at most); False: another one is."""
        return self.store.add(FETCHING, self.digest, os.getpid(), seconds)

    def release(self) -> None:
        """No longer the worker that asks the gateway: now, or once the content it is writing is stored."""
        with self._lock:
            if self._writes:
                self._release_when_written = True
                return
        self.store.delete(FETCHING, self.digest)

    def fetching(self) -> bool:
        return self.store.get(FETCHING, self.digest) is not None
