"""The instance store: what the workers of one instance agree on, in one SQLite file (or in memory)."""

import inspect
import multiprocessing
import os
import stat
import time

import pytest

from colabhive_mcp.settings.config import ConfigError
from colabhive_mcp.store import expiries
from colabhive_mcp.store.interface import InstanceStore, Marked, per_minute_wait
from colabhive_mcp.store.memory import MemoryStore
from colabhive_mcp.store.sqlite import SqliteStore, open_store

from ..support.clock import FakeClock
from ..support.forked import holding


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture(params=["memory", "sqlite"])
def store(request, tmp_path, clock):
    made = (MemoryStore(max_entries=50, clock=clock) if request.param == "memory"
            else SqliteStore(str(tmp_path / "i.db"), 50, clock=clock))
    yield made
    made.close()


def test_values_come_back_until_they_expire(store, clock):
    store.put("calls", "k", {"invocation": "inv_1", "state": "running"}, ttl=30)
    assert store.get("calls", "k") == {"invocation": "inv_1", "state": "running"}
    assert store.get("other", "k") is None and store.get("calls", "nope") is None
    clock.advance(29)
    assert store.get("calls", "k") == {"invocation": "inv_1", "state": "running"}
    clock.advance(1)
    assert store.get("calls", "k") is None


def test_bytes_are_kept_as_they_are_beside_json_values(store, clock):
    """A megabyte of encoded list is stored as its bytes (a blob): not escaped into JSON text and read
    back out of it; a JSON string that looks like bytes stays a string."""
    raw = b'{"count":2}\n[{"name":"a\\"b"},{"name":"\xc3\xa9"}]' + bytes(range(256))
    assert store.put("lists", "k", raw, ttl=30) and store.add("lists", "other", b"", ttl=30)
    assert store.get("lists", "k") == raw and type(store.get("lists", "k")) is bytes
    assert store.get("lists", "other") == b""
    store.put("lists", "text", "b'abc'", ttl=30)
    assert store.get("lists", "text") == "b'abc'"


def test_add_stores_only_what_is_not_there_yet(store, clock):
    assert store.add("used", "state-1", True, ttl=10) is True
    assert store.add("used", "state-1", True, ttl=10) is False  # single use
    store.delete("used", "state-1")
    assert store.add("used", "state-1", True, ttl=5) is True
    clock.advance(4)
    assert store.add("used", "state-1", True, ttl=10) is False
    clock.advance(1)
    assert store.add("used", "state-1", True, ttl=10) is True  # an expired entry does not count


def test_the_store_stays_within_its_size(store, tmp_path):
    for i in range(300):
        store.put("calls", f"k{i}", i, ttl=60 + i)
    if isinstance(store, SqliteStore):
        store._sweep(store._connect())  # (normally every PURGE_EVERY writes)
    kept = [i for i in range(300) if store.get("calls", f"k{i}") is not None]
    assert len(kept) <= 50 and 299 in kept  # the soonest to expire went first


def test_a_mark_is_used_once_per_generation_until_it_expires(store, clock):
    assert store.mark("used", "code", ttl=10) is Marked.FIRST
    assert store.mark("used", "code", ttl=10) is Marked.AGAIN
    assert store.mark("used", "grant", ttl=10, generation=1) is Marked.FIRST  # (unknown: any generation)
    assert store.mark("used", "grant", ttl=10, generation=2) is Marked.FIRST
    assert [store.mark("used", "grant", ttl=10, generation=g) for g in (0, 1, 2)] == [Marked.AGAIN] * 3
    clock.advance(10)
    assert store.mark("used", "code", ttl=10) is Marked.FIRST  # expired: the key is free again


def test_marks_are_never_let_go_for_room_a_full_store_refuses_new_ones(store, clock):
    """What a churning client did to single-use markers kept as ordinary values: pushed them out."""
    assert store.mark("used", "victim", ttl=5) is Marked.FIRST  # the soonest to expire of all
    assert store.mark("used", "churner", ttl=600) is Marked.FIRST
    for i in range(300):  # values churn far past the store's size, and a grant's generations too
        store.put("calls", f"k{i}", i, ttl=60 + i)
        assert store.mark("used", "churner", ttl=600, generation=i + 1) is Marked.FIRST
    if isinstance(store, SqliteStore):
        store._sweep(store._connect())
    assert store.mark("used", "victim", ttl=5) is Marked.AGAIN
    assert [store.mark("used", f"m{i}", ttl=30) for i in range(48)] == [Marked.FIRST] * 48
    assert store.mark("used", "one more", ttl=30) is Marked.FULL  # 50 live marks: a new one is refused
    assert store.mark("used", "victim", ttl=5) is Marked.AGAIN  # never forgotten to make room
    assert store.mark("used", "churner", ttl=600, generation=301) is Marked.FIRST  # a mark held goes on
    clock.advance(5)  # the victim's mark expires: room for one
    assert store.mark("used", "one more", ttl=30) is Marked.FIRST
    assert store.mark("used", "and another", ttl=30) is Marked.FULL


def _writer(path, key):
    SqliteStore(path).put("shared", key, {"from": os.getpid()}, ttl=60)


def test_the_workers_of_an_instance_see_each_others_entries_and_nobody_else_can_read_them(tmp_path):
    path = str(tmp_path / "instance.db")
    store = SqliteStore(path)
    workers = [multiprocessing.get_context("fork").Process(target=_writer, args=(path, f"w{i}")) for i in range(3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(10)
    assert all(store.get("shared", f"w{i}")["from"] == workers[i].pid for i in range(3))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / expiries.FILE_NAME).st_mode) == 0o600


def test_a_read_of_a_key_no_live_entry_can_be_under_asks_no_database(tmp_path, clock):
    store = SqliteStore(str(tmp_path / "instance.db"), clock=clock)
    queries = []
    store._connect().set_trace_callback(queries.append)
    assert store.get("calls", "never stored") is None and queries == []  # the tool call's usual case
    store.put("calls", "k", {"invocation": "inv_1"}, ttl=30)
    queries.clear()
    assert store.get("calls", "k") == {"invocation": "inv_1"} and len(queries) == 1
    store.delete("calls", "k")
    assert store.get("calls", "k") is None  # deleted: its slot still says look, and the query finds nothing
    clock.advance(31)
    queries.clear()
    assert store.get("calls", "k") is None and queries == []  # past every expiry under the slot
    assert store.add("used", "state", True, ttl=5) and not store.add("used", "state", True, ttl=5)
    assert store.get("used", "state") is True


@pytest.mark.parametrize("damage", ["deleted", "another layout"])
def test_entries_written_before_the_expiries_existed_are_still_found(tmp_path, damage):
    path = str(tmp_path / "instance.db")
    old = SqliteStore(path)
    old.put("calls", "kept", {"invocation": "inv_1"}, ttl=600)
    old.close()
    table = tmp_path / expiries.FILE_NAME
    if damage == "deleted":  # as after an upgrade from a release without them
        table.unlink()
    else:
        table.write_bytes(b"\xff" * 100)
    assert SqliteStore(path).get("calls", "kept") == {"invocation": "inv_1"}


def test_a_file_that_is_not_a_database_is_moved_aside_and_a_missing_directory_stops_the_start(tmp_path, warnings):
    (tmp_path / "instance.db").write_bytes(b"this is not a database" * 100)
    store = open_store(str(tmp_path))
    assert store.add("calls", "k", 1, ttl=10) and store.get("calls", "k") == 1
    assert [p.read_bytes()[:22] for p in tmp_path.glob("instance.db.corrupt-*")] == [b"this is not a database"]
    assert warnings == ["store.set_aside"]
    with pytest.raises(ConfigError, match="no/such/dir: No such file or directory"):
        open_store(str(tmp_path / "no" / "such" / "dir"))
    assert isinstance(open_store(None), MemoryStore)  # stdio: one process, memory


def test_a_connection_that_goes_away_is_replaced_without_a_word(tmp_path, warnings):
    store = SqliteStore(str(tmp_path / "instance.db"))
    store.put("calls", "before", 1, ttl=10)
    store._db.close()  # the connection goes away under the process
    for i in range(5):
        store.put("calls", f"after{i}", i, ttl=10)
    assert [store.get("calls", f"after{i}") for i in range(5)] == list(range(5))
    assert store.get("calls", "before") == 1 and warnings == []


def test_reservations_are_limited_unreserved_and_expire(store, clock):
    first, second = store.reserve("calls", "key", 2, ttl=60), store.reserve("calls", "key", 2, ttl=30)
    assert first and second and first != second
    assert store.reserve("calls", "key", 2, ttl=60) is None  # both held
    assert store.reserve("calls", "other key", 2, ttl=60)  # keys count apart
    assert store.next_free("calls", "key") == 30
    store.unreserve("calls", "key", first)
    third = store.reserve("calls", "key", 2, ttl=60)
    assert third and store.reserve("calls", "key", 2, ttl=60) is None
    clock.advance(20)
    assert store.next_free("calls", "key") == 10 and store.reserve("calls", "key", 2, ttl=60) is None
    clock.advance(10)  # the second place expires
    assert store.reserve("calls", "key", 2, ttl=60)


def test_a_per_minute_limit_counts_until_it_is_full_then_says_how_long_to_wait(store, clock):
    assert [per_minute_wait(store, "started", "key", 2) for _ in range(2)] == [None, None]
    clock.advance(15)
    assert per_minute_wait(store, "started", "key", 2) == 45  # until the first leaves the minute
    assert per_minute_wait(store, "started", "other key", 2) is None
    clock.advance(45)
    assert per_minute_wait(store, "started", "key", 2) is None
    assert all(per_minute_wait(store, "started", "unlimited", 0) is None for _ in range(100))
    assert store.next_free("started", "unlimited") == 0  # a limit of 0 counts nothing


def _hold(path, count, ready):
    store = SqliteStore(path)
    for _ in range(count):
        assert store.reserve("calls", "key", 3, ttl=3600)
    ready.set()
    time.sleep(3600)


def test_reservations_are_counted_across_processes_and_a_dead_process_gives_its_places_back(tmp_path):
    path = str(tmp_path / "instance.db")
    with holding(_hold, path, 2):
        store = SqliteStore(path)
        assert store.reserve("calls", "key", 3, ttl=60)  # the third of three
        assert store.reserve("calls", "key", 3, ttl=60) is None  # the other process holds two
    assert store.reserve("calls", "key", 3, ttl=60) and store.reserve("calls", "key", 3, ttl=60)  # its two are free
    assert store.reserve("calls", "key", 3, ttl=60) is None


def test_both_stores_offer_the_instance_store_interface_as_it_is_written():
    members = [name for name in vars(InstanceStore) if not name.startswith("_")]
    assert {"get", "reserve", "acquire", "close"} <= set(members)
    for made in (MemoryStore, SqliteStore):
        assert made.shared is (made is SqliteStore)
        for name in members:
            assert inspect.signature(getattr(made, name)) == inspect.signature(getattr(InstanceStore, name)), name


def test_held_counts_the_live_reservations_under_a_key(store, clock):
    assert store.held("calls", "key") == 0
    store.reserve("calls", "key", 5, ttl=10)
    store.reserve("calls", "key", 5, ttl=20)
    store.reserve("calls", "other", 5, ttl=20)
    assert store.held("calls", "key") == 2
    clock.advance(10)
    assert store.held("calls", "key") == 1  # (one expired)
