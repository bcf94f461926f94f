"""Noticing a client that hangs up during a plain-JSON call, with one watcher thread per process."""

import errno
import os
import resource
import socket
import struct
import threading
import time

import pytest

from colabhive_mcp.transports.http import hangups
from colabhive_mcp.transports.http.hangups import HangupWatch, peer_closed

from ...support.waiting import wait_until


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
        assert wait_until(hung_up.is_set)
        time.sleep(0.2)
        assert not still_there.is_set()
    assert wait_until(lambda: not watchers())
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


def tcp_pair():
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
    return server, client


def judged(sock):
    """peer_closed(sock), or "blocked" when it does not answer within two seconds."""
    verdict = ["blocked"]
    thread = threading.Thread(target=lambda: verdict.__setitem__(0, peer_closed(sock)), daemon=True)
    thread.start()
    thread.join(2)
    return verdict[0]


@pytest.mark.parametrize("blocking", [True, False])
def test_urgent_data_alone_is_not_a_hang_up_and_never_blocks_the_check(blocking):
    """Readable (POLLPRI) with nothing in the stream: recv would block, or say EAGAIN on a socket
    gunicorn made non-blocking; neither is the client leaving."""
    server, client = tcp_pair()
    server.setblocking(blocking)
    client.send(b"!", socket.MSG_OOB)
    time.sleep(0.1)
    assert judged(server) is False
    client.close()
    assert wait_until(lambda: judged(server) is True)
    server.close()


class Failing(socket.socket):
    """A socket whose reads fail with ``code``."""

    code = 0

    def recv(self, *args):
        raise OSError(self.code, os.strerror(self.code))


@pytest.mark.parametrize("code, gone", [(errno.EAGAIN, False), (errno.EINTR, False), (errno.ENOMEM, False),
                                        (errno.ENOBUFS, False), (errno.ECONNRESET, True), (errno.ENOTCONN, True)])
def test_only_a_definite_error_is_a_hang_up(code, gone):
    a, b = socket.socketpair()
    failing = Failing(fileno=a.detach())
    failing.code = code
    b.sendall(b"readable")
    assert peer_closed(failing) is gone
    failing.close()
    b.close()


def test_a_poll_that_fails_is_no_answer(monkeypatch):
    class Poller:
        def register(self, fd, events):
            pass

        def poll(self, timeout):
            raise OSError(errno.ENOMEM, "out of memory")

    monkeypatch.setattr(hangups.select, "poll", Poller)
    a, b = socket.socketpair()
    assert peer_closed(a) is False
    a.close()
    b.close()


def test_a_reset_a_close_and_a_socket_closed_under_us_are_hang_ups():
    server, client = tcp_pair()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    client.close()  # RST
    assert wait_until(lambda: peer_closed(server))
    server.close()
    assert peer_closed(server)
    a, b = socket.socketpair()
    b.close()
    assert peer_closed(a)
    a.close()


def test_a_check_under_way_when_the_call_ends_does_not_hang_it_up(monkeypatch):
    """The call ends and the server closes its socket (its fd number may go to another client)
    while the watcher is checking it: the finished call is not set as hung up."""
    checking, go_on = threading.Event(), threading.Event()
    check = hangups.peer_closed

    def slow_check(sock):
        checking.set()
        go_on.wait(5)
        return check(sock)

    monkeypatch.setattr(hangups, "peer_closed", slow_check)
    watch = HangupWatch(0.01)
    server_end, client_end = socket.socketpair()
    with watch.watching(server_end) as hung_up:
        assert checking.wait(5)
        threading.Timer(0.2, go_on.set).start()
    server_end.close()  # as gunicorn does once the answer is written
    client_end.close()
    go_on.set()
    assert wait_until(lambda: not watchers())
    assert not hung_up.is_set()
