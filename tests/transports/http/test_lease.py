"""A request's lease: what it holds is given back once, when the last of its holders lets go, on
whichever thread; a failure at any point gives back everything taken so far."""

import contextlib
import threading

import pytest

from colabhive_mcp.transports.http.lease import Lease


class Holding:
    """Something a lease can hold, that says when it is given back."""

    def __init__(self, name, given_back):
        self.name, self.given_back = name, given_back

    @contextlib.contextmanager
    def held(self):
        yield self.name
        self.given_back.append(self.name)


def test_what_a_handler_takes_is_given_back_in_reverse_order_when_it_lets_go():
    given_back = []
    with Lease() as lease:
        assert lease.take(Holding("tenant", given_back).held()) == "tenant"
        lease.take(Holding("place", given_back).held())
        assert given_back == []
    assert given_back == ["place", "tenant"]


def test_a_refusal_while_taking_gives_back_what_was_taken():
    given_back = []

    @contextlib.contextmanager
    def refused():
        raise RuntimeError("no place")
        yield

    with pytest.raises(RuntimeError), Lease() as lease:
        lease.take(Holding("tenant", given_back).held())
        lease.take(refused())
    assert given_back == ["tenant"]


def test_a_share_outlives_the_handler_and_the_last_to_let_go_gives_back():
    given_back = []
    with Lease() as lease:
        lease.take(Holding("tenant", given_back).held())
        share = lease.share()
    assert given_back == []  # the handler returned; the streamed answer still holds it
    share.let_go()
    share.let_go()  # a second time: nothing more
    assert given_back == ["tenant"]


def test_a_thread_holds_the_lease_until_its_work_returns():
    given_back, release = [], threading.Event()
    finished = threading.Event()

    def work():
        release.wait(10)
        finished.set()

    with Lease() as lease:
        lease.take(Holding("place", given_back).held())
        lease.run_on_thread(work, "test-work")
    assert given_back == []
    release.set()
    assert finished.wait(10)
    for _ in range(100):  # the thread lets go just after its work returns
        if given_back:
            break
        threading.Event().wait(0.01)
    assert given_back == ["place"]


def test_a_thread_that_cannot_start_lets_go_of_its_share(monkeypatch):
    given_back = []

    def refuse(self):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", refuse)
    with pytest.raises(RuntimeError), Lease() as lease:
        lease.take(Holding("place", given_back).held())
        lease.run_on_thread(lambda: None, "never")
    assert given_back == ["place"]


def test_an_ended_lease_has_no_more_shares():
    with Lease() as lease:
        pass
    with pytest.raises(RuntimeError):
        lease.share()


@pytest.mark.parametrize("read", [0, 1, 3])
def test_a_streamed_response_holds_its_share_until_the_server_closes_it(read):
    """Sent to the end, its client gone after a few events, or closed before a byte was read."""
    from werkzeug.test import EnvironBuilder

    from colabhive_mcp.transports.http.sse import stream

    given_back = []
    with Lease() as lease:
        lease.take(Holding("place", given_back).held())
        response = stream(lambda _sock: iter([b"a", b"b"]), lease)
    body = response(EnvironBuilder().get_environ(), lambda *_args: None)
    chunks = [chunk for chunk, _ in zip(body, range(read))]
    assert given_back == [] and len(chunks) == min(read, 2)
    body.close()
    assert given_back == ["place"]
