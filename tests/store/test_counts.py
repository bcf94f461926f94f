"""Counts shared by the processes of an instance: the places a key holds, in a mapped file."""

import multiprocessing
import os
import stat
import time

import pytest
from loguru import logger

from colabhive_mcp.store import counts
from colabhive_mcp.store.counts import MemoryCounts, SharedCounts, open_counts

from ..support.forked import holding
from ..support.waiting import wait_until


@pytest.fixture(params=["memory", "shared"])
def table(request, tmp_path):
    made = MemoryCounts() if request.param == "memory" else SharedCounts(str(tmp_path / counts.FILE_NAME))
    yield made
    made.close()


def test_a_key_holds_at_most_its_limit_and_places_released_are_free(table):
    assert table.acquire("calls", "key", 2) and table.acquire("calls", "key", 2)
    assert not table.acquire("calls", "key", 2)  # both held
    assert table.acquire("calls", "other key", 2) and table.acquire("streams", "key", 2)  # keys and spaces count apart
    table.release("calls", "key")
    assert table.acquire("calls", "key", 2) and not table.acquire("calls", "key", 2)
    for _ in range(3):  # more given back than taken frees nothing more
        table.release("calls", "key")
    assert table.acquire("calls", "key", 1) and not table.acquire("calls", "key", 1)


def _hold(path, count, ready):
    table = SharedCounts(path)
    for _ in range(count):
        assert table.acquire("calls", "key", 3)
    ready.set()
    time.sleep(3600)


def test_places_are_counted_across_processes_and_a_dead_process_gives_its_places_back(tmp_path):
    path = str(tmp_path / counts.FILE_NAME)
    table = SharedCounts(path)  # opened before the fork, as a gunicorn worker inherits it
    with holding(_hold, path, 2):
        assert table.acquire("calls", "key", 3)  # the third of three
        assert not table.acquire("calls", "key", 3)  # the other process holds two
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert table.acquire("calls", "key", 3) and table.acquire("calls", "key", 3)  # its two are free
    assert not table.acquire("calls", "key", 3)


def _acquire_and_hold(path, results, done):
    table = SharedCounts(path)
    results.put([table.acquire("calls", "key", 4) for _ in range(3)])
    done.wait(30)  # every taker holds what it took until all have reported


def test_processes_taking_at_once_never_hold_more_than_the_limit(tmp_path):
    path = str(tmp_path / counts.FILE_NAME)
    context = multiprocessing.get_context("fork")
    results, done = context.Queue(), context.Event()
    takers = [context.Process(target=_acquire_and_hold, args=(path, results, done)) for _ in range(4)]
    for taker in takers:
        taker.start()
    try:
        taken = sum(sum(results.get(timeout=30)) for _ in takers)
    finally:
        done.set()
        for taker in takers:
            taker.join(10)
    assert taken == 4


def _acquire_and_exit(path, ready):
    assert SharedCounts(path).acquire("calls", "key", 2)
    ready.set()


def test_a_process_that_exited_holds_nothing_even_before_it_is_reaped(tmp_path):
    path = str(tmp_path / counts.FILE_NAME)
    table = SharedCounts(path)
    context = multiprocessing.get_context("fork")
    ready = context.Event()
    taker = context.Process(target=_acquire_and_exit, args=(path, ready))
    taker.start()
    assert ready.wait(10)
    assert wait_until(lambda: b") Z " in open(f"/proc/{taker.pid}/stat", "rb").read(), every=0.01)  # exited, not yet reaped
    assert table.acquire("calls", "key", 2) and table.acquire("calls", "key", 2)
    taker.join(10)


def test_a_row_left_by_an_earlier_process_with_the_same_pid_counts_for_nothing(tmp_path):
    table = SharedCounts(str(tmp_path / counts.FILE_NAME))
    table._start -= 1  # an earlier process with this pid (it started before this one) takes two
    assert table.acquire("calls", "key", 2) and table.acquire("calls", "key", 2)
    table._start += 1  # this process, its real start time: those rows are another's, and it is gone
    assert table.acquire("calls", "key", 2) and table.acquire("calls", "key", 2) and not table.acquire("calls", "key", 2)


@pytest.mark.slow
def test_rows_of_keys_long_gone_are_cleared_and_held_places_survive_it(tmp_path):
    table = SharedCounts(str(tmp_path / counts.FILE_NAME))
    for _ in range(3):
        assert table.acquire("calls", "busy key", 3)

    def rows_in_use():
        with table._locked() as mapped:
            return counts.HEADER.unpack_from(mapped, 0)[2]

    most = index = 0
    while rows_in_use() >= most:  # key after key, until the table is compacted
        most = rows_in_use()
        assert table.acquire("calls", f"key {index}", 1)
        table.release("calls", f"key {index}")
        index += 1
        assert index < counts.ROWS * 2
    assert most == counts.ROWS // 2 and rows_in_use() < 10  # the held ones, and the latest
    assert not table.acquire("calls", "busy key", 3)  # still three held
    table.release("calls", "busy key")
    assert table.acquire("calls", "busy key", 3)


def test_a_file_of_another_layout_starts_afresh(tmp_path):
    path = tmp_path / counts.FILE_NAME
    path.write_bytes(b"something else" * 100)
    table = open_counts(str(tmp_path))
    assert isinstance(table, SharedCounts) and path.stat().st_size == counts.SIZE
    assert table.acquire("calls", "key", 1) and not table.acquire("calls", "key", 1)


def test_counts_that_cannot_be_opened_are_none_with_a_warning(tmp_path):
    seen = []
    handler = logger.add(lambda message: seen.append(message.record["message"]), level="WARNING")
    try:
        assert open_counts(str(tmp_path / "no" / "such" / "dir")) is None  # the store counts in its places
    finally:
        logger.remove(handler)
    assert seen == ["counts.unavailable"]
