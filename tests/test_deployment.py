"""The deployment files as deployed: the systemd unit's exposure, and the real nginx with the
project's site file in front of a hosted server (limits at the door, streaming, logs)."""

import concurrent.futures
import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import requests

from colabhive_mcp.sandbox import DEMO_KEY, DEMO_KEY_B

from .http_server import HttpServer
from .nginx import Nginx
from .test_http import ACCEPT_BOTH

UNIT = Path(__file__).resolve().parent.parent / "conf" / "systemd" / "colabhive-mcp.service"


def test_the_systemd_unit_exposes_little():
    if not shutil.which("systemd-analyze"):
        pytest.skip("systemd-analyze is not installed here: the unit's exposure cannot be measured")
    done = subprocess.run(["systemd-analyze", "security", "--offline=yes", "--no-pager", str(UNIT)],
                          capture_output=True, text=True, timeout=120)
    level = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", done.stdout)
    assert level, done.stdout[-2000:] + done.stderr[-2000:]
    assert float(level.group(1)) <= 1.2, done.stdout


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
    return requests.post(url or proxy.url, data=json.dumps(body), verify=proxy.cert, timeout=60, stream=True, headers={
        "Accept": ACCEPT_BOTH, "Content-Type": "application/json", "Authorization": f"Bearer {key}", **headers})


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
