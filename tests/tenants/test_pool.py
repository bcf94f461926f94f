"""The tenant pool: LRU by key hash, isolation, and eviction that never breaks a call in flight."""

import threading
import time

import pytest

from colabhive_mcp.keys import ApiKey, KeyRejected
from colabhive_mcp.settings.config import Config
from colabhive_mcp.tenants.limits import LimitReached, Limits, Quotas
from colabhive_mcp.tenants.pool import TenantPool
from colabhive_mcp.transports.http.admission import Admission


class FakeTenant:
    """A tenant whose gateway accepts every key except those starting with ``bad``."""

    verified: list = []

    def __init__(self, config, key):
        self.api_key = key.secret
        self.key_id = key.log_id
        self.closed = False
        self.rejection = None

    def verify(self, vouched=True):
        FakeTenant.verified.append(self.api_key)
        time.sleep(0.05)  # the gateway takes a moment: concurrent first requests overlap
        if self.api_key.startswith("bad"):
            self.rejection = KeyRejected(401, "unknown key")
            raise self.rejection

    def close(self):
        self.closed = True


def test_one_tenant_per_key_and_least_recently_used_eviction():
    pool = TenantPool(Config(pool_size=2), factory=FakeTenant)
    with pool.tenant(ApiKey.of("key-a")) as a1:
        pass
    with pool.tenant(ApiKey.of("key-a")) as a2, pool.tenant(ApiKey.of("key-b")) as b:
        assert a1 is a2 and a1 is not b and b.api_key == "key-b"
    with pool.tenant(ApiKey.of("key-a")):
        pass  # a is now the most recent
    with pool.tenant(ApiKey.of("key-c")):
        pass
    assert len(pool) == 2 and b.closed and not a1.closed


def test_an_evicted_tenant_in_use_is_closed_only_when_its_call_ends():
    pool = TenantPool(Config(pool_size=1), factory=FakeTenant)
    started, release = threading.Event(), threading.Event()
    seen = []

    def long_call():
        with pool.tenant(ApiKey.of("key-a")) as tenant:
            seen.append(tenant)
            started.set()
            release.wait(5)
            assert not tenant.closed  # still usable after its eviction

    worker = threading.Thread(target=long_call)
    worker.start()
    started.wait(5)
    with pool.tenant(ApiKey.of("key-b")):
        pass  # evicts key-a while its call is in flight
    assert not seen[0].closed
    release.set()
    worker.join(5)
    assert seen[0].closed
    with pool.tenant(ApiKey.of("key-a")) as again:
        assert again is not seen[0]  # rebuilt from the key


def test_close_evicts_everything():
    pool = TenantPool(Config(pool_size=4), factory=FakeTenant)
    tenants = []
    for key in ("k1", "k2"):
        with pool.tenant(ApiKey.of(key)) as tenant:
            tenants.append(tenant)
    pool.close()
    assert len(pool) == 0 and all(t.closed for t in tenants)


def test_a_rejected_key_never_enters_the_pool_and_is_refused_from_memory():
    FakeTenant.verified = []
    pool = TenantPool(Config(pool_size=1, rejected_key_ttl=30), factory=FakeTenant)
    with pool.tenant(ApiKey.of("key-good")) as good:
        pass
    for _ in range(5):
        with pytest.raises(KeyRejected):
            with pool.tenant(ApiKey.of("bad-key")):
                pass
    assert FakeTenant.verified == ["key-good", "bad-key"]  # the gateway was asked once
    with pool.tenant(ApiKey.of("key-good")) as again:
        assert again is good and not good.closed  # the junk key evicted nobody


def test_concurrent_first_requests_of_a_new_key_ask_the_gateway_once():
    FakeTenant.verified = []
    pool = TenantPool(Config(pool_size=4), factory=FakeTenant)
    seen, errors = [], []

    def use(key):
        try:
            with pool.tenant(ApiKey.of(key)) as tenant:
                seen.append(tenant)
        except KeyRejected as exc:
            errors.append(exc)

    threads = [threading.Thread(target=use, args=(key,)) for key in ["key-new"] * 20 + ["bad-new"] * 20]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)
    assert sorted(FakeTenant.verified) == ["bad-new", "key-new"]
    assert len(seen) == 20 and len({id(t) for t in seen}) == 1 and len(errors) == 20


def test_a_key_rejected_later_is_dropped_and_remembered():
    FakeTenant.verified = []
    pool = TenantPool(Config(pool_size=4, rejected_key_ttl=30), factory=FakeTenant)
    with pool.tenant(ApiKey.of("key-revoked")) as tenant:
        tenant.rejection = KeyRejected(401, "revoked")  # a call of this request got a 401
    assert tenant.closed and len(pool) == 0
    with pytest.raises(KeyRejected):
        with pool.tenant(ApiKey.of("key-revoked")):
            pass
    assert FakeTenant.verified == ["key-revoked"]


def test_requests_waiting_for_the_gateways_word_on_a_key_hold_places_by_address_or_by_key():
    """A worker of 16 threads has 12 places. New keys' checks, and the requests waiting for them, hold
    places of their sender's address (an IPv6 client's /48): past the address's share, 429 at once,
    however many keys it makes up. A key the instance accepted before is counted by itself. Once the
    checks end, the places are free again."""
    asked, answer = threading.Event(), threading.Event()

    class SlowGateway(FakeTenant):
        def verify(self, vouched=True):
            asked.set()
            answer.wait(10)

    config = Config(http_threads=16)
    admission = Admission(config, Limits(Quotas.of(config)))
    pool = TenantPool(config, factory=SlowGateway, places=admission)
    answered, threads = [], []

    def first_list(key, address):
        with pool.tenant(ApiKey.of(key), address) as tenant:
            answered.append(tenant)

    def start(key, address):
        threads.append(threading.Thread(target=first_list, args=(key, address)))
        threads[-1].start()

    def held_by(count):
        deadline = time.monotonic() + 5
        while admission.used < count and time.monotonic() < deadline:
            time.sleep(0.01)
        return admission.used

    def refused(key, address):
        with pytest.raises(LimitReached) as refusal:
            with pool.tenant(ApiKey.of(key), address):
                pass
        return refusal.value.status, str(refusal.value)

    for i in range(6):  # the address's share: half of the 12
        start(f"key-new-{i}", "192.0.2.1")
    assert asked.wait(5) and held_by(6) == 6
    assert refused("key-new-6", "192.0.2.1")[0] == 429
    status, message = refused("key-new-0", "192.0.2.1")  # waiting for a check is no way around the share
    assert status == 429 and "from your address" in message
    pool.store.put("accepted", ApiKey.of("key-known").digest, True, 60)  # accepted before (another worker)
    start("key-known", "192.0.2.1")
    assert held_by(7) == 7  # not the address's
    start("key-v6-a", "2001:db8:1:1::/64")
    start("key-v6-b", "2001:db8:1:2::/64")  # another /64 of the same /48: the same holder
    assert held_by(9) == 9 and refused("key-v6-c", "2001:db8:1:3::/64")[0] == 429  # its share: (12 - 7) // 2
    answer.set()
    for thread in threads:
        thread.join(5)
    assert len(answered) == 9 and admission.used == 0
    with pool.tenant(ApiKey.of("key-new-6"), "192.0.2.1"):
        pass
