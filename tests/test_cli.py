"""The command line: resolved configuration, the standalone sandbox, flags without a subcommand."""

import socket
import subprocess
import sys
import time

import requests

from colabhive_mcp.cli import main
from colabhive_mcp.sandbox import DEMO_KEY

from .test_stdio import server_env


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_config_prints_each_value_and_its_source_with_the_key_redacted(capsys, monkeypatch):
    monkeypatch.setenv("COLABHIVE_API_KEY", "hive_cli_secret_value_123")
    monkeypatch.setenv("COLABHIVE_MANIFEST_TTL", "90")
    assert main(["config", "--deny", "crm-*"]) == 0
    out = capsys.readouterr().out
    assert "hive_cli_secret_value_123" not in out
    lines = {line.split()[0]: line for line in out.splitlines()}
    assert "[environment COLABHIVE_API_KEY]" in lines["api_key"] and "sha256" in lines["api_key"]
    assert "90.0" in lines["manifest_ttl"] and "[environment COLABHIVE_MANIFEST_TTL]" in lines["manifest_ttl"]
    assert "crm-*" in lines["deny"] and "[flag --deny]" in lines["deny"]
    assert "[default]" in lines["poll_max_wait"]


def test_a_bad_value_exits_2_with_the_reason(capsys):
    assert main(["config", "--min-stability", "solid"]) == 2
    assert "min_stability = 'solid' from flag --min-stability: must be one of" in capsys.readouterr().err


def test_the_standalone_sandbox_serves_the_contract():
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "colabhive_mcp", "sandbox", "--port", str(port)],
                               env=server_env(), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}/api/builder/v1/mcp/manifest"
        deadline = time.monotonic() + 20
        while True:
            try:
                response = requests.get(url, headers={"X-API-Key": DEMO_KEY}, timeout=2)
                break
            except requests.ConnectionError:
                assert time.monotonic() < deadline, "the sandbox did not start"
                time.sleep(0.1)
        assert response.status_code == 200 and response.json()["tools"]
        assert requests.get(url, timeout=2).status_code == 401
    finally:
        process.terminate()
        process.wait(10)
    assert f"127.0.0.1:{port}".encode() in process.stderr.read()
