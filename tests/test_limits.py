"""Per-key limits: one key's flood gets a clear error and never starves the others."""

import threading

import pytest

from colabhive_mcp.protocol import Server
from colabhive_mcp.sandbox import DEMO_KEY_B
from colabhive_mcp.tenant import Tenant

from .test_protocol import Client
from .waiting import wait_until


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
