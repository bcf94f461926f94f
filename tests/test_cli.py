"""The command line: resolved configuration, the standalone sandbox, flags without a subcommand."""

import json
import socket
import subprocess
import sys
import time

import pytest
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


def cli(*args, sandbox=None, key=DEMO_KEY, cwd=None):
    argv = [sys.executable, "-m", "colabhive_mcp", *args]
    if args[0] != "client-config":
        argv += ["--log-level", "error"]
    if sandbox is not None:
        argv += ["--api-url", sandbox.url]
    env = server_env(**({"COLABHIVE_API_KEY": key} if key else {}))
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, cwd=cwd)


def test_check_says_what_is_wrong_with_its_exit_code(sandbox):
    ok = cli("check", sandbox=sandbox, key=DEMO_KEY)
    assert ok.returncode == 0 and "shown" in ok.stdout
    hidden = cli("check", "--deny", "crm-*", sandbox=sandbox)
    assert hidden.returncode == 0 and "crm-create-contact: matched by the deny pattern 'crm-*'" in hidden.stdout
    assert cli("check", "--deny", "*", sandbox=sandbox).returncode == 6
    assert cli("check", sandbox=sandbox, key="hive_wrong_key_000").returncode == 5
    assert cli("check", sandbox=sandbox, key=None).returncode == 3
    unreachable = cli("check", "--api-url", f"http://127.0.0.1:{free_port()}", "--retries", "0")
    assert unreachable.returncode == 4 and "FAILED" in unreachable.stdout


def test_tools_shows_what_an_agent_sees(sandbox):
    listed = cli("tools", "--json", sandbox=sandbox)
    names = [t["name"] for t in json.loads(listed.stdout)]
    assert listed.returncode == 0 and "hive-chat" in names and names == sorted(names)
    table = cli("tools", "--client", "cursor-vscode", sandbox=sandbox)
    assert "crm-create-contact" in table.stdout and "writes" in table.stdout and table.stdout.strip().endswith("tools")


def test_call_runs_a_tool_and_saves_media(sandbox, tmp_path):
    echo = cli("call", "echo", "--args", '{"text": "from the cli"}', sandbox=sandbox)
    assert echo.returncode == 0 and echo.stdout.strip() == "from the cli"
    image = cli("call", "image-gen-tiny", "--args", '{"prompt": "bee", "size": 16}', "--out", str(tmp_path),
                sandbox=sandbox)
    saved = tmp_path / "image-gen-tiny-0.png"
    assert image.returncode == 0 and saved.read_bytes().startswith(b"\x89PNG")
    slow = cli("call", "batch-report", "--args", '{"seconds": 2}', sandbox=sandbox)
    assert "report ready" in slow.stdout and "step" in slow.stderr  # the live progress line
    assert cli("call", "flaky-translate", "--args", '{"text": "x"}', sandbox=sandbox).returncode == 1
    assert cli("call", "nope", sandbox=sandbox).returncode == 2
    assert cli("call", "echo", "--args", "[1]", sandbox=sandbox).returncode == 2


def test_call_follows_the_continuations_past_the_hosts_deadline_to_the_result(sandbox):
    slow = cli("call", "batch-report", "--args", '{"seconds": 4}', "--host-deadline", "2", sandbox=sandbox)
    assert slow.returncode == 0 and slow.stdout.strip().startswith("report ready"), slow.stdout + slow.stderr
    assert len([e for e in sandbox.journal_entries() if e["route"] == "invoke"]) == 1


@pytest.mark.parametrize("client", ["claude-desktop", "cursor", "claude-code", "n8n", "vscode"])
@pytest.mark.parametrize("url", [None, "https://mcp.example.com/mcp"])
def test_client_config_prints_a_snippet(client, url):
    result = cli("client-config", client, *(["--url", url] if url else []))
    assert result.returncode == 0
    if client == "claude-code":
        assert result.stdout.startswith("claude mcp add")
    else:
        snippet = json.loads(result.stdout)
        assert (url or "colabhive") in json.dumps(snippet)
