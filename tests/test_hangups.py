"""Noticing a client that hangs up during a plain-JSON call, with one watcher thread per process."""

import os
import resource
import socket
import threading
import time

import pytest

from colabhive_mcp.transports.http.hangups import HangupWatch, peer_closed


def wait_for(condition, seconds=10.0):
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)
    return condition()


def watchers():
    return [t for t in threading.enumerate() if t.name == "mcp-hangup-watch"]


def test_a_hang_up_sets_the_event_and_the_watcher_leaves_when_idle():
    watch = HangupWatch(0.05)
    server_end, client_end = socket.socketpair()
    other_server, other_client = socket.socketpair()
    with watch.watching(server_end) as hung_up, watch.watching(other_server) as still_there:
        assert len(watchers()) == 1
        other_client.sendall(b"pipelined bytes are not a hang-up")
        client_end.close()
        assert wait_for(hung_up.is_set)
        time.sleep(0.2)
        assert not still_there.is_set()
    assert wait_for(lambda: not watchers())
    for s in (server_end, other_server, other_client):
        s.close()


def test_no_socket_means_nothing_to_watch():
    watch = HangupWatch(0.05)
    with watch.watching(None) as hung_up:
        assert not watchers() and not hung_up.is_set()


def test_descriptors_beyond_select_limit_are_judged_correctly():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2100:
        pytest.skip("the descriptor limit is too low to open fd 2000")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 2100), hard))
    try:
        a, b = socket.socketpair()
        os.dup2(a.fileno(), 2000)
        high = socket.socket(fileno=2000)
        assert not peer_closed(high)  # select() would fail on fd 2000 and call it closed
        b.close()
        assert peer_closed(high)
        high.close()
        a.close()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
