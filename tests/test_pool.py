"""The tenant pool: LRU by key hash, isolation, and eviction that never breaks a call in flight."""

import threading

from colabhive_mcp.config import Config
from colabhive_mcp.pool import TenantPool


class FakeTenant:
    def __init__(self, config, api_key):
        self.api_key = api_key
        self.key_id = api_key[-4:]
        self.closed = False

    def close(self):
        self.closed = True


def test_one_tenant_per_key_and_least_recently_used_eviction():
    pool = TenantPool(Config(pool_size=2), factory=FakeTenant)
    with pool.tenant("key-a") as a1:
        pass
    with pool.tenant("key-a") as a2, pool.tenant("key-b") as b:
        assert a1 is a2 and a1 is not b and b.api_key == "key-b"
    with pool.tenant("key-a"):
        pass  # a is now the most recent
    with pool.tenant("key-c"):
        pass
    assert len(pool) == 2 and b.closed and not a1.closed


def test_an_evicted_tenant_in_use_is_closed_only_when_its_call_ends():
    pool = TenantPool(Config(pool_size=1), factory=FakeTenant)
    started, release = threading.Event(), threading.Event()
    seen = []

    def long_call():
        with pool.tenant("key-a") as tenant:
            seen.append(tenant)
            started.set()
            release.wait(5)
            assert not tenant.closed  # still usable after its eviction

    worker = threading.Thread(target=long_call)
    worker.start()
    started.wait(5)
    with pool.tenant("key-b"):
        pass  # evicts key-a while its call is in flight
    assert not seen[0].closed
    release.set()
    worker.join(5)
    assert seen[0].closed
    with pool.tenant("key-a") as again:
        assert again is not seen[0]  # rebuilt from the key


def test_close_evicts_everything():
    pool = TenantPool(Config(pool_size=4), factory=FakeTenant)
    tenants = []
    for key in ("k1", "k2"):
        with pool.tenant(key) as tenant:
            tenants.append(tenant)
    pool.close()
    assert len(pool) == 0 and all(t.closed for t in tenants)
