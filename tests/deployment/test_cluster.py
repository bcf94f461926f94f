"""The product as the architecture deploys it: scripts/cluster.py starts two instances (default
workers each) behind the distribution's nginx running the shipped site; clients talk to nginx."""

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import anyio
import pytest
import requests

from colabhive_mcp.sandbox import DEMO_KEY, DEMO_KEY_B

from ..support.http_server import SECRET, TUNED, log_events
from ..support.nginx import ROOT, binary, free_address
from ..support.http_client import MODERN, initialize, modern, post, rpc, sdk_session
from ..support.waiting import wait_until

pytestmark = pytest.mark.cluster

TTL = 2.0
TASKS = {"io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}}


class Running:
    """scripts/cluster.py as a user runs it; its instances' logs go to a file the tests read."""

    def __init__(self, api_url):
        self.log = tempfile.NamedTemporaryFile(prefix="cluster-", suffix=".log", delete=False)
        environ = {k: v for k, v in os.environ.items() if not k.startswith("COLABHIVE_")}
        environ.update({"XDG_CONFIG_HOME": os.devnull, "COLABHIVE_LOG_FORMAT": "json", "COLABHIVE_SESSION_SECRET": SECRET,
                        **TUNED, "COLABHIVE_MANIFEST_TTL": str(TTL)})
        self.process = subprocess.Popen(
            [sys.executable, str(ROOT / "scripts" / "cluster.py"), "--instances", "2", "--listen", free_address(),
             "--api-url", api_url, "--nginx", binary()],
            env=environ, stdout=subprocess.PIPE, stderr=self.log, text=True)
        started = json.loads(self.process.stdout.readline() or "{}")
        assert "url" in started, Path(self.log.name).read_text()[-3000:]
        self.url, self.instances = started["url"], started["instances"]

    def events(self, name):
        return log_events(Path(self.log.name).read_text(), name)

    def stop(self):
        self.process.terminate()
        self.process.wait(90)
        os.unlink(self.log.name)


@pytest.fixture(scope="module")
def cluster(gateway_sandbox):
    running = Running(gateway_sandbox.url)
    yield running
    running.stop()


@pytest.mark.parametrize("mode,version", [("legacy", "2025-11-25"), ("auto", MODERN)])
def test_the_official_sdk_through_nginx_in_both_eras(cluster, sandbox, mode, version):
    negotiated, names, echo, slow, progress, failed = anyio.run(sdk_session, cluster.url, DEMO_KEY, mode)
    assert negotiated == version and "alpha-classifier" in names and "beta-sentiment" not in names
    assert echo == f"hello {mode}" and "report ready" in slow and failed and len(progress) >= 3


def test_progress_arrives_unbuffered_through_nginx(cluster, sandbox):
    session = initialize(cluster.url)
    started = time.monotonic()
    answer = requests.post(cluster.url, stream=True, timeout=60, data=json.dumps({
        "jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {
            "name": "batch-report", "arguments": {"seconds": 4}, "_meta": {"progressToken": "p"}}}), headers={
        "Accept": "application/json, text/event-stream", "Content-Type": "application/json",
        "Authorization": f"Bearer {DEMO_KEY}", "Mcp-Session-Id": session})
    first = None
    for line in answer.iter_lines():
        if line.startswith(b"data:") and b"notifications/progress" in line and first is None:
            first = time.monotonic() - started
    assert first is not None and first < 2, first


def test_delete_is_honoured_by_every_worker(cluster, sandbox):
    session = initialize(cluster.url)
    deleted = requests.delete(cluster.url, timeout=30, headers={"Authorization": f"Bearer {DEMO_KEY}",
                                                                "Mcp-Session-Id": session})
    assert deleted.status_code == 204
    with ThreadPoolExecutor(4) as pool:  # at once: nginx spreads them over upstream connections, so workers
        pings = list(pool.map(lambda _: rpc(cluster.url, "ping", session=session).status_code, range(20)))
    assert pings == [404] * 20


def test_a_task_created_through_one_instance_is_read_through_the_other(cluster, sandbox):
    first, second = cluster.instances
    created = modern(first, "tools/call", {"name": "batch-report", "arguments": {"seconds": 1}, "_meta": TASKS})
    task = created.json()["result"]
    assert task["resultType"] == "task", task
    deadline = time.monotonic() + 20
    while True:
        read = modern(second, "tasks/get", {"taskId": task["taskId"], "_meta": TASKS},
                      **{"Mcp-Name": task["taskId"]}).json()
        assert "result" in read, read
        read = read["result"]
        if read["status"] != "working" or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert read["status"] == "completed" and "report ready" in read["result"]["content"][0]["text"]
    other_key = modern(second, "tasks/get", {"taskId": task["taskId"], "_meta": TASKS}, key=DEMO_KEY_B,
                       **{"Mcp-Name": task["taskId"]}).json()
    assert "error" in other_key  # bound to its key, on every instance


def test_a_cancel_through_nginx_reaches_the_gateway(cluster, sandbox, own_trace):
    session = initialize(cluster.url)
    call = threading.Thread(target=lambda: rpc(cluster.url, "tools/call", {
        "name": "batch-report", "arguments": {"seconds": 60}, "_meta": {"progressToken": 1}}, session=session, id_=41,
        **own_trace.headers))
    call.start()
    assert wait_until(lambda: own_trace.journal("poll"), timeout=15), "the call never reached the gateway"
    assert post(cluster.url, {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 41}},
                **{"Mcp-Session-Id": session}).status_code == 202
    assert wait_until(lambda: own_trace.journal("cancel"), timeout=10), "the cancel never reached the gateway"
    call.join(15)


def test_every_worker_serves_the_last_good_manifest_while_the_gateway_fails(cluster, sandbox):
    listed = modern(cluster.url, "tools/list").json()["result"]["tools"]
    sandbox.faults.add(route="manifest", kind="status", count=None, status=503)
    try:
        time.sleep(TTL)  # every copy is due for revalidation
        mark = len(cluster.events("manifest.stale"))
        deadline = time.monotonic() + 30
        while len({e["pid"] for e in cluster.events("manifest.stale")[mark:]}) < 2:  # the key's instance: 2 workers
            assert time.monotonic() < deadline, "the requests never reached both workers"
            with ThreadPoolExecutor(4) as pool:  # at once: nginx opens more upstream connections, to either worker
                answers = list(pool.map(lambda _: modern(cluster.url, "tools/list"), range(4)))
            for answer in answers:
                assert answer.status_code == 200 and answer.json()["result"]["tools"] == listed, answer.text
            time.sleep(0.5)  # within nginx's rate per key
    finally:
        sandbox.faults.clear()


def test_manifest_requests_per_key_are_bounded_by_instances_and_ttl(cluster, sandbox, journal):
    seconds = 8.0
    stop = time.monotonic() + seconds

    def keep_listing(key):  # three clients per key, each twice a second: within nginx's rate per key
        while time.monotonic() < stop:
            assert modern(cluster.url, "tools/list", key=key).status_code == 200
            time.sleep(0.5)

    clients = [threading.Thread(target=keep_listing, args=(key,)) for key in (DEMO_KEY, DEMO_KEY_B) * 3]
    for client in clients:
        client.start()
    for client in clients:
        client.join()
    for key in {e["key"] for e in journal("manifest")}:
        asked = [e for e in journal("manifest") if e["key"] == key and e["cursor"] is None]
        assert len(asked) <= len(cluster.instances) * (seconds / TTL + 1), asked
