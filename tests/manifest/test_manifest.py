"""The manifest cache against the sandbox and stub gateways: TTL, 304 revalidation, single flight, stale copies,
pins, and answers recorded in the order they were asked."""

import json
import threading
import time

import pytest
import responses

from colabhive_mcp.gateway.client import Gateway, ManifestDocument
from colabhive_mcp.keys import ApiKey, KeyRejected
from colabhive_mcp.manifest.cache import SOON_S, ManifestCache
from colabhive_mcp.manifest.instance_copy import CONTENTS, COPIES, KEPT_S, PARTS, WRITING, InstanceCopy
from colabhive_mcp.manifest.version import Manifest, ManifestError, load_snapshot
from colabhive_mcp.sandbox import DEMO_KEY
from colabhive_mcp.store.memory import MemoryStore
from colabhive_mcp.store.sqlite import SqliteStore


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


@pytest.fixture
def gateway(sandbox):
    gateway = Gateway(sandbox.url, ApiKey.of(DEMO_KEY), retries=0)
    yield gateway
    gateway.close()


def now(write):
    """Write a new manifest's content at once (the tests here are of what is recorded, not of when)."""
    write()


def first_pages(journal):
    return [e for e in journal("manifest") if e["cursor"] is None]


@responses.activate
def test_a_manifest_read_whole_and_unchanged_stays_the_same_manifest():
    """A gateway without one ETag for the whole manifest is read whole every TTL: unless what it says
    changed, the manifest held is kept (a client is told of no change that is not one)."""
    url = "https://gw.test/api/builder/v1/mcp/manifest"
    responses.get(url, json={"tools": [{"name": "a"}], "nextCursor": None})  # no ETag
    clock = Clock()
    cache = ManifestCache(Gateway("https://gw.test/api/builder/v1", ApiKey.of(DEMO_KEY), retries=0), ttl=1, clock=clock)
    first = cache.get()
    clock.now += 2
    assert cache.get() is first and len(responses.calls) == 2
    responses.replace(responses.GET, url, json={"tools": [{"name": "a"}, {"name": "b"}], "nextCursor": None})
    clock.now += 2
    changed = cache.get()
    assert changed is not first and [e["name"] for e in changed.entries] == ["a", "b"]


def test_ttl_then_conditional_get_reuses_the_copy(sandbox, gateway, journal):
    clock = Clock()
    cache = ManifestCache(gateway, ttl=60, clock=clock)
    manifest = cache.get()
    assert len(manifest.entries) > 10 and manifest.etag
    pages = len(journal("manifest"))
    assert pages > 1  # the sandbox pages 4 entries at a time: all pages were read
    clock.now += 30
    assert cache.get() is manifest and len(journal("manifest")) == pages  # fresh: no request
    clock.now += 31
    assert cache.get() is manifest  # 304: the same object is reused
    last = journal("manifest")[-1]
    assert last["status"] == 304 and last["if_none_match"] == manifest.etag


def test_a_changed_manifest_is_picked_up_on_revalidation(sandbox, gateway):
    clock = Clock()
    cache = ManifestCache(gateway, ttl=1, clock=clock)
    old = cache.get()
    sandbox.add_action({"name": "brand-new", "description": "new", "inputSchema": {"type": "object"},
                        "sideEffects": [], "kind": "tool"})
    clock.now += 2
    new = cache.get()
    assert new.etag != old.etag and "brand-new" in new.by_slug


def test_many_threads_on_a_cold_cache_cause_one_fetch(sandbox, gateway, journal):
    sandbox.faults.add(route="manifest", kind="latency", seconds=0.3, count=1)
    cache = ManifestCache(gateway, ttl=60)
    barrier = threading.Barrier(100)
    results = []

    def ask():
        barrier.wait()
        results.append(cache.get())

    threads = [threading.Thread(target=ask) for _ in range(100)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 100 and len({id(m) for m in results}) == 1
    assert len(first_pages(journal)) == 1


def test_a_stale_copy_is_served_while_the_gateway_is_down(sandbox, gateway, journal):
    clock = Clock()
    cache = ManifestCache(gateway, ttl=10, clock=clock)
    manifest = cache.get()
    sandbox.faults.add(route="manifest", kind="status", status=503, count=None)
    clock.now += 11
    assert cache.get() is manifest
    requests_while_down = len(first_pages(journal))
    clock.now += 1
    assert cache.get() is manifest and len(first_pages(journal)) == requests_while_down  # no hammering
    sandbox.faults.clear()
    clock.now += 10
    assert cache.get() is manifest and first_pages(journal)[-1]["status"] == 304


def test_while_the_gateway_is_down_every_worker_serves_the_instances_newest_copy(sandbox, gateway):
    store = MemoryStore()
    digest = ApiKey.of(DEMO_KEY).digest
    first, second = (ManifestCache(gateway, ttl=0, instance=InstanceCopy(store, digest, in_background=now))
                     for _ in range(2))
    old = first.get()  # the first worker's copy
    sandbox.add_action({"name": "published-now", "description": "new", "inputSchema": {"type": "object"}})
    new = second.get()  # the second worker's, newer
    assert new.etag != old.etag
    sandbox.faults.add(route="manifest", kind="status", status=503, count=None)
    served = first.get()
    assert served.etag == new.etag and "published-now" in served.by_slug  # not its own older copy


def test_the_instances_copy_outlives_its_confirmations(sandbox, gateway):
    clock, store = Clock(), MemoryStore()
    store.clock = clock
    copy = InstanceCopy(store, ApiKey.of(DEMO_KEY).digest, clock=clock, in_background=now)
    manifest = ManifestCache(gateway).get()
    copy.confirm(manifest, changed=True, asked=clock())
    for _ in range(8):  # 304s for hours: the copy itself is written again before it could expire
        clock.now += KEPT_S / 4
        copy.confirm(manifest, changed=False, asked=clock())
        assert copy.load() is not None and copy.load().etag == manifest.etag


def test_keys_holding_one_manifest_have_its_content_stored_once(sandbox, gateway):
    store = MemoryStore()
    manifest, other = ManifestCache(gateway).get(), Manifest(({"name": "other-tool"},), '"other"')
    copies = [InstanceCopy(store, f"key-digest-{i}", in_background=now) for i in range(3)]
    for copy, held in zip(copies, (manifest, manifest, other)):
        assert not copy.confirm(held, changed=True, asked=1.0)
    stored = [key for space, key in store._entries if space == CONTENTS]
    assert sorted(stored) == sorted({manifest.content, other.content})  # once each, whatever the keys
    assert [c.load().digests for c in copies] == [manifest.digests, manifest.digests, other.digests]
    store.put(COPIES, "key-digest-old", {"etag": '"o"', "entries": [{"name": "kept"}]}, 60)  # written whole, before
    assert set(InstanceCopy(store, "key-digest-old").load().by_slug) == {"kept"}


def test_no_worker_serves_the_copy_of_a_key_the_gateway_refuses(sandbox, gateway):
    copy = InstanceCopy(MemoryStore(), ApiKey.of(DEMO_KEY).digest, in_background=now)
    cache = ManifestCache(gateway, ttl=0, instance=copy)
    cache.get()
    assert copy.age() is not None
    sandbox.faults.add(route="manifest", kind="status", status=401, count=None)
    with pytest.raises(KeyRejected):
        cache.get()
    assert copy.age() is None
    with pytest.raises(KeyRejected):
        ManifestCache(gateway, ttl=60, instance=copy).get()  # another worker asks the gateway itself


def test_no_copy_and_no_gateway_is_a_clear_error(sandbox, gateway):
    sandbox.faults.add(route="manifest", kind="status", status=500, count=None,
                       body={"detail": "database on fire"})
    with pytest.raises(ManifestError, match="database on fire"):
        ManifestCache(gateway, ttl=10).get()


def test_a_manifest_that_turns_invalid_keeps_the_last_good_copy(sandbox, gateway):
    clock = Clock()
    cache = ManifestCache(gateway, ttl=1, clock=clock)
    manifest = cache.get()
    sandbox.add_action({"name": "x-new", "description": "d", "inputSchema": {"type": "object"}})  # new ETag
    sandbox.faults.add(route="manifest", kind="garbage", count=None)
    clock.now += 2
    assert cache.get() is manifest


def test_pinning_refuses_a_different_manifest(sandbox, gateway):
    pinned = ManifestCache(gateway).get().etag
    clock = Clock()
    cache = ManifestCache(gateway, ttl=1, pin=pinned, clock=clock)
    manifest = cache.get()
    sandbox.add_action({"name": "sneaky", "description": "d", "inputSchema": {"type": "object"}})
    clock.now += 2
    assert cache.get() is manifest and "sneaky" not in manifest.by_slug
    with pytest.raises(ManifestError, match="pinned"):
        ManifestCache(gateway, pin='"some-other-etag"').get()


def test_a_snapshot_is_served_without_the_gateway(sandbox, gateway, tmp_path, journal):
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps({"tools": [{"name": "only-one"}], "etag": '"snap"'}))
    cache = ManifestCache(gateway, snapshot=load_snapshot(str(path)))
    assert [e["name"] for e in cache.get().entries] == ["only-one"]
    assert journal("manifest") == []
    path.write_text('{"tools": "nope"}')
    with pytest.raises(ManifestError, match="not a list of tool entries"):
        load_snapshot(str(path))


class Publisher:
    """A gateway stub whose manifest is version ``version``; a fetch held by :meth:`hold_next` reads
    the manifest as it stands when asked, then answers only once let go (a slow answer)."""

    timeout, key_id = 1.0, "key-id"

    def __init__(self):
        self.version = 1
        self._held = None

    def hold_next(self):
        """Events: the next fetch has begun; let it answer."""
        self._held = threading.Event(), threading.Event()
        return self._held

    def fetch_manifest(self, etag=None, prepare=None, meanwhile=None, accepted=None):
        if meanwhile is not None:
            meanwhile()
        version, held, self._held = self.version, self._held, None
        if held is not None:
            held[0].set()
            held[1].wait(10)
        if etag == f'"v{version}"':
            return None
        return ManifestDocument(({"name": f"tool-{version}"},), f'"v{version}"', 100)


class Ticking:
    """A wall clock that moves on at each reading, so that no two events are at the same time."""

    def __init__(self):
        self.now = 1.8e9

    def __call__(self):
        self.now += 0.001
        return self.now


def answer_in_thread(cache):
    answered = []
    thread = threading.Thread(target=lambda: answered.append(cache.get()))
    thread.start()
    return thread, answered


def test_while_one_thread_revalidates_an_expired_copy_the_others_serve_it_at_once():
    """A slow gateway holds the revalidation of an expired copy: the tenant's other requests are
    answered from the copy meanwhile (none holds a thread until the gateway answers), and from the
    gateway's answer once it has come."""
    gateway, clock = Publisher(), Clock()
    cache = ManifestCache(gateway, ttl=60, clock=clock)
    assert cache.get().etag == '"v1"'
    clock.now += 61
    gateway.version = 2
    begun, answer = gateway.hold_next()
    thread, answered = answer_in_thread(cache)
    assert begun.wait(5)
    assert cache.get().etag == '"v1"' and not answer.is_set()  # at once, while the gateway is still asked
    answer.set()
    thread.join(10)
    assert answered[0].etag == '"v2"' and cache.get().etag == '"v2"'


def test_a_refresh_since_a_moment_asks_again_unless_a_question_asked_after_it_was_answered():
    class Counting(Publisher):
        asked, rejects = 0, False

        def fetch_manifest(self, etag=None, prepare=None, meanwhile=None, accepted=None):
            self.asked += 1
            if self.rejects:
                raise KeyRejected(401, "revoked")
            return super().fetch_manifest(etag, prepare, meanwhile)

    gateway = Counting()
    cache = ManifestCache(gateway, ttl=60)
    before = time.monotonic()
    assert cache.get().etag == '"v1"' and gateway.asked == 1
    assert cache.refresh(since=before).etag == '"v1"' and gateway.asked == 1  # asked after it: that answer
    gateway.version = 2
    assert cache.refresh(since=time.monotonic()).etag == '"v2"' and gateway.asked == 2  # asked before: again
    assert cache.refresh().etag == '"v2"' and gateway.asked == 3  # by default, always
    gateway.rejects = True
    with pytest.raises(KeyRejected):
        cache.refresh()
    with pytest.raises(KeyRejected):  # a yes to an earlier question does not undo the no
        cache.refresh(since=before)


def test_the_cache_says_when_a_get_would_wait_for_the_gateway():
    """What a single-tenant server holds a place for while the key is checked: the first fetch, and the
    one after a refusal once it is old enough to ask again, not a refusal answered from memory nor a
    held copy."""
    class Refusing(Publisher):
        rejects = False

        def fetch_manifest(self, etag=None, prepare=None, meanwhile=None, accepted=None):
            if self.rejects:
                raise KeyRejected(401, "revoked")
            return super().fetch_manifest(etag, prepare, meanwhile)

    gateway, clock = Refusing(), Clock()
    cache = ManifestCache(gateway, ttl=60, clock=clock, rejection_ttl=30)
    assert cache.asks
    cache.get()
    assert not cache.asks
    clock.now += 61
    gateway.rejects = True
    with pytest.raises(KeyRejected):
        cache.get()
    assert not cache.asks  # the refusal is answered from memory for a while
    clock.now += 31
    assert cache.asks
    gateway.rejects = False
    cache.get()
    assert not cache.asks


@pytest.mark.parametrize("conditional", [False, True])
def test_a_fetch_begun_before_a_refresh_does_not_undo_it(conditional):
    """Worker A asks the gateway (for the whole manifest, or whether its copy is current); an
    action is published and worker B's /refresh gets the news; A's older answer arrives last:
    neither the instance nor A itself goes back to the older manifest."""
    store, gateway, clock, a_clock = MemoryStore(), Publisher(), Ticking(), Clock()
    worker_a, worker_b, worker_c = (ManifestCache(gateway, ttl=60, clock=cache_clock, instance=InstanceCopy(
        store, "digest", clock=clock, in_background=now)) for cache_clock in (a_clock, Clock(), Clock()))
    if conditional:
        assert worker_a.get().etag == '"v1"'
        a_clock.now += 61
        clock.now += 61  # the instance's copy is as old
    begun, answer = gateway.hold_next()
    thread, answered = answer_in_thread(worker_a)
    assert begun.wait(5)
    gateway.version = 2
    assert worker_b.refresh().etag == '"v2"'
    answer.set()
    thread.join(10)
    assert worker_c.get().etag == '"v2"'  # taken from the instance: the refresh's answer
    assert answered[0].etag == '"v2"'


def test_an_older_answer_arriving_during_a_refresh_is_served_only_for_a_moment():
    store, gateway, clock, a_clock = MemoryStore(), Publisher(), Ticking(), Clock()
    worker_a, worker_b = (ManifestCache(gateway, ttl=60, clock=cache_clock, instance=InstanceCopy(
        store, "digest", clock=clock, in_background=now)) for cache_clock in (a_clock, Clock()))
    a_begun, a_answer = gateway.hold_next()
    a_thread, a_answered = answer_in_thread(worker_a)
    assert a_begun.wait(5)
    gateway.version = 2
    b_begun, b_answer = gateway.hold_next()
    refreshed = []
    b_thread = threading.Thread(target=lambda: refreshed.append(worker_b.refresh()))
    b_thread.start()
    assert b_begun.wait(5)
    a_answer.set()
    a_thread.join(10)
    assert a_answered[0].etag == '"v1"'  # nothing newer yet: A serves its own answer...
    b_answer.set()
    b_thread.join(10)
    assert refreshed[0].etag == '"v2"'
    a_clock.now += SOON_S
    assert worker_a.get().etag == '"v2"'  # ...until the refresh's lands, not for a whole TTL


def test_of_two_overlapping_fetches_the_later_begun_one_stays_the_instances_copy():
    """A's slow answer outlives its claim, so worker B asks too and answers first; A's answer, older,
    must not replace B's for the other workers."""
    clock = Clock()
    clock.now = 1.8e9  # a wall clock's time
    store, gateway = MemoryStore(clock=clock), Publisher()
    worker_a, worker_b, worker_c = (ManifestCache(gateway, ttl=60, instance=InstanceCopy(
        store, "digest", clock=clock, in_background=now)) for _ in range(3))
    begun, answer = gateway.hold_next()
    thread, answered = answer_in_thread(worker_a)
    assert begun.wait(5)
    gateway.version = 2
    clock.now += gateway.timeout + 10  # A's claim lapses
    assert worker_b.get().etag == '"v2"'
    answer.set()
    thread.join(10)
    assert worker_c.get().etag == '"v2"'
    assert answered[0].etag == '"v2"'


def test_the_shared_store_records_answers_in_the_order_they_were_asked(tmp_path):
    store = SqliteStore(str(tmp_path / "instance.db"))
    first, second = (InstanceCopy(store, "digest", in_background=now) for _ in range(2))
    old, new = Manifest(({"name": "old"},), '"v1"'), Manifest(({"name": "new"},), '"v2"')
    assert second.confirm(new, changed=True, asked=2000.0) is False
    assert first.confirm(old, changed=True, asked=1000.0) is True  # outdated: not recorded
    assert first.load().etag == '"v2"' and first.age()[0] == '"v2"'
    assert store.get(WRITING, "digest") is None  # the turn to write was given back
    store.put(WRITING, "digest", 12345, 60)  # a worker that died while writing
    assert first.confirm(old, changed=True, asked=3000.0) is False  # no turn: nothing written, no wait past a second
    assert first.load().etag == '"v2"'
    store.close()


def test_a_new_manifests_content_is_written_after_the_answer_and_another_worker_waits_for_it(tmp_path):
    """The worker that fetched a new manifest answers before its megabyte of content is in the instance
    store; a worker that needs it meanwhile waits for it, and does not ask the gateway again."""
    store, gateway, writes = SqliteStore(str(tmp_path / "instance.db")), Publisher(), []
    asked = []
    fetch = gateway.fetch_manifest
    gateway.fetch_manifest = lambda *args: asked.append(args) or fetch(*args)
    worker_a = ManifestCache(gateway, instance=InstanceCopy(store, "digest", in_background=writes.append))
    worker_b = ManifestCache(gateway, instance=InstanceCopy(store, "digest"))
    assert worker_a.get().etag == '"v1"' and len(writes) == 1  # answered, the content not written yet
    thread, answered = answer_in_thread(worker_b)
    thread.join(0.3)
    assert answered == [] and len(asked) == 1  # waiting for it
    writes.pop()()
    thread.join(10)
    assert answered[0].etag == '"v1"' and answered[0].entries == worker_a.get().entries and len(asked) == 1
    store.close()


def test_a_content_is_read_back_from_all_its_parts_or_not_at_all(tmp_path):
    store = SqliteStore(str(tmp_path / "instance.db"))
    big, empty = Manifest(tuple({"name": f"tool-{i}"} for i in range(60)), '"big"'), Manifest((), '"empty"')
    for digest, manifest in (("big-key", big), ("empty-key", empty)):
        InstanceCopy(store, digest, in_background=now).confirm(manifest, changed=True, asked=1.0)
        assert InstanceCopy(store, digest).load().entries == manifest.entries
    store.delete(PARTS, f"{big.content}:1")
    assert InstanceCopy(store, "big-key").load() is None  # never a manifest with a part missing
    store.close()


def test_a_content_the_store_refused_to_write_is_written_by_the_next_copy_that_names_it():
    """A write the store refuses (full, locked) does not mark the content written: the next key whose copy
    names it writes it, and every worker can read it back from then on."""
    class Refusing(MemoryStore):
        refuse = True

        def put(self, space, key, value, ttl):
            return False if self.refuse and space == PARTS else super().put(space, key, value, ttl)

    store = Refusing()
    manifest = Manifest(tuple({"name": f"tool-{i}"} for i in range(30)), '"v1"')
    InstanceCopy(store, "first-key", in_background=now).confirm(manifest, changed=True, asked=1.0)
    assert InstanceCopy(store, "first-key").load() is None
    store.refuse = False
    InstanceCopy(store, "second-key", in_background=now).confirm(manifest, changed=True, asked=2.0)
    assert InstanceCopy(store, "first-key").load().entries == InstanceCopy(store, "second-key").load().entries == manifest.entries


def wait_for(condition, seconds=10.0):
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)
    return condition()


def test_an_expired_copy_is_served_at_once_while_one_revalidation_runs_behind(sandbox, gateway, journal):
    """RFC 5861's stale-while-revalidate: past its TTL, within the window, no list waits on a hung
    gateway; one revalidation asks it, and its news is served once it lands."""
    clock = Clock()
    cache = ManifestCache(gateway, ttl=10, stale_while_revalidate=60, clock=clock)
    manifest = cache.get()
    sandbox.add_action({"name": "published-now", "description": "new", "inputSchema": {"type": "object"}})
    sandbox.faults.add(route="manifest", kind="hang", seconds=2)
    clock.now += 11
    asked = len(first_pages(journal))
    served = [cache.get() for _ in range(5)]  # none of them waits for the hung revalidation
    assert all(copy is manifest for copy in served)
    assert wait_for(lambda: any(e["fault"] == "hang" for e in first_pages(journal)))  # one revalidation asked it
    assert wait_for(lambda: not cache._fetch_lock.locked())  # it failed: the copy is served a while longer
    assert cache.get() is manifest and len(first_pages(journal)) - asked == 1
    clock.now += 6  # past that while: the next list is served the copy again, and revalidates behind
    assert wait_for(lambda: "published-now" in cache.get().by_slug)  # this time the gateway answers
    assert len(first_pages(journal)) - asked == 2


def test_past_the_window_a_list_waits_for_the_gateway_again(sandbox, gateway):
    clock = Clock()
    cache = ManifestCache(gateway, ttl=10, stale_while_revalidate=5, clock=clock)
    manifest = cache.get()
    sandbox.add_action({"name": "published-now", "description": "new", "inputSchema": {"type": "object"}})
    clock.now += 16
    assert "published-now" in cache.get().by_slug and cache.get() is not manifest  # asked before answering


def test_a_worker_without_a_copy_takes_the_instances_and_revalidates_it_behind(sandbox, gateway):
    store = MemoryStore()
    digest = ApiKey.of(DEMO_KEY).digest
    clock = Clock()
    clock.now = time.time()  # (the instance's clock is the wall clock its workers share)
    store.clock = clock
    first = ManifestCache(gateway, ttl=10, stale_while_revalidate=60, clock=clock,
                          instance=InstanceCopy(store, digest, clock=clock, in_background=now))
    held = first.get()
    clock.now += 11  # the instance's copy is past its TTL, within the window
    sandbox.faults.add(route="manifest", kind="hang", seconds=2)
    second = ManifestCache(gateway, ttl=10, stale_while_revalidate=60, clock=clock,
                           instance=InstanceCopy(store, digest, clock=clock, in_background=now))
    started = time.monotonic()
    assert second.get().etag == held.etag and time.monotonic() - started < 1.5  # not the 2 s hang
