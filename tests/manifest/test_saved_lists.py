"""The tool lists a stdio server saves beside its manifest: each way of listing its own file, read back
as it was sent while the gateway's last word on the manifest is younger than the TTL, touched by a 304,
replaced with a new manifest's, deleted with a refused key's, and never read when others could have
written it (the processes themselves: ``test_saved_manifest.py``)."""

import os
import time

from colabhive_mcp.encoding import EncodedList, UnreadList
from colabhive_mcp.manifest.saved import SavedManifest
from colabhive_mcp.manifest.version import Manifest

TTL = 60.0
ENTRIES = ({"name": "alpha"}, {"name": "beta"})
LISTING = EncodedList([{"name": "alpha", "inputSchema": {"type": "object"}}, {"name": "beta"}])


def saved_with_list(tmp_path, variant="v1", etag='"e1"'):
    saved = SavedManifest(tmp_path / "private" / "manifest-test.json")
    saved.save(Manifest(ENTRIES, etag), {variant: (etag, LISTING)})
    return saved


def aged(saved, seconds):
    for path in saved.path.parent.iterdir():
        os.utime(path, (time.time() - seconds,) * 2)


def test_a_list_saved_within_the_ttl_is_read_back_as_it_was_sent(tmp_path):
    saved = saved_with_list(tmp_path)
    etag, listing = saved.listing("v1", TTL)
    assert etag == '"e1"' and isinstance(listing, UnreadList) and listing.raw == LISTING.raw
    assert len(listing) == 2 and listing == LISTING
    assert saved.listing("another-way", TTL) is None  # each way of listing has its own


def test_past_the_ttl_a_saved_list_is_not_an_answer_until_the_gateway_confirms_it(tmp_path):
    saved = saved_with_list(tmp_path)
    aged(saved, TTL + 1)
    assert saved.listing("v1", TTL) is None and saved.load() is not None  # the manifest stays a question
    saved.used()  # the gateway's 304
    assert saved.listing("v1", TTL) is not None


def test_a_new_manifest_replaces_every_list_of_the_old_one(tmp_path):
    saved = saved_with_list(tmp_path)
    saved.save(None, {"v2": ('"e1"', LISTING)})  # a list made later of the same manifest joins it
    assert saved.listing("v1", TTL) and saved.listing("v2", TTL)
    saved.save(Manifest(ENTRIES + ({"name": "gamma"},), '"e2"'), {})
    assert saved.listing("v1", TTL) is None and saved.listing("v2", TTL) is None


def test_a_refused_keys_lists_go_with_its_manifest(tmp_path):
    saved = saved_with_list(tmp_path)
    saved.forget()
    assert saved.load() is None and saved.listing("v1", TTL) is None
    assert list(saved.path.parent.iterdir()) == []


def test_a_list_others_could_have_written_or_that_is_not_one_is_not_read(tmp_path):
    saved = saved_with_list(tmp_path)
    [listed] = saved.path.parent.glob("*.list-*.json")
    listed.chmod(0o644)
    assert saved.listing("v1", TTL) is None
    listed.chmod(0o600)
    for written in (b"not a head\n[]", b'{"etag": "x", "count": "2"}\n[]', b'{"etag": 1, "count": 0}\n[]'):
        listed.write_bytes(written)
        assert saved.listing("v1", TTL) is None, written
