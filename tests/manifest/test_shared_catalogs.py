"""A catalogue is built once per manifest content and shared by the tenants holding it, never by
tenants whose manifests differ (whatever their ETags say); validators are compiled on a tool's first call; an entry's
digest, what says two entries are the same, is the same however its value is held."""

import concurrent.futures
import json
import sys
import threading
import time

import pytest
import responses
from responses import matchers

from colabhive_mcp.catalog import tools
from colabhive_mcp.catalog.tools import Catalog
from colabhive_mcp.manifest import interning
from colabhive_mcp.settings.config import Config
from colabhive_mcp.tenants import tenant as tenant_module
from colabhive_mcp.tenants.tenant import Tenant

URL = "https://gw.test/api/builder/v1"
SAME_ETAG = '"v1"'  # two gateways (or one careless one) may give different manifests the same ETag


def serve(key, *tools):
    responses.get(URL + "/mcp/manifest", json={"tools": list(tools), "nextCursor": None}, headers={"ETag": SAME_ETAG},
                  match=[matchers.header_matcher({"X-API-Key": key})])


def action(name, schema=None):
    return {"name": name, "description": f"{name} does things", "sideEffects": [],
            "inputSchema": schema or {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}


def tenants(*keys):
    config = Config(api_url=URL, log_level="error")
    return [Tenant(config, key) for key in keys]


@responses.activate
def test_tenants_share_a_catalogue_only_when_their_manifests_are_the_same():
    serve("hive_same0001", action("alpha"))
    serve("hive_same0002", action("alpha"))
    serve("hive_other003", action("alpha", {"type": "object", "properties": {"secret": {"type": "string"}}}),
          action("private-beta"))
    first, second, other = tenants("hive_same0001", "hive_same0002", "hive_other003")
    assert first.catalog() is second.catalog()  # built once for both
    assert other.catalog() is not first.catalog()
    assert "private-beta" in other.catalog().by_name and "private-beta" not in first.catalog().by_name
    assert "secret" in str(other.catalog().listing("2025-11-25")) and "secret" not in str(first.catalog().listing("2025-11-25"))
    assert first.catalog().manifest.etag == other.catalog().manifest.etag == SAME_ETAG


@responses.activate
def test_many_tenants_listing_one_manifest_at_once_build_its_catalogue_once(monkeypatch):
    """Sixteen keys with the same manifest list at once, on threads of their own: one catalogue is
    built, and the others wait for it rather than build it again; a build that fails leaves the next one
    to try."""
    keys = [f"hive_burst{i:04d}" for i in range(16)]
    for key in keys:
        serve(key, action("alpha"), action("beta"))
    builds, failures = [], [RuntimeError("the first build fails")]

    class Counted(Catalog):
        def __post_init__(self) -> None:
            builds.append(threading.current_thread().name)
            time.sleep(0.05)  # long enough for every other thread to want it meanwhile
            if failures:
                raise failures.pop()
            super().__post_init__()

    monkeypatch.setattr(tenant_module, "Catalog", Counted)
    burst = tenants(*keys)
    for tenant in burst:
        tenant.manifest.get()  # fetched first: what the threads race for is the catalogue
    with concurrent.futures.ThreadPoolExecutor(len(burst)) as pool:
        listed = list(pool.map(lambda t: _catalog_or_error(t), burst))
    failed = [c for c in listed if isinstance(c, RuntimeError)]
    catalogs = [c for c in listed if not isinstance(c, RuntimeError)]
    assert len(failed) == 1 and len(builds) == 2  # the failed build, then one for all fifteen others
    assert len(catalogs) == 15 and all(c is catalogs[0] for c in catalogs)


def _catalog_or_error(tenant):
    try:
        return tenant.catalog()
    except RuntimeError as exc:
        return exc


@responses.activate
def test_a_validator_is_compiled_on_the_first_call_and_then_judges_as_before():
    serve("hive_valid001", action("alpha"), action("odd", {"type": "object", "properties": 5}))
    (tenant,) = tenants("hive_valid001")
    catalog = tenant.catalog()
    catalog.listing("2025-11-25")
    alpha, odd = catalog.by_name["alpha"], catalog.by_name["odd"]
    assert "_input_check" not in vars(alpha) and "_input_check" not in vars(odd)  # listing compiled none
    assert "'n' is a required property" in alpha.argument_errors({})
    assert "_input_check" in vars(alpha) and alpha.argument_errors({"n": 1}) is None
    assert odd.argument_errors({"anything": 1}) is None  # a broken schema: the gateway judges, as before
    listed = {t["name"]: t for t in catalog.listing("2025-11-25")}
    assert listed["odd"]["inputSchema"] == {"type": "object", "properties": 5}  # and listed as it was


def test_entries_read_alike_share_a_digest_and_different_ones_never_do():
    read = json.loads('{"name": "a", "inputSchema": {"type": "object", "properties": {"x": {"type": "string"}}}}')
    again = json.loads(json.dumps(read))
    made = {"name": sys.intern("a"), "inputSchema": {"type": sys.intern("object"),
                                                      "properties": {"x": {"type": sys.intern("string")}}}}
    assert interning.digest(read) == interning.digest(again) == interning.digest(made)  # however its strings are held
    different = [{**read, "extra": value} for value in (1, 1.0, True, "1", None, [1], {"1": 1})]
    assert len({interning.digest(d) for d in [read, *different]}) == 1 + len(different)


def test_what_a_process_keeps_of_manifests_beyond_its_tenants_is_bounded():
    """Keys with actions of their own pass through the pool: each fetch interns its entries and builds their
    definitions, and the process keeps the last ones read, not every one it ever saw (``scripts/bench.py``
    measures what that costs: ``distinct_manifests``)."""
    for i in range(2 * interning.KEPT_ENTRIES):
        tools.prepared({"name": f"own-action-{i}", "description": "d", "inputSchema": {"type": "object"}})
    assert len(interning._entries) == interning.KEPT_ENTRIES
    assert len(interning._built) <= 3 * interning.KEPT_ENTRIES
    latest = {"name": f"own-action-{2 * interning.KEPT_ENTRIES - 1}", "description": "d", "inputSchema": {"type": "object"}}
    assert interning.digest(latest) in interning._entries  # the newest are the ones kept


def test_a_build_that_needs_itself_is_an_error_not_a_wait_forever():
    """A build that asks for its own object (a bug) raises at once: the thread would otherwise wait for
    itself; the object is built by the next call that does not."""
    def build():
        return interning.held(("needs-itself",), build)

    with pytest.raises(RuntimeError, match="needs"):
        interning.held(("needs-itself",), build)
    class Thing:
        pass

    made = Thing()
    assert interning.held(("needs-itself",), lambda: made) is made
