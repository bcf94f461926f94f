"""The cancel relay between workers: bounded whatever clients send, and never stopped by a bad marker."""

import json
import os
import threading
import time

import pytest

from colabhive_mcp.protocol.inflight import id_digest
from colabhive_mcp.transports.http import relay as relay_module
from colabhive_mcp.transports.http.relay import MAX_MARKERS, MAX_PER_KEY, MAX_PER_SESSION, CancelRelay

from ...support.http_server import HttpServer
from ...support.http_client import initialize, post, rpc
from ...support.waiting import wait_until

pytestmark = pytest.mark.slow


class Heard:
    """The cancellations a relay passed on, as (session id, digest, reason)."""

    def __init__(self):
        self.calls = []
        self.changed = threading.Event()

    def __call__(self, session_id, digest, reason):
        self.calls.append((session_id, digest, reason))
        self.changed.set()


def elsewhere(_session_id, _request_id):
    """No request runs in this process: every cancellation is another worker's."""
    return False


def markers(directory):
    return [n for n in os.listdir(directory) if not n.endswith(".tmp")]


@pytest.fixture
def idle(monkeypatch):
    """Relays whose watcher stays asleep: the test looks itself."""
    monkeypatch.setattr(relay_module, "LOOK_EVERY_S", 3600)


def test_a_request_running_here_needs_no_marker(idle, tmp_path):
    relay = CancelRelay(str(tmp_path), Heard(), running=lambda session_id, request_id: request_id == 7)
    relay.publish("k_one", "s", 7, "user")
    assert markers(tmp_path) == []
    relay.publish("k_one", "s", 8, "user")
    assert len(markers(tmp_path)) == 1


def test_a_flood_of_cancellations_is_capped_per_session_and_in_all(idle, tmp_path):
    relay = CancelRelay(str(tmp_path), Heard(), elsewhere)
    for request_id in range(MAX_PER_SESSION * 10):
        relay.publish("k_one", "flooding", request_id, "user")
    assert len(markers(tmp_path)) == MAX_PER_SESSION
    relay.publish("k_one", "another", 1, "user")  # another session is not held back by it
    assert len(markers(tmp_path)) == MAX_PER_SESSION + 1
    for session in range(MAX_MARKERS // MAX_PER_SESSION + 2):  # many sessions of many keys: the directory's cap holds
        for request_id in range(MAX_PER_SESSION):
            relay.publish(f"k_{session}", f"session-{session}", request_id, "user")
    assert len(markers(tmp_path)) == MAX_MARKERS
    other_worker = CancelRelay(str(tmp_path), Heard(), elsewhere)
    other_worker._look()  # it counts what the others wrote
    other_worker.publish("k_one", "fresh", 1, "user")
    assert len(markers(tmp_path)) == MAX_MARKERS


def test_the_sessions_of_one_key_hold_at_most_a_fifth_of_the_directory_across_workers(idle, tmp_path):
    """One key with many sessions cannot crowd out the other keys' cancellations: its markers are capped
    (counted from the directory, so two workers share the count), and another key's still go through."""
    first, second = CancelRelay(str(tmp_path), Heard(), elsewhere), CancelRelay(str(tmp_path), Heard(), elsewhere)
    for session in range(MAX_PER_KEY // MAX_PER_SESSION + 2):
        for request_id in range(MAX_PER_SESSION):
            first.publish("k_greedy", f"greedy-{session}", request_id, "user")
    assert len(markers(tmp_path)) == MAX_PER_KEY
    second._look()  # the other worker counts them
    second.publish("k_greedy", "greedy-new", 1, "user")
    assert len(markers(tmp_path)) == MAX_PER_KEY
    second.publish("k_other", "s", 1, "user")
    first.publish("k_other", "s", 2, "user")
    assert len(markers(tmp_path)) == MAX_PER_KEY + 2


def test_an_unchanged_directory_is_not_read(idle, tmp_path, monkeypatch):
    heard = Heard()
    relay = CancelRelay(str(tmp_path), heard, elsewhere)
    writer = CancelRelay(str(tmp_path), Heard(), elsewhere)
    for request_id in range(20):
        writer.publish("k_one", "s", request_id, "user")
    settled = time.time() - 5
    os.utime(tmp_path, (settled, settled))  # written a while ago
    relay._look()
    assert len(heard.calls) == 20
    scans = []
    real_scandir = os.scandir
    monkeypatch.setattr(os, "scandir", lambda path: scans.append(path) or real_scandir(path))
    for _ in range(10):
        relay._look()
    assert scans == []  # not one file listed, stat'ed or opened
    writer.publish("k_one", "s", 99, "user")  # the directory changes: the next look reads it
    relay._look()
    assert scans and heard.calls[-1] == ("s", id_digest(99), "user")


def test_malformed_markers_do_not_stop_the_relay(tmp_path, monkeypatch):
    monkeypatch.setattr(relay_module, "LOOK_EVERY_S", 0.02)
    heard = Heard()
    CancelRelay(str(tmp_path), heard, elsewhere)
    bad = {
        "garbage": b"\xff\xfe\x00not json at all",
        "not-a-list": b'{"session": "s"}',
        "too-short": b'["s", "0123456789abcdef0123456789abcdef"]',
        "wrong-types": b"[1, 2, 3]",
        "not-a-digest": json.dumps(["s", "x" * 32, None]).encode(),
        "deep": b"[" * 4000,
        "huge": json.dumps(["s", id_digest(1), "r" * 5_000_000]).encode(),
    }
    for name, content in bad.items():
        (tmp_path / name).write_bytes(content)
    time.sleep(0.3)  # the watcher has met every one of them
    CancelRelay(str(tmp_path), Heard(), elsewhere).publish("k_one", "s", 2, "user")  # another worker's cancellation
    assert heard.changed.wait(5), "the relay stopped: a valid marker after bad ones was never relayed"
    assert heard.calls == [("s", id_digest(2), "user")]


def test_a_marker_is_relayed_once_and_removed_when_its_minute_is_up(idle, tmp_path):
    heard = Heard()
    relay = CancelRelay(str(tmp_path), heard, elsewhere)
    CancelRelay(str(tmp_path), Heard(), elsewhere).publish("k_one", "s", 1, None)
    almost = time.time() - relay_module.MARKER_TTL_S + 0.5
    for name in os.listdir(tmp_path):
        os.utime(tmp_path / name, (almost, almost))
    settled = time.time() - 5
    os.utime(tmp_path, (settled, settled))
    relay._look()
    relay._look()
    assert heard.calls == [("s", id_digest(1), None)] and len(markers(tmp_path)) == 1
    time.sleep(0.6)  # nothing changed, but the marker's minute is up: a look removes it
    relay._look()
    assert os.listdir(tmp_path) == []


def test_a_cancellation_reaching_the_worker_running_the_call_writes_no_marker(gateway_sandbox, sandbox, own_trace,
                                                                               tmp_path):
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    server = HttpServer(gateway_sandbox.url, "--http-workers", "1", env={"COLABHIVE_RUNTIME_DIR": str(runtime)})
    try:
        session = initialize(server.url)
        call = threading.Thread(target=lambda: rpc(server.url, "tools/call", {
            "name": "batch-report", "arguments": {"seconds": 60}}, session=session, id_=5, **own_trace.headers))
        call.start()
        assert wait_until(lambda: own_trace.journal("poll"), timeout=15)
        assert post(server.url, {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 5}},
                    **{"Mcp-Session-Id": session}).status_code == 202
        assert wait_until(lambda: own_trace.journal("cancel"), timeout=10)  # applied here
        assert list((runtime / "cancel").iterdir()) == []  # and nothing relayed
        call.join(15)
    finally:
        server.stop()
