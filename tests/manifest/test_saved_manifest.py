"""The manifest a stdio server keeps on disk between starts, and the tool lists made of it: while the
gateway's last word on it is younger than the manifest TTL, the next start's first list is the saved
one (the gateway is asked behind it, and a change is announced); older, it is asked about with its
ETag and served only on the gateway's 304. Private to the user, and never a way around the gateway."""

import json
import os
import stat
import sys
import time

import pytest

from colabhive_mcp.catalog import tools
from colabhive_mcp.cli.demo import StdioPeer
from colabhive_mcp.gateway.client import Gateway, ManifestDocument
from colabhive_mcp.keys import ApiKey
from colabhive_mcp.manifest.cache import ManifestCache
from colabhive_mcp.manifest.saved import SavedManifest
from colabhive_mcp.manifest.version import Manifest
from colabhive_mcp.sandbox import DEMO_KEY

from ..support.environ import server_env
from ..support.waiting import wait_until

pytestmark = pytest.mark.slow


def peer(sandbox, cache_home, **env):
    """A stdio server on the sandbox, saving its manifest under ``cache_home``, initialized."""
    started = StdioPeer([sys.executable, "-m", "colabhive_mcp", "stdio", "--api-url", sandbox.url, "--retries", "0"],
                        env=server_env(COLABHIVE_API_KEY=DEMO_KEY, XDG_CACHE_HOME=str(cache_home), **env))
    started.initialize()
    return started


def start(sandbox, cache_home, **env):
    """A stdio server's tool list's answer (the server then stops)."""
    started = peer(sandbox, cache_home, **env)
    try:
        return started.request("tools/list")
    finally:
        started.close()


def saved_files(cache_home):
    """The saved manifests (not the lists made of them)."""
    directory = cache_home / "colabhive-mcp"
    return sorted(p for p in directory.iterdir() if ".list-" not in p.name) if directory.exists() else []


def saved_lists(cache_home):
    directory = cache_home / "colabhive-mcp"
    return sorted(directory.glob("*.list-*.json")) if directory.exists() else []


def aged(cache_home):
    """What is saved, as if the gateway last confirmed it an hour ago (past the TTL)."""
    for path in saved_files(cache_home) + saved_lists(cache_home):
        os.utime(path, (time.time() - 3600,) * 2)


def first_pages(journal):
    return [e for e in journal("manifest") if e["cursor"] is None]


def test_a_later_start_within_the_ttl_answers_the_saved_list_and_asks_the_gateway_behind_it(
        sandbox, journal, cache_home):
    first = start(sandbox, cache_home)
    [listed] = saved_lists(cache_home)
    requests_before = len(journal("manifest"))
    later = peer(sandbox, cache_home)
    try:
        answer = later.request("tools/list")
        assert len(journal("manifest")) == requests_before  # nothing asked before the answer
        assert answer["result"] == first["result"] and len(answer["result"]["tools"]) > 3
        assert wait_until(lambda: len(journal("manifest")) > requests_before)  # the gateway is asked behind it
        assert journal("manifest")[-1]["status"] == 304
    finally:
        later.close()
    assert saved_lists(cache_home) == [listed]


def test_a_manifest_changed_since_the_saved_list_is_announced_once_the_gateway_says_so(sandbox, cache_home):
    start(sandbox, cache_home)
    sandbox.add_action({"name": "published-since", "description": "new", "inputSchema": {"type": "object"}})
    later = peer(sandbox, cache_home)
    try:
        assert "published-since" not in {t["name"] for t in later.request("tools/list")["result"]["tools"]}
        assert wait_until(lambda: [n for n in later.notifications if n["method"] == "notifications/tools/list_changed"])
        assert "published-since" in {t["name"] for t in later.request("tools/list")["result"]["tools"]}
    finally:
        later.close()
    assert "published-since" in {t["name"] for t in start(sandbox, cache_home)["result"]["tools"]}


def test_a_later_start_past_the_ttl_asks_about_the_saved_manifest_and_downloads_nothing(sandbox, journal, cache_home):
    first = start(sandbox, cache_home)
    [saved] = saved_files(cache_home)
    aged(cache_home)
    requests_before = len(journal("manifest"))
    second = start(sandbox, cache_home)
    assert second["result"] == first["result"] and len(second["result"]["tools"]) > 3
    [asked] = journal("manifest")[requests_before:]  # one request: the first page's, answered 304
    assert asked["status"] == 304 and asked["if_none_match"] == json.loads(saved.read_bytes())["etag"]


def test_the_saved_manifest_is_the_users_alone_and_holds_no_key(sandbox, cache_home):
    start(sandbox, cache_home)
    [saved] = saved_files(cache_home)
    assert stat.S_IMODE(os.stat(saved.parent).st_mode) == 0o700 and stat.S_IMODE(os.stat(saved).st_mode) == 0o600
    assert DEMO_KEY not in saved.name and DEMO_KEY.encode() not in saved.read_bytes()


def test_a_changed_manifest_is_downloaded_and_saved_in_place_of_the_old_one(sandbox, journal, cache_home):
    start(sandbox, cache_home)
    [saved] = saved_files(cache_home)
    old_etag = json.loads(saved.read_bytes())["etag"]
    sandbox.add_action({"name": "published-since", "description": "new", "inputSchema": {"type": "object"}})
    aged(cache_home)
    answer = start(sandbox, cache_home)
    assert "published-since" in {t["name"] for t in answer["result"]["tools"]}
    assert [e["status"] for e in first_pages(journal)] == [200, 200]  # the ETag was asked about, and had changed
    assert saved_files(cache_home) == [saved] and json.loads(saved.read_bytes())["etag"] != old_etag


@pytest.mark.parametrize("status", [401, 403])
def test_a_refused_key_is_refused_as_with_nothing_saved_and_its_manifest_deleted(sandbox, cache_home, tmp_path,
                                                                                  status):
    start(sandbox, cache_home)
    aged(cache_home)
    sandbox.faults.add(route="manifest", kind="status", status=status, count=None)
    with_saved = start(sandbox, cache_home)
    without = start(sandbox, tmp_path / "empty")
    assert "error" in with_saved and with_saved["error"] == without["error"]
    assert saved_files(cache_home) == [] and saved_lists(cache_home) == []


def test_a_key_refused_since_the_saved_list_loses_it_once_the_gateway_says_so(sandbox, cache_home):
    start(sandbox, cache_home)
    sandbox.faults.add(route="manifest", kind="status", status=401, count=None)
    later = peer(sandbox, cache_home)
    try:
        assert "result" in later.request("tools/list")  # within the TTL: as a running process's copy
        assert wait_until(lambda: not saved_lists(cache_home))  # once the gateway refuses the key
    finally:
        later.close()
    assert "error" in start(sandbox, cache_home)


def test_while_the_gateway_fails_a_saved_manifest_is_not_served(sandbox, cache_home, tmp_path):
    start(sandbox, cache_home)
    aged(cache_home)
    sandbox.faults.add(route="manifest", kind="status", status=503, count=None)
    with_saved = start(sandbox, cache_home)
    without = start(sandbox, tmp_path / "empty")
    assert "error" in with_saved and with_saved["error"] == without["error"]
    assert len(saved_files(cache_home)) == 1  # kept: the gateway did not say it was wrong


def test_a_saved_manifest_others_could_have_written_is_not_used(sandbox, journal, cache_home):
    start(sandbox, cache_home)
    for saved in saved_files(cache_home) + saved_lists(cache_home):
        saved.chmod(0o644)
    start(sandbox, cache_home)
    saved.parent.chmod(0o755)
    start(sandbox, cache_home)
    assert [(e["status"], e["if_none_match"]) for e in first_pages(journal)] == [(200, None)] * 3


def test_a_saved_manifest_that_is_a_link_or_anothers_file_is_not_read(tmp_path):
    """Only a regular file of this user's own is read: not a symbolic link (even to a good copy), nor, when
    another user could own one (as root), a file or a directory that user owns."""
    saved = SavedManifest(tmp_path / "private" / "manifest-test.json")
    saved.save(Manifest(({"name": "alpha"},), '"v1"'), {})
    assert saved.load() is not None
    elsewhere = tmp_path / "private" / "elsewhere.json"
    saved.path.rename(elsewhere)
    saved.path.symlink_to(elsewhere)
    assert saved.load() is None
    saved.path.unlink()
    elsewhere.rename(saved.path)
    if os.geteuid() == 0:  # (only root can give a file away)
        os.chown(saved.path, 65534, 65534)
        assert saved.load() is None
        os.chown(saved.path, 0, 0)
        os.chown(saved.path.parent, 65534, 65534)
        assert saved.load() is None
        os.chown(saved.path.parent, 0, 0)
    assert saved.load() is not None


def test_a_saved_manifest_that_is_not_one_is_fetched_again_and_replaced(sandbox, journal, cache_home):
    start(sandbox, cache_home)
    [saved] = saved_files(cache_home)
    aged(cache_home)
    saved.write_text('{"etag": "\\"x\\"", "entries": [{"no": "name"}]}')
    answer = start(sandbox, cache_home)
    assert len(answer["result"]["tools"]) > 3 and first_pages(journal)[-1]["if_none_match"] is None
    assert json.loads(saved.read_bytes())["entries"]


def test_with_manifest_cache_off_nothing_is_saved(sandbox, cache_home):
    start(sandbox, cache_home, COLABHIVE_MANIFEST_CACHE="off")
    assert saved_files(cache_home) == []


def test_a_pinned_server_asks_about_no_saved_manifest_but_the_pinned_one(sandbox, journal, tmp_path):
    gateway = Gateway(sandbox.url, ApiKey.of(DEMO_KEY), retries=0)
    saved = SavedManifest(tmp_path / "private" / "manifest-test.json")
    current = ManifestCache(gateway).get()
    saved.save(Manifest(current.entries, '"an-older-one"'), {})
    assert ManifestCache(gateway, pin=current.etag, saved=saved).get().etag == current.etag
    assert first_pages(journal)[-1]["if_none_match"] is None  # the saved copy is not the pinned one
    saved.save(current, {})
    assert ManifestCache(gateway, pin=current.etag, saved=saved).get().entries == current.entries
    assert first_pages(journal)[-1]["status"] == 304
    gateway.close()


@pytest.fixture
def built(monkeypatch):
    """The entries whose tool definitions are built from now on (each as a bare name)."""
    made = []
    monkeypatch.setattr(tools, "build_definition", lambda entry, *rest: made.append(entry) or {"name": entry["name"]})
    return made


def saved_of(tmp_path, lists=None):
    """A manifest saved by an earlier start (ETag "v1": three entries of this test's own, so that no other
    test built their definitions), with ``lists`` beside it: its path and entries."""
    directory = tmp_path / "colabhive-mcp"
    directory.mkdir(mode=0o700)
    entries = tuple({"name": f"saved-{tmp_path.name}-{n}", "description": "d", "inputSchema": {"type": "object"}}
                    for n in range(3))
    path = directory / "manifest.json"
    SavedManifest(path).save(Manifest(entries, '"v1"'), lists or {})
    return path, entries


class Asked:
    """A gateway that does what a fetch does ``meanwhile`` (counting the definitions built by then), then
    answers 304 to ``current``, else the first entry as ETag "v2"."""

    key_id = "k"

    def __init__(self, built, current='"v1"'):
        self.built, self.current, self.built_when_answered = built, current, None

    def fetch_manifest(self, etag=None, prepare=None, meanwhile=None, accepted=None):
        if meanwhile is not None:
            meanwhile()
        self.built_when_answered = len(self.built)
        if etag == self.current:
            return None  # 304: the saved copy is current
        first = prepare({"name": "published-since", "description": "d", "inputSchema": {"type": "object"}})
        return ManifestDocument((first[1],), '"v2"', 10, (first,))


def test_the_saved_manifests_tools_are_made_while_the_gateway_is_asked_about_it(tmp_path, built):
    """The tool definitions of a saved manifest are built while its ETag is asked about (the gateway's
    answer takes a round trip), not after the 304: the tool list then finds them made."""
    path, entries = saved_of(tmp_path)
    gateway = Asked(built)
    assert ManifestCache(gateway, saved=SavedManifest(path), prepare=tools.prepared).get().entries == entries
    assert gateway.built_when_answered == len(entries)


def test_past_the_ttl_a_saved_list_is_the_answer_once_the_gateway_confirms_its_manifest(tmp_path, built):
    """A later start past the TTL asks the gateway about the saved manifest; on its 304 the list saved
    beside it is the answer, as it was sent: no tool is made (nor while the gateway is asked). A list of
    another manifest than the gateway's is never one."""
    listing = tools.EncodedList([{"name": "a saved list"}])
    path, _ = saved_of(tmp_path, {"variant": ('"v1"', listing)})
    for saved in path.parent.iterdir():
        os.utime(saved, (time.time() - 3600,) * 2)
    cache = ManifestCache(Asked(built), saved=SavedManifest(path), prepare=tools.prepared)
    assert cache.shared_listing("variant") is None  # past the TTL: not before the gateway's word
    assert cache.get().etag == '"v1"' and built == []
    etag, answered = cache.shared_listing("variant")
    assert etag == '"v1"' and answered.raw == listing.raw and built == []
    assert cache.shared_listing("another-way") is None

    changed = ManifestCache(Asked(built, current=None), saved=SavedManifest(path), prepare=tools.prepared)
    assert changed.get().etag == '"v2"' and changed.shared_listing("variant") is None  # the gateway's is another
    assert changed.listing_saved_of(changed.get(), "variant") is None
