"""A new key's first tool list, as the workers of an instance make it: the gateway's first page is
its yes to the key (the rest is read behind the answer), and the list one worker makes is the
other workers' too (they answer it without reading the manifest or building anything)."""

import threading
import time
from itertools import accumulate

import pytest
import responses
from responses import matchers

from colabhive_mcp.catalog.profiles import NAMES, UNKNOWN
from colabhive_mcp.encoding import EncodedList, UnreadList, headed, to_json, unheaded
from colabhive_mcp.keys import KeyRejected
from colabhive_mcp.manifest import instance_copy
from colabhive_mcp.manifest.instance_copy import (CONTENTS, EAGER_S, FIRST_LOOK_S, LISTING, LISTS_FIRST_S, LOOK_AGAIN_S,
                                                  SOON_LOOK_S, InstanceCopy)
from colabhive_mcp.manifest.version import Manifest
from colabhive_mcp.settings.config import Config
from colabhive_mcp.store.memory import MemoryStore
from colabhive_mcp.store.sqlite import SqliteStore
from colabhive_mcp.tenants.limits import LimitReached
from colabhive_mcp.tenants.shared import Instance
from colabhive_mcp.tenants.tenant import Tenant, listing_variant

VERSION = "2025-11-25"
URL = "https://gw.test/api/builder/v1"
KEY = "hive_first_page_key"


def now(run):
    run()


@pytest.fixture
def workers(config, tmp_path):
    """Two workers of one instance (their store a SQLite file, as under gunicorn), each with its tenant
    for the sandbox's demo key."""
    store = SqliteStore(str(tmp_path / "instance.db"))
    made = [Tenant(config, config.api_key, Instance.of(config, store)) for _ in range(2)]
    yield made
    for tenant in made:
        tenant.close()


def shared_once_written(tenant, profile=UNKNOWN, version=VERSION):
    """The list ``tenant`` makes, once the copy it gives the other workers is written."""
    listing, etag = tenant.listing(profile, version)
    making = f"{tenant.digest}:{listing_variant(tenant.policy, profile, version)}"
    deadline = time.monotonic() + 10
    while tenant.manifest.instance.store.get(LISTING, making) is not None:
        assert time.monotonic() < deadline, "the list was never written"
        time.sleep(0.01)
    return listing, etag


def test_the_other_worker_answers_the_first_ones_list_without_reading_the_manifest(workers):
    first, other = workers
    first.verify()
    listing, etag = shared_once_written(first)
    other.verify()  # the instance's copy says the gateway accepted the key: nothing is read
    shown, shown_etag = other.listing(UNKNOWN, VERSION)
    assert isinstance(shown, UnreadList) and shown.raw == listing.raw and shown_etag == etag
    assert len(shown) == len(listing) and other.manifest.current is None  # neither read nor built
    assert shown == listing  # (read once something looks at the tools)
    assert other.listing(UNKNOWN, VERSION)[0] is shown  # read from the store once


def test_a_list_made_another_way_is_made_by_the_worker_that_needs_it(workers):
    first, other = workers
    first.verify()
    shared_once_written(first)
    for profile, version in ((NAMES["cursor"], VERSION), (UNKNOWN, "2025-06-18")):  # strict schemas; other fields
        shown, _ = other.listing(profile, version)
        assert not isinstance(shown, UnreadList) and shown == first.listing(profile, version)[0]
    assert other.manifest.current is not None


def test_a_client_that_has_said_who_it_is_finds_its_list_made_on_any_worker(workers):
    first, other = workers
    first.verify()
    first.list_ahead(UNKNOWN, VERSION)  # what initialize does, behind its answer
    other.verify()  # waits for the first worker's word on the key
    shown, _ = other.listing(UNKNOWN, VERSION)  # and for its list, rather than make it
    assert isinstance(shown, UnreadList) and other.manifest.current is None
    assert shown.raw == first.listing(UNKNOWN, VERSION)[0].raw


def test_a_list_being_made_is_waited_for_a_while_and_no_longer():
    store = MemoryStore()
    maker, waiter = (InstanceCopy(store, "key-digest", in_background=now) for _ in range(2))
    assert waiter.listing("content", "variant", wait=5) is None  # nobody makes it: no wait
    assert maker.claim_listing("variant") and not waiter.claim_listing("variant")
    started = time.monotonic()
    assert waiter.listing("content", "variant", wait=0.2) is None and time.monotonic() - started >= 0.2
    listing = EncodedList([{"name": "a"}, {"name": "b"}])
    threading.Timer(0.05, maker.share_listing, ("variant", ("content", listing))).start()
    found = waiter.listing("content", "variant", wait=5)
    assert found.raw == listing.raw and len(found) == 2 and list(found) == listing
    assert waiter.claim_listing("variant")  # once written, the claim is given up


def test_what_a_client_waits_for_is_looked_for_often_at_first_and_seldom_after(monkeypatch):
    """Another worker's word on a key, or its list, is looked for every 2 ms while it is usually about
    to come (a first list takes about a tenth of a second), then no more often than every 50 ms (a slow
    gateway: a worker does not spend its time asking the store)."""
    now, pauses = [0.0], []

    class Clock:
        @staticmethod
        def monotonic():
            return now[0]

        @staticmethod
        def sleep(seconds):
            pauses.append(seconds)
            now[0] += seconds

    monkeypatch.setattr(instance_copy, "time", Clock)
    assert instance_copy.looked_for(lambda: None, lambda: True, 2.0, SOON_LOOK_S) is None
    eager = [pause for pause, at in zip(pauses, accumulate(pauses)) if at <= EAGER_S]
    assert set(eager) == {SOON_LOOK_S} and len(eager) >= EAGER_S / SOON_LOOK_S - 1
    assert max(pauses) == LOOK_AGAIN_S and len(pauses) < len(eager) + (2.0 - EAGER_S) / LOOK_AGAIN_S + 6
    pauses.clear()
    now[0] = 0.0
    found = iter([None, None, "it"])
    assert instance_copy.looked_for(lambda: next(found), lambda: True, 2.0, LOOK_AGAIN_S) == "it"
    assert pauses == [FIRST_LOOK_S, 2 * FIRST_LOOK_S]  # (a fetch another worker makes: from 5 ms, doubling)


def test_a_new_content_is_written_after_the_lists_this_worker_claimed():
    """The list another worker waits for goes into the store before the manifest's content (which that
    worker does not need to answer with the list, and whose write would take the interpreter lock
    meanwhile); the content waits for it no longer than :data:`LISTS_FIRST_S`."""
    store, started = MemoryStore(), []
    maker = InstanceCopy(store, "key-digest", in_background=lambda run: started.append(
        threading.Thread(target=run, daemon=True)) or started[-1].start())
    manifest = Manifest(({"name": "alpha", "description": "A"},), '"v1"')
    assert maker.claim_listing("variant")
    maker.confirm(manifest, changed=True, asked=1.0)
    time.sleep(0.2)
    assert store.get(CONTENTS, manifest.content) is None  # the list first
    maker.share_listing("variant", (manifest.content, EncodedList([{"name": "alpha"}])))
    for thread in started:
        thread.join(5)
    assert store.get(CONTENTS, manifest.content) == {"parts": 1} and maker.load() == manifest
    assert InstanceCopy(store, "key-digest").listing(manifest.content, "variant", wait=0) == [{"name": "alpha"}]

    other = Manifest(({"name": "beta"},), '"v2"')  # a list claimed and never given: the content waits a while only
    assert maker.claim_listing("another")
    began = time.monotonic()
    maker.confirm(other, changed=True, asked=2.0)
    for thread in started[2:]:
        thread.join(5)
    assert maker.load() == other and LISTS_FIRST_S <= time.monotonic() - began < LISTS_FIRST_S + 4


def test_a_list_that_cannot_be_made_is_waited_for_no_longer(workers, sandbox):
    first, other = workers
    sandbox.faults.add(route="manifest", kind="status", status=500, count=100)
    first.list_ahead(UNKNOWN, VERSION)  # claims the list, then fails to get the manifest
    started = time.monotonic()
    with pytest.raises(Exception):
        other.listing(UNKNOWN, VERSION)
    assert time.monotonic() - started < 5


def test_an_unread_list_reads_its_items_when_looked_at():
    items = [{"name": "alpha", "inputSchema": {"type": "object"}}, {"name": "beta"}]
    unread = UnreadList(to_json(items), len(items))
    assert len(unread) == 2 and unread  # its count, without reading
    assert unread[1:] == items[1:] and unread[0]["name"] == "alpha" and items[1] in unread
    assert [tool["name"] for tool in unread] == ["alpha", "beta"] and len(unread) == 2
    assert unread == items and not unread != items and str(unread) == str(items)


def test_a_list_kept_outside_its_process_comes_back_with_its_facts_and_nothing_else_does():
    listing = EncodedList([{"name": "alpha"}, {"name": "b\nc"}])
    facts, back = unheaded(headed(listing, etag='"v1"'))
    assert facts == {"etag": '"v1"', "count": 2} and back.raw == listing.raw and back == listing
    for garbage in (b"", b"not json\n[]", b'{"count": -1}\n[]', b'{"count": true}\n[]', b"[1]\n[]", b'{"n": 1}\n[]'):
        assert unheaded(garbage) is None, garbage


def page(*names, cursor=None):
    return {"tools": [{"name": name, "description": name, "inputSchema": {"type": "object"}} for name in names],
            "nextCursor": cursor}


@responses.activate
def test_the_gateways_first_page_is_its_yes_and_the_rest_is_read_behind_it():
    released = threading.Event()

    def second_page(request):
        released.wait(10)
        return 200, {"ETag": '"v1"'}, to_json(page("beta"))

    responses.get(URL + "/mcp/manifest", json=page("alpha", cursor="p2"), headers={"ETag": '"v1"'},
                  match=[matchers.query_param_matcher({})])
    responses.add_callback(responses.GET, URL + "/mcp/manifest", callback=second_page,
                           match=[matchers.query_param_matcher({"cursor": "p2"})])
    tenant = Tenant(Config(api_url=URL, log_level="error"), KEY)
    started = time.monotonic()
    tenant.verify()  # the second page is held: verify returns all the same
    assert time.monotonic() - started < 5 and tenant.manifest.current is None
    threading.Timer(0.1, released.set).start()
    assert set(tenant.catalog().by_name) >= {"alpha", "beta"}  # the list waits for the whole manifest


@responses.activate
def test_a_key_the_gateway_refuses_or_cannot_judge_is_said_as_before():
    responses.get(URL + "/mcp/manifest", status=401, json={"detail": "invalid API key"},
                  match=[matchers.header_matcher({"X-API-Key": KEY})])
    with pytest.raises(KeyRejected):
        Tenant(Config(api_url=URL, log_level="error"), KEY).verify()
    other = "hive_first_page_other"
    responses.get(URL + "/mcp/manifest", status=429, headers={"Retry-After": "7"}, json={"detail": "slow down"},
                  match=[matchers.header_matcher({"X-API-Key": other})])
    with pytest.raises(LimitReached):
        Tenant(Config(api_url=URL, log_level="error", retries=0), other).verify()
