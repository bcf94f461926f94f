"""The deployment files as deployed: the systemd unit's exposure, and the real nginx with the
project's site file in front of a hosted server (limits at the door, streaming, logs)."""

import concurrent.futures
import ipaddress
import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import requests

from colabhive_mcp.keys import ApiKey
from colabhive_mcp.sandbox import DEMO_KEY, DEMO_KEY_B

from ..support.http_server import HttpServer, SourceAdapter
from ..support.nginx import Nginx
from ..support.http_client import ACCEPT_BOTH

pytestmark = pytest.mark.cluster

UNIT = Path(__file__).resolve().parents[2] / "conf" / "systemd" / "colabhive-mcp.service"
OAUTH_DROP_IN = UNIT.parent / "colabhive-mcp.service.d" / "oauth.conf"


@pytest.mark.parametrize("drop_ins", [[], [OAUTH_DROP_IN]], ids=["unit", "with-oauth-drop-in"])
def test_the_systemd_unit_exposes_little(drop_ins, tmp_path):
    """Measured as systemd loads it, from /etc/systemd/system of a root of its own, with its drop-ins."""
    if not shutil.which("systemd-analyze"):
        pytest.skip("systemd-analyze is not installed here: the unit's exposure cannot be measured")
    units = tmp_path / "etc" / "systemd" / "system"
    (units / f"{UNIT.name}.d").mkdir(parents=True)
    shutil.copy(UNIT, units)
    for drop_in in drop_ins:
        shutil.copy(drop_in, units / f"{UNIT.name}.d")
    done = subprocess.run(["systemd-analyze", "security", "--offline=yes", f"--root={tmp_path}", "--no-pager",
                           UNIT.name], capture_output=True, text=True, timeout=120)
    level = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", done.stdout)
    assert level, done.stdout[-2000:] + done.stderr[-2000:]
    assert float(level.group(1)) <= 1.2, done.stdout
    allow_list = re.search(r"IPAddressDeny=\s+(.*?)\s{2}", done.stdout)
    assert allow_list and ("does not define" in allow_list.group(1)) == bool(drop_ins), done.stdout


def test_the_oauth_drop_in_denies_no_public_address():
    """The drop-in lifts the unit's IPAddressDeny=any and denies only what the service never fetches a
    client metadata document from (non-global addresses), so claude.ai's and ChatGPT's are reachable."""
    lines = [line for line in OAUTH_DROP_IN.read_text().splitlines() if line.startswith("IPAddress")]
    assert lines[0] == "IPAddressDeny=" and all(line.startswith("IPAddressDeny=") for line in lines)
    denied = [entry for line in lines[1:] for entry in line.partition("=")[2].split()]
    assert "any" not in denied and {"link-local", "10.0.0.0/8", "fc00::/7"} <= set(denied)
    for entry in denied:
        if entry not in ("link-local", "multicast"):
            network = ipaddress.ip_network(entry)
            assert not (network[0].is_global or network[-1].is_global), entry


@pytest.fixture(scope="module")
def behind_nginx(gateway_sandbox):
    server = HttpServer(gateway_sandbox.url, "--http-workers", "2")
    proxy = Nginx([f"127.0.0.1:{server.port}"])
    try:
        checked = proxy.check()
        assert checked.returncode == 0, checked.stderr
        yield proxy.start()
    finally:
        proxy.stop()
        server.stop()


def through(proxy, body, key=DEMO_KEY, url=None, **headers):
    credential = {"Authorization": f"Bearer {key}"} if key else {}
    return requests.post(url or proxy.url, data=json.dumps(body), verify=proxy.cert, timeout=60, stream=True, headers={
        "Accept": ACCEPT_BOTH, "Content-Type": "application/json", **credential, **headers})


def test_sse_events_pass_nginx_as_they_happen(behind_nginx, sandbox):
    response = through(behind_nginx, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
    session = response.headers["Mcp-Session-Id"]
    through(behind_nginx, {"jsonrpc": "2.0", "method": "notifications/initialized"}, **{"Mcp-Session-Id": session})
    started = time.monotonic()
    answer = through(behind_nginx, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "batch-report", "arguments": {"seconds": 3}, "_meta": {"progressToken": "p"}}},
        **{"Mcp-Session-Id": session})
    assert answer.headers["Content-Type"].startswith("text/event-stream")
    seen = []
    for line in answer.iter_lines():
        if line.startswith(b"data:"):
            seen.append((time.monotonic() - started, json.loads(line[5:])))
    progress = [t for t, message in seen if message.get("method") == "notifications/progress"]
    final = [t for t, message in seen if message.get("id") == 2]
    assert progress and final and final[0] - progress[0] > 1  # the first progress came long before the end


def test_a_greedy_key_is_slowed_at_the_door_in_json_rpc_while_others_pass(behind_nginx, sandbox):
    listing = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    with concurrent.futures.ThreadPoolExecutor(40) as pool:
        answers = list(pool.map(lambda _: through(behind_nginx, listing, key="hive_greedy_made_up"), range(160)))
    limited = [a for a in answers if a.status_code == 429]
    assert limited and all(a.headers["Retry-After"] == "1" for a in limited)
    assert all(a.json()["error"]["code"] == -31429 for a in limited)
    assert {a.status_code for a in answers} <= {401, 429}
    assert through(behind_nginx, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
        key=DEMO_KEY_B).status_code == 200  # another key is not slowed by it


def spellings(key):
    """Ways a client may write one key: the scheme in any case, more spaces, X-API-Key, both."""
    for scheme in ("Bearer", "bearer", "BEARER", "bEaReR", "BeArEr"):
        for spaces in range(1, 6):
            yield {"Authorization": f"{scheme}{' ' * spaces}{key}"}
            yield {"Authorization": f"{scheme}{' ' * spaces}{key}", "X-API-Key": key}
    yield {"X-API-Key": key}


def test_every_spelling_of_a_key_shares_its_limits_at_the_door(behind_nginx, sandbox):
    """90 requests of one key spelt in 51 ways are counted as one key's (10 a second, a burst of 50),
    as the service itself reads them; a form the service refuses is refused, not a key of its own."""
    key = "hive_spelt_many_ways_0123"
    sandbox.add_key(key)
    forms = list(spellings(key))
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}}

    def send(i):
        return requests.post(behind_nginx.url, data=json.dumps(listing), verify=behind_nginx.cert, timeout=60, headers={
            "Accept": ACCEPT_BOTH, "Content-Type": "application/json", "MCP-Protocol-Version": "2026-07-28",
            "Mcp-Method": "tools/list", **forms[i % len(forms)]})

    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        statuses = [a.status_code for a in pool.map(send, range(90))]
    took = time.monotonic() - started
    assert set(statuses) <= {200, 429} and statuses.count(200) <= 50 + 10 * took + 2, (statuses, took)
    basic = through(behind_nginx, listing, key=None, Authorization="Basic dXNlcjpwYXNz", **{"X-API-Key": key})
    assert basic.status_code == 401


def test_every_spelling_of_a_key_reaches_one_instance(gateway_sandbox, sandbox):
    """Two instances behind the site: a key lands on one of them however it is spelt (its warm tenant,
    its limits and its confirmations live there)."""
    keys = [f"hive_affinity_{i}_0123456789" for i in range(3)]
    for key in keys:
        sandbox.add_key(key)
    instances = [HttpServer(gateway_sandbox.url, "--http-workers", "1") for _ in range(2)]
    proxy = Nginx([f"127.0.0.1:{instance.port}" for instance in instances])
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}}
    try:
        proxy.start()
        for key in keys:
            statuses = {through(proxy, listing, key=None, **form, **{"MCP-Protocol-Version": "2026-07-28",
                                                                     "Mcp-Method": "tools/list"}).status_code
                        for form in spellings(key)}
            assert 200 in statuses and statuses <= {200, 429}, statuses  # 429: nginx's rate for the key
        for key in keys:
            served = [sum(ApiKey.of(key).log_id in line for line in instance.stderr().splitlines())
                      for instance in instances]
            assert sorted(served)[0] == 0 and sorted(served)[1] > 0, (key, served)
    finally:
        proxy.stop()
        for instance in instances:
            instance.stop()


def test_a_keys_budget_holds_through_the_site(gateway_sandbox, sandbox, journal):
    """Two instances at their default workers behind the site, a budget of 10 billable calls: 32 calls
    of one key at once, and exactly 10 reach the gateway (the site keeps the key on one instance,
    whose workers count in one store)."""
    settings = {"COLABHIVE_BILLABLE_CALLS_PER_HOUR": "10", "COLABHIVE_SPEND_GUARD": "refuse"}
    instances = [HttpServer(gateway_sandbox.url, env=settings) for _ in range(2)]
    proxy = Nginx([f"127.0.0.1:{instance.port}" for instance in instances])
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "image-gen-tiny", "arguments": {"prompt": "a hive", "size": 16}, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}}
    headers = {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "image-gen-tiny"}
    try:
        proxy.start()
        with concurrent.futures.ThreadPoolExecutor(32) as pool:
            answers = list(pool.map(lambda _: through(proxy, call, **headers), range(32)))
    finally:
        proxy.stop()
        for instance in instances:
            instance.stop()
    assert {a.status_code for a in answers} == {200}
    results = [a.json()["result"] for a in answers]
    assert sum(not r.get("isError") for r in results) == 10
    assert all("budget of 10 billable" in r["content"][0]["text"] for r in results if r.get("isError"))
    assert [e["slug"] for e in journal("invoke")] == ["image-gen-tiny"] * 10


def test_no_part_of_a_credential_reaches_nginx_logs(behind_nginx, sandbox):
    """Keys in every form, an overlong token among them (past 255 bytes nginx would write a limit's
    key to its error log), appear in neither of nginx's logs."""
    secret = "hive_planted_" + "s3cr3t" * 50
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    forms = [{"Authorization": f"Bearer {secret}"}, {"Authorization": f"bearer   {secret[:200]}"},
             {"X-API-Key": secret}, {"X-API-Key": secret[:200]}, {"Authorization": f"Basic {secret}"},
             {"Authorization": f"Bearer {secret[:100]}", "X-API-Key": secret[:120]}]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda h: through(behind_nginx, ping, key=None, **h), forms * 2))
    assert {a.status_code for a in answers} <= {401, 429}
    logs = behind_nginx.access_log() + behind_nginx.error_log()
    assert "s3cr3t" not in logs and "planted" not in logs


class NamedSource(SourceAdapter):
    """Connections from one local address to the site's name (``localhost``), whatever address is dialled."""

    def init_poolmanager(self, *args, **kwargs):
        super().init_poolmanager(*args, server_hostname="localhost", **kwargs)


@pytest.fixture
def ipv6_clients():
    """Addresses of this machine to send from: two in one /64, one in another (``ip addr``: root)."""
    addresses = ["2001:db8:7:1::10", "2001:db8:7:1::11", "2001:db8:7:2::10"]
    added = []
    try:
        for address in addresses:
            done = subprocess.run(["ip", "-6", "addr", "add", f"{address}/64", "dev", "lo", "nodad"],
                                  capture_output=True, text=True, timeout=30)
            if done.returncode != 0:
                pytest.skip(f"cannot add an IPv6 address here: {done.stderr.strip()}")
            added.append(address)
        yield addresses
    finally:
        for address in added:
            subprocess.run(["ip", "-6", "addr", "del", f"{address}/64", "dev", "lo"], capture_output=True, timeout=30)


def test_nginx_counts_an_ipv6_client_by_its_64(gateway_sandbox, ipv6_clients):
    """The per-address limits (20 a second, a burst of 100) see two addresses of one /64 as one
    client, and an address of another /64 as another."""
    server = HttpServer(gateway_sandbox.url)
    proxy = Nginx([f"127.0.0.1:{server.port}"], ipv6=True)
    try:
        proxy.start()
        url = f"https://[{ipv6_clients[0]}]:{proxy.port}/mcp"
        sessions = []
        for address in ipv6_clients:
            session = requests.Session()
            session.mount("https://", NamedSource(address))
            sessions.append(session)

        def ping(session):
            return session.post(url, data=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}), timeout=30,
                                verify=proxy.cert, headers={"Content-Type": "application/json", "Accept": ACCEPT_BOTH,
                                                            "Host": "localhost"}).status_code

        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            one_64 = list(pool.map(ping, [sessions[0], sessions[1]] * 80))
        other_64 = [ping(sessions[2]) for _ in range(20)]
        assert set(one_64) == {401, 429} and one_64.count(429) >= 20, one_64  # 160 past a burst of 100
        assert other_64 == [401] * 20
    finally:
        proxy.stop()
        server.stop()


def test_nginx_logs_no_session_ids_and_keeps_metrics_private(behind_nginx, sandbox):
    stream = requests.get(behind_nginx.root + "/sse", headers={"Accept": "text/event-stream",
                                                               "Authorization": f"Bearer {DEMO_KEY}"},
                          stream=True, verify=behind_nginx.cert, timeout=30)
    endpoint = next(line for line in stream.iter_lines() if line.startswith(b"data:"))[5:].strip().decode()
    session_id = endpoint.split("session_id=")[1]
    posted = through(behind_nginx, {"jsonrpc": "2.0", "id": 1, "method": "ping"}, url=behind_nginx.root + endpoint)
    assert posted.status_code in (202, 404)  # 404: the worker that holds the stream did not get it
    stream.close()
    assert requests.get(behind_nginx.root + "/metrics", verify=behind_nginx.cert, timeout=10).status_code == 403
    log = behind_nginx.access_log()
    assert "POST /messages HTTP" in log and session_id not in log and "session_id" not in log
    assert DEMO_KEY not in log and "Bearer" not in log
