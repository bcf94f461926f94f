"""The manifest cache against the sandbox: TTL, 304 revalidation, single flight, stale copies, pins."""

import json
import threading

import pytest

from colabhive_mcp.gateway import Gateway
from colabhive_mcp.keys import ApiKey, KeyRejected
from colabhive_mcp.manifest import KEPT_S, InstanceCopy, ManifestCache, ManifestError, load_snapshot
from colabhive_mcp.sandbox import DEMO_KEY
from colabhive_mcp.store import MemoryStore


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


def first_pages(journal):
    return [e for e in journal("manifest") if e["cursor"] is None]


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
    first, second = (ManifestCache(gateway, ttl=0, instance=InstanceCopy(store, digest)) for _ in range(2))
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
    copy = InstanceCopy(store, ApiKey.of(DEMO_KEY).digest, clock=clock)
    manifest = ManifestCache(gateway).get()
    copy.confirm(manifest, changed=True)
    for _ in range(8):  # 304s for hours: the copy itself is written again before it could expire
        clock.now += KEPT_S / 4
        copy.confirm(manifest, changed=False)
        assert copy.load() is not None and copy.load().etag == manifest.etag


def test_a_key_the_gateway_refuses_is_no_longer_one_the_instance_knows(sandbox, gateway):
    copy = InstanceCopy(MemoryStore(), ApiKey.of(DEMO_KEY).digest)
    cache = ManifestCache(gateway, ttl=0, instance=copy)
    cache.get()
    assert copy.known()
    sandbox.faults.add(route="manifest", kind="status", status=401, count=None)
    with pytest.raises(KeyRejected):
        cache.get()
    assert not copy.known()  # so it counts against cold_fetches_per_minute again


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
