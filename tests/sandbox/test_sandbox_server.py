"""Running the sandbox: in-process start/stop, standalone ``serve``, concurrent requests."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import requests

from colabhive_mcp.sandbox import API_PREFIX, DEMO_KEY, DEMO_KEY_B, DEMO_KEYS, Sandbox


def test_public_constants() -> None:
    assert API_PREFIX == "/api/builder/v1"
    assert DEMO_KEYS == {DEMO_KEY: "alpha", DEMO_KEY_B: "beta"}


def test_context_manager_starts_and_stops_a_server() -> None:
    with Sandbox(page_size=50) as sandbox:
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+", sandbox.root_url) and sandbox.port > 0
        assert sandbox.url == sandbox.root_url + API_PREFIX
        response = requests.get(f"{sandbox.url}/mcp/manifest", headers={"X-API-Key": DEMO_KEY}, timeout=5)
        assert response.json()["nextCursor"] is None  # page_size reached the app
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.get(f"{sandbox.url}/mcp/manifest", timeout=2)


def test_stop_releases_held_requests() -> None:
    sandbox = Sandbox().start()
    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(
            requests.post, f"{sandbox.url}/actions/batch-report:invoke",
            json={"input": {"seconds": 60}, "sync": True, "sync_timeout_s": 60},
            headers={"X-API-Key": DEMO_KEY}, timeout=10,
        )
        time.sleep(0.2)
        started = time.monotonic()
        sandbox.stop()
        assert held.result().status_code == 202
        assert time.monotonic() - started < 2


def test_sync_requests_are_served_in_parallel(sb: Sandbox, alpha: Any) -> None:
    started = time.monotonic()
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(
            lambda i: requests.post(
                f"{sb.url}/actions/image-gen-tiny:invoke", headers={"X-API-Key": DEMO_KEY},
                json={"input": {"prompt": f"p{i}"}, "sync": True}, timeout=10,
            ),
            range(4),
        ))
    assert [answer.json()["status"] for answer in answers] == ["succeeded"] * 4
    assert time.monotonic() - started < 1.5  # four 0.5 s jobs, held side by side


def test_serve_runs_standalone_and_announces_its_url_and_keys() -> None:
    code = "from colabhive_mcp.sandbox import serve; serve(port=0)"
    process = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True)
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        assert DEMO_KEY in line and DEMO_KEY_B in line
        url = re.search(r"http://\S+", line).group(0)  # type: ignore[union-attr]
        assert url.endswith(API_PREFIX)
        response = requests.get(f"{url}/mcp/manifest/echo", headers={"X-API-Key": DEMO_KEY}, timeout=5)
        assert response.json()["name"] == "echo"
    finally:
        process.terminate()
        process.wait(timeout=5)
