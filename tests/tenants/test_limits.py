"""Per-key limits: one key's flood gets a clear error and never starves the others."""

import threading
import time

import pytest

from colabhive_mcp.keys import KeyRejected
from colabhive_mcp.protocol import Server
from colabhive_mcp.sandbox import DEMO_KEY_B
from colabhive_mcp.settings.config import Config
from colabhive_mcp.tenants.limits import LimitReached, Limits, Quotas
from colabhive_mcp.tenants.tenant import Tenant

from ..support.core_client import Client
from ..support.waiting import wait_until


@pytest.mark.slow
def test_concurrent_calls_per_key_are_capped_without_touching_other_keys(config, journal):
    limited = config.replace(tenant_max_concurrent=2)
    server = Server(limited)
    busy = Client(server, Tenant(limited, limited.api_key))
    busy.initialize()
    busy.request("tools/list")
    workers = [threading.Thread(target=lambda: busy.call("batch-report", {"seconds": 2})) for _ in range(2)]
    for worker in workers:
        worker.start()
    assert wait_until(lambda: len(journal("invoke")) >= 2)
    refused = busy.call("echo", {"text": "one too many"})["result"]
    assert refused["isError"] and "limit is 2" in refused["content"][0]["text"]
    assert len(journal("invoke")) == 2  # the refused call never reached the gateway
    other = Client(server, Tenant(limited, DEMO_KEY_B))
    other.initialize()
    assert other.call("echo", {"text": "still served"})["result"]["content"][0]["text"] == "still served"
    for worker in workers:
        worker.join(10)
    assert busy.call("echo", {"text": "a place is free again"})["result"]["content"][0]["text"] == "a place is free again"


@pytest.mark.slow
def test_calls_per_minute_per_key(config):
    limited = config.replace(tenant_calls_per_minute=3)
    client = Client(Server(limited), Tenant(limited, limited.api_key))
    client.initialize()
    for i in range(3):
        assert not client.call("echo", {"text": str(i)})["result"].get("isError")
    refused = client.call("echo", {"text": "fourth"})["result"]
    assert refused["isError"] and "in the last minute" in refused["content"][0]["text"]


def rejected_check(limits, address):
    """One new key from ``address`` that the gateway rejects (or the refusal before it is asked)."""
    try:
        with limits.new_key(address):
            raise KeyRejected(401, "unknown key")
    except KeyRejected:
        return 401
    except LimitReached as exc:
        assert "sent" in exc.message and "rejected in the last minute" in exc.message
        return exc.status


def test_an_ipv6_site_sends_at_most_four_addresses_worth_of_rejected_keys():
    """Each /64 of one /48 may send 20 rejected keys a minute, and the /48 four times that: its 65,536 /64s
    cannot spend the instance's new-key budget alone. Another /48, and any IPv4 address, are not touched."""
    limits = Limits(Quotas.of(Config(rejected_keys_per_minute=20, cold_fetches_per_minute=0)))
    site = [f"2001:db8:1:{i:x}::/64" for i in range(6)]
    assert [rejected_check(limits, site[0]) for _ in range(21)] == [401] * 20 + [429]  # its own 20
    statuses = [rejected_check(limits, address) for address in site[1:] for _ in range(20)]
    assert statuses.count(401) == 60 and statuses.count(429) == 40  # 80 for the site in all
    with pytest.raises(LimitReached, match="Your network") as refused:
        with limits.new_key("2001:db8:1:ff::/64"):
            pass
    assert refused.value.status == 429 and 0 < refused.value.retry_after <= 60
    with limits.new_key("2001:db8:2:1::/64"), limits.new_key("203.0.113.7"):  # others are checked as ever
        pass
    assert [rejected_check(limits, f"203.0.113.{i}") for i in range(1, 9) for _ in range(20)].count(401) == 160


def test_a_sites_new_keys_are_checked_a_few_at_a_time_whatever_its_addresses():
    """A burst of new keys from many /64s of one /48 is checked as a burst from one address would be:
    eight at a time in each process, so that its first refusals count before the rest are asked about."""
    limits = Limits(Quotas.of(Config()))
    released = threading.Event()
    holding = []

    def check(address):
        with limits.new_key(address):
            holding.append(address)
            released.wait(5)

    threads = [threading.Thread(target=check, args=(f"2001:db8:1:{i:x}::/64",)) for i in range(12)]
    for thread in threads:
        thread.start()
    assert wait_until(lambda: len(holding) == 8)
    time.sleep(0.2)
    assert len(holding) == 8  # the other four wait their turn
    with limits.new_key("2001:db8:2::/64"):  # another site is not kept waiting
        pass
    released.set()
    for thread in threads:
        thread.join(10)
    assert len(holding) == 12
