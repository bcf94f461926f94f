"""The instance store when its database or its files fail: it fails closed and never splits the
workers' state (a confirmation used once, limits counted once), and a full or cut-short filesystem
costs a warning, never a worker (SIGBUS)."""

import concurrent.futures
import contextlib
import multiprocessing
import os
import sqlite3
import subprocess
import threading
import time

import pytest

from colabhive_mcp.catalog.tools import Tool
from colabhive_mcp.protocol.confirm import RequestStates
from colabhive_mcp.store import counts, expiries, sqlite
from colabhive_mcp.store.counts import PlacesCounts
from colabhive_mcp.store.interface import Marked
from colabhive_mcp.store.sqlite import SqliteStore, open_store

from ..support.forked import holding
from ..support.http_client import modern
from ..support.http_server import HttpServer

pytestmark = pytest.mark.slow

TOOL = Tool("crm-create-contact", {"name": "crm-create-contact"}, {})
ARGUMENTS = {"name": "Ada"}
CONTACT = {"name": "Ada", "email": "ada@example.com"}


@pytest.fixture
def quick_locks(monkeypatch):
    """A lock held for a tenth of a second outlasts one attempt (5 s in production), not three."""
    connect = sqlite3.connect
    monkeypatch.setattr(sqlite3, "connect", lambda *args, **kwargs: connect(*args, **{**kwargs, "timeout": 0.05}))
    monkeypatch.setattr(sqlite, "RETRY_S", 0.2)


@contextlib.contextmanager
def locked(path):
    """Another process's write lock on the database (as a long transaction or a backup holds it)."""
    locker = sqlite3.connect(path, isolation_level=None)
    locker.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        locker.execute("ROLLBACK")
        locker.close()


def test_a_lock_that_outlasts_one_attempt_lets_a_used_confirmation_run_once_on_three_workers(
        tmp_path, quick_locks, warnings):
    path = str(tmp_path / "instance.db")
    workers = [SqliteStore(path) for _ in range(3)]  # one connection each, as each worker has its own
    state = RequestStates("secret", workers[0]).issue("key", TOOL, ARGUMENTS)
    accepted = []
    with locked(path):
        replays = [threading.Thread(target=lambda worker=worker: accepted.append(
            RequestStates("secret", worker).valid(state, "key", TOOL, ARGUMENTS))) for worker in workers]
        for replay in replays:
            replay.start()
        time.sleep(0.2)  # each worker's first attempt has given up by now
    for replay in replays:
        replay.join(10)
    assert sorted(accepted) == [False, False, True]  # (with a worker's own memory after a failure: three)
    assert warnings == []  # the attempts after the lock went succeeded


def test_while_the_database_stays_locked_confirmations_and_places_are_refused_with_one_warning_per_worker(
        tmp_path, quick_locks, warnings):
    path = str(tmp_path / "instance.db")
    workers = [SqliteStore(path) for _ in range(2)]
    with locked(path):
        for worker in workers:
            for _ in range(3):
                assert worker.add("used-states", "state", True, 60) is False  # as if used: refused
                assert worker.reserve("started", "key", 5, 60) is None  # a limit full, not one per worker
                assert worker.put("sessions", "s", {"ended": True}, 60) is False
        assert warnings == ["store.failed", "store.failed"]
    assert [worker.add("used-states", "state", True, 60) for worker in workers] == [True, False]
    assert warnings == ["store.failed", "store.failed"]  # (and "store.recovered", at info)


def fail(_store):
    raise sqlite3.OperationalError("disk I/O error")


def test_a_store_that_cannot_be_read_answers_what_refuses(tmp_path, monkeypatch, warnings):
    workers = [SqliteStore(str(tmp_path / "instance.db")) for _ in range(2)]
    for worker in workers:
        assert worker.put("sessions", "s", {"ended": True}, 60) and worker.reserve("started", "key", 2, 60)
    monkeypatch.setattr(SqliteStore, "_connect", fail)
    for worker in workers:
        assert worker.get("sessions", "s") is None  # what most readers take as "not there": refusing
        assert worker.get("sessions", "s", failed={"ended": True}) == {"ended": True}  # a session's end
        assert worker.add("used-states", "state", True, 60) is False
        assert worker.mark("used-states", "state", 60) is Marked.FAILED  # its callers refuse, saying why
        assert worker.reserve("started", "key", 5, 60) is None
        assert worker.next_free("started", "key") == sqlite.WAIT_WHEN_FAILED_S
        assert worker.held("started", "key") == sqlite.HELD_WHEN_FAILED  # a limit looked at is full
        assert worker.put("calls", "k", 1, 60) is False
        worker.delete("calls", "k")
        worker.unreserve("started", "key", "place")
    assert warnings == ["store.failed", "store.failed"]  # one per worker, not one per operation


def _open_and_add(directory, go, results):
    go.wait(10)
    results.put(open_store(directory).add("used-states", "state", True, 60))


def test_workers_starting_on_a_corrupt_database_move_it_aside_once_and_share_a_fresh_one(tmp_path):
    (tmp_path / "instance.db").write_bytes(b"garbage " * 1000)
    context = multiprocessing.get_context("spawn")  # fresh processes: they log, and a fork could inherit a held log lock
    go, results = context.Event(), context.Queue()
    workers = [context.Process(target=_open_and_add, args=(str(tmp_path), go, results)) for _ in range(3)]
    for worker in workers:
        worker.start()
    go.set()
    added = sorted(results.get(timeout=30) for _ in workers)
    for worker in workers:
        worker.join(10)
    assert added == [False, False, True]  # (each in its own memory: three)
    assert len(list(tmp_path.glob("instance.db.corrupt-*"))) == 1


# -- a full filesystem, a file cut short ------------------------------------------------------------

@pytest.fixture
def small_filesystem(tmp_path):
    """``size`` bytes of filesystem (a tmpfs), private to this user; unmounted at the end."""
    mounted = []

    def mount(size):
        directory = tmp_path / f"fs{len(mounted)}"
        directory.mkdir(mode=0o700)
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(directory)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.strip()}")
        mounted.append(directory)
        return str(directory)

    yield mount
    for directory in mounted:
        subprocess.run(["umount", str(directory)], check=True)


def _acquire_and_hold(directory, results, ready):
    instance = open_store(directory)
    results.put((type(instance._counts).__name__, instance.acquire("calls", "key", 1)))
    ready.set()
    time.sleep(3600)


def _acquire(directory, results):
    results.put(open_store(directory).acquire("calls", "key", 1))


def test_workers_on_a_filesystem_too_full_for_the_counts_still_count_across_the_instance(small_filesystem):
    directory = small_filesystem(1 << 20)  # room for the database, not for counts.bin (2 MiB)
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    with holding(_acquire_and_hold, directory, results):
        assert results.get(timeout=10) == ("PlacesCounts", True)  # (a sparse counts.bin: SIGBUS, over and over)
        second = context.Process(target=_acquire, args=(directory, results))
        second.start()
        second.join(30)
        assert second.exitcode == 0 and results.get(timeout=10) is False  # the first worker holds the place


def test_counts_kept_in_places_are_released_and_refused_while_the_store_fails(tmp_path, monkeypatch):
    instance = SqliteStore(str(tmp_path / "instance.db"))
    places = PlacesCounts(instance)
    assert places.acquire("calls", "key", 2) and places.acquire("calls", "key", 2) and not places.acquire("calls", "key", 2)
    places.release("calls", "key")
    assert places.acquire("calls", "key", 2) and not places.acquire("calls", "key", 2)
    monkeypatch.setattr(SqliteStore, "_connect", fail)
    places.release("calls", "key")  # lost with the store: the place expires with its process
    assert not places.acquire("calls", "other key", 2)


def _serve(path, commands, answers):
    """A worker holding the store's files mapped, serving what it is asked until told to stop."""
    instance = SqliteStore(path)
    while (command := commands.get(timeout=30)) != "stop":
        taken = instance.acquire("calls", command, 1)
        instance.release("calls", command)
        instance.put("calls", command, {"invocation": command}, 60)
        answers.put((taken, instance.get("calls", command), instance.get("calls", "first")))


@pytest.mark.parametrize("cut", [counts.FILE_NAME, expiries.FILE_NAME])
def test_a_worker_keeps_serving_when_a_file_it_maps_is_cut_short(tmp_path, cut):
    path = str(tmp_path / "instance.db")
    context = multiprocessing.get_context("fork")
    commands, answers = context.Queue(), context.Queue()
    worker = context.Process(target=_serve, args=(path, commands, answers))
    worker.start()
    try:
        commands.put("first")
        assert answers.get(timeout=10) == (True, {"invocation": "first"}, {"invocation": "first"})
        os.truncate(tmp_path / cut, 0)
        for name in ("second", "third"):  # (touching a page past the end: SIGBUS, the worker gone)
            commands.put(name)
            assert answers.get(timeout=10) == (True, {"invocation": name}, {"invocation": "first"})
        commands.put("stop")
        worker.join(10)
        assert worker.exitcode == 0
    finally:
        worker.kill()
    assert os.path.getsize(tmp_path / cut) == (counts.SIZE if cut == counts.FILE_NAME else expiries.SIZE)


def test_slots_cut_short_and_grown_again_with_zeros_still_say_look(tmp_path):
    instance = SqliteStore(str(tmp_path / "instance.db"))
    instance.put("sessions", "s", {"ended": True}, 600)
    table = tmp_path / expiries.FILE_NAME
    os.truncate(table, 0)
    os.truncate(table, expiries.SIZE)  # the size is right again, every slot zero
    assert instance.get("sessions", "s") == {"ended": True}  # (zero as "expired long ago": None, a session revived)


# -- what the store's callers make of it ----------------------------------------------------------

@pytest.fixture
def hosted_app(sandbox, tmp_path):
    """The hosted app in this process (its store in ``tmp_path``), and a session to end."""
    from werkzeug.test import Client

    from colabhive_mcp.sandbox import DEMO_KEY
    from colabhive_mcp.settings.config import Config
    from colabhive_mcp.transports.http.app import create_app

    client = Client(create_app(Config(api_url=sandbox.url, session_secret="s" * 64, runtime_dir=str(tmp_path))))
    headers = {"Authorization": f"Bearer {DEMO_KEY}", "Accept": "application/json, text/event-stream"}

    def request(method, body=None, session=None):
        extra = {"Mcp-Session-Id": session} if session else {}
        return client.open("/mcp", method=method, json=body, headers={**headers, **extra})

    def session():
        opened = request("POST", {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
        request("POST", {"jsonrpc": "2.0", "method": "notifications/initialized"}, opened.headers["Mcp-Session-Id"])
        return opened.headers["Mcp-Session-Id"]

    return request, session


def ping(request, session):
    return request("POST", {"jsonrpc": "2.0", "id": 2, "method": "ping"}, session).status_code


def test_an_ended_session_stays_ended_while_the_store_cannot_be_read(hosted_app, monkeypatch):
    request, session = hosted_app
    ended = session()
    assert request("DELETE", session=ended).status_code == 204 and ping(request, ended) == 404
    monkeypatch.setattr(SqliteStore, "_connect", fail)
    assert ping(request, ended) == 404  # (the failure read as "nothing stored": the session lives again)


def test_a_session_the_store_cannot_end_now_is_not_said_to_be_ended(hosted_app, tmp_path, quick_locks):
    request, session = hosted_app
    live = session()
    with locked(str(tmp_path / "instance.db")):  # reads go on, writes fail
        assert request("DELETE", session=live).status_code == 503
    assert ping(request, live) == 200  # not ended: the client was told so, and may try again


def _lock_for(path, seconds, ready):
    with locked(path):
        ready.set()
        time.sleep(seconds)


@pytest.mark.parametrize("trouble", ["garbage", "locked"])
def test_through_the_server_a_confirmation_runs_once_whatever_its_database_does(gateway_sandbox, sandbox, journal,
                                                                                 tmp_path, trouble):
    """Real gunicorn, two workers: on an instance.db that is garbage at start, or locked for 3 s while
    a used confirmation is replayed twelve times at once, the tool runs once."""
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    database = runtime / "instance.db"
    if trouble == "garbage":
        database.write_bytes(b"garbage " * 1000)
        database.chmod(0o600)
    server = HttpServer(gateway_sandbox.url, "--http-workers", "2", env={
        "COLABHIVE_RUNTIME_DIR": str(runtime), "COLABHIVE_CONFIRM_SIDE_EFFECTS": "require"})
    try:
        caps = {"io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}
        asked = modern(server.url, "tools/call", {"name": "crm-create-contact", "arguments": CONTACT,
                                                  "_meta": caps}).json()["result"]
        yes = {"name": "crm-create-contact", "arguments": CONTACT, "_meta": caps, "requestState": asked["requestState"],
               "inputResponses": {"confirm": {"action": "accept", "content": {"confirm": True}}}}
        with holding(_lock_for, str(database), 3.0) if trouble == "locked" else contextlib.nullcontext():
            with concurrent.futures.ThreadPoolExecutor(12) as pool:
                answers = list(pool.map(lambda _: modern(server.url, "tools/call", yes), range(12)))
        assert all(a.status_code == 200 for a in answers), [a.text[:300] for a in answers]
        results = [a.json()["result"] for a in answers]
        assert [r.get("resultType") for r in results].count("complete") >= 1, results
        assert [e["slug"] for e in journal("invoke")] == ["crm-create-contact"]
        if trouble == "garbage":
            assert len([f for f in os.listdir(runtime) if ".corrupt" in f]) == 1  # moved aside once, not per worker
    finally:
        server.stop()
