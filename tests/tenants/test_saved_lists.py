"""A stdio tenant's first lists from what an earlier start saved: an earlier start's list is answered
while its manifest is fresh (the TTL), and asked about past it; a list answered while the first fetch is
under way is followed by ``list_changed`` when the gateway's manifest is another one."""

import json
import os
import threading
import time

import pytest

from colabhive_mcp.catalog.builtin_tools import ENTRIES as BUILTINS
from colabhive_mcp.catalog.profiles import UNKNOWN
from colabhive_mcp.gateway.client import ManifestDocument
from colabhive_mcp.manifest.saved import SavedManifest
from colabhive_mcp.sandbox import DEMO_KEY
from colabhive_mcp.settings.config import Config
from colabhive_mcp.tenants.tenant import Tenant

from ..support.waiting import wait_until

VERSION = "2025-11-25"


def entries(*names):
    return tuple({"name": name, "description": name, "inputSchema": {"type": "object"}, "sideEffects": []}
                 for name in names)


class Gateway:
    """Answers the manifest it holds (304 to its ETag); once ``held`` is given, only after it is set."""

    key_id, timeout = "key", 5.0

    def __init__(self, names, etag, held=None):
        self.manifest, self.held, self.asked = (entries(*names), etag), held, []

    def fetch_manifest(self, etag=None, prepare=None, meanwhile=None, accepted=None):
        self.asked.append(etag)
        if accepted is not None:
            accepted()
        if self.held is not None:
            self.held.wait(10)
        found, current = self.manifest
        if etag == current:
            return None
        return ManifestDocument(tuple(prepare(e)[1] for e in found), current, 10, tuple(prepare(e) for e in found))

    def close(self):
        pass


def tenant(tmp_path, gateway, ttl=60.0):
    (tmp_path / "colabhive-mcp").mkdir(mode=0o700, exist_ok=True)
    made = Tenant(Config(api_key=DEMO_KEY, manifest_ttl=ttl, manifest_stale_while_revalidate=0), DEMO_KEY,
                  saved=SavedManifest(tmp_path / "colabhive-mcp" / "manifest.json"))
    made.manifest.gateway = gateway
    return made


def names(listing):
    """The manifest's tools a list shows (not the built-ins)."""
    return {tool["name"] for tool in json.loads(listing.raw)} - {entry["name"] for entry in BUILTINS}


def saved_by_an_earlier_start(tmp_path, *names_, age=0.0):
    earlier = tenant(tmp_path, Gateway(names_, '"A"'))
    earlier.listing(UNKNOWN, VERSION)
    earlier.save()
    for path in (tmp_path / "colabhive-mcp").iterdir():
        os.utime(path, (time.time() - age,) * 2)


def test_a_saved_list_is_answered_while_its_manifest_is_fresh_and_asked_about_past_its_ttl(tmp_path):
    saved_by_an_earlier_start(tmp_path, "a", age=3600)
    gateway = Gateway(["a"], '"A"')
    later = tenant(tmp_path, gateway, ttl=0.3)
    listing, etag = later.listing(UNKNOWN, VERSION)
    assert etag == '"A"' and names(listing) == {"a"} and gateway.asked == ['"A"']  # asked first: a 304
    assert later.listing(UNKNOWN, VERSION)[1] == '"A"' and gateway.asked == ['"A"']  # within the TTL: as it is
    gateway.manifest = (entries("a", "b"), '"B"')
    time.sleep(0.35)
    listing, etag = later.listing(UNKNOWN, VERSION)  # past it: asked again, and the new manifest listed
    assert etag == '"B"' and names(listing) == {"a", "b"} and gateway.asked == ['"A"', '"A"']


@pytest.mark.parametrize("watched", ["from the key's acceptance", "once the fetch is over"])
def test_a_list_answered_while_the_first_fetch_is_under_way_is_followed_by_list_changed(tmp_path, watched):
    """What a stdio server does half a second after its start (the prefetch, then the watch), with the
    host's first tools/list answered from the saved list while that fetch is under way: the manifest
    turns out to be another, and the host is told, whenever the watch begins."""
    saved_by_an_earlier_start(tmp_path, "a")
    held = threading.Event()
    later = tenant(tmp_path, Gateway(["a", "b"], '"B"', held), ttl=1.0)
    changes, stop, fetched = [], threading.Event(), threading.Event()

    def prefetch_then_watch():
        later.verify()  # (back once the gateway's first page accepts the key)
        if watched == "once the fetch is over":
            fetched.wait(10)
        later.watch(stop, lambda: changes.append(later.manifest.current.etag))

    threading.Thread(target=prefetch_then_watch, daemon=True).start()
    assert wait_until(lambda: later.manifest.gateway.asked)
    listing, etag = later.listing(UNKNOWN, VERSION)  # the host's first tools/list: the saved one, at once
    assert etag == '"A"' and names(listing) == {"a"}
    held.set()
    assert wait_until(lambda: later.manifest.current is not None)
    fetched.set()
    try:
        assert wait_until(lambda: changes == ['"B"'], timeout=10)
    finally:
        stop.set()
    assert names(later.listing(UNKNOWN, VERSION)[0]) == {"a", "b"}


def test_a_watch_begun_after_the_current_manifest_was_listed_here_announces_nothing_it_did_not_see_change(tmp_path):
    """Once a list of the current manifest was made here, that is what clients were shown: a watch begun
    then takes no older list made elsewhere for theirs (a change announced at its start would be false);
    a change of the gateway's since is announced."""
    saved_by_an_earlier_start(tmp_path, "a")
    gateway = Gateway(["a", "b"], '"B"')
    later = tenant(tmp_path, gateway, ttl=0.5)
    assert later.listing(UNKNOWN, VERSION)[1] == '"A"'  # the saved one, within its TTL
    later.verify()
    assert wait_until(lambda: later.manifest.current is not None)
    assert later.listing(UNKNOWN, VERSION)[1] == '"B"'  # made here, of the gateway's
    changes, stop = [], threading.Event()
    threading.Thread(target=later.watch, args=(stop, lambda: changes.append(later.manifest.current.etag)),
                     daemon=True).start()
    try:
        asked = len(gateway.asked)
        assert wait_until(lambda: len(gateway.asked) > asked)  # the watch asked, at the copy's expiry
        assert changes == []
        gateway.manifest = (entries("a", "b", "c"), '"C"')
        assert wait_until(lambda: changes == ['"C"'], timeout=10)
    finally:
        stop.set()
