"""Structured logs of a whole session: every event with its fields, and never a secret."""

import datetime
import json
import subprocess
import sys
import time

import pytest

from colabhive_mcp.cli.demo import StdioPeer
from colabhive_mcp.sandbox import DEMO_KEY

from .support.environ import server_env

pytestmark = pytest.mark.slow

PLANTED = "hive_planted_secret_0123456789"


def run_session(sandbox, tmp_path, *extra):
    log_file = tmp_path / "stderr.log"
    with open(log_file, "wb") as stderr:
        peer = StdioPeer([sys.executable, "-m", "colabhive_mcp", "stdio", "--api-url", sandbox.url, *extra],
                         env=server_env(COLABHIVE_API_KEY=DEMO_KEY), stderr=stderr)
        try:
            peer.initialize()
            peer.request("tools/list")
            peer.request("tools/call", {"name": "echo", "arguments": {"text": "hello"}})
            peer.request("tools/call", {"name": "batch-report", "arguments": {"seconds": 1.5}})
            refused = peer.request("tools/call", {"name": "crm-create-contact", "arguments": {"name": PLANTED}})
            assert refused["result"]["isError"] and PLANTED not in json.dumps(refused)  # a key in arguments
            sandbox.faults.add(route="invoke", kind="status", status=500,
                               body={"detail": f"key {PLANTED} is not allowed"})
            failed = peer.request("tools/call", {"name": "hive-chat", "arguments": {"prompt": "x"}})
        finally:
            peer.close()
    records = [json.loads(line) for line in log_file.read_text().splitlines()]
    return records, failed, log_file.read_text()


def events(records, name):
    return [r for r in records if r["event"] == name]


def test_a_session_logs_every_event_with_its_fields(sandbox, tmp_path):
    sandbox.faults.add(route="manifest", kind="latency", seconds=0.3, count=None)  # fetches of known length
    # (every one: a request of another test's server still running in the background would take a single one)
    began = time.monotonic()
    records, failed, raw = run_session(sandbox, tmp_path)
    session_ms = (time.monotonic() - began) * 1000
    started = events(records, "mcp.session.started")[0]
    assert started["client"] == "colabhive-demo" and started["client_version"] == "1"
    assert started["protocol_version"] == "2025-11-25" and started["transport"] == "stdio"
    assert started["profile"] == "unknown"
    fetched = events(records, "manifest.fetched")[0]
    assert fetched["status"] == 200 and fetched["tools"] > 10 and fetched["bytes"] > 0 and fetched["etag"]
    assert 300 <= fetched["duration_ms"] < session_ms  # milliseconds, of the fetch alone
    invoked = {r["tool"]: r for r in events(records, "mcp.tool.invoked")}
    assert invoked["echo"]["mode"] == "sync" and invoked["echo"]["status"] == "succeeded"
    assert invoked["batch-report"]["mode"] == "polled" and invoked["batch-report"]["polls"] >= 1
    assert invoked["batch-report"]["status"] == "completed" and invoked["batch-report"]["latency_ms"] > 1000
    assert invoked["hive-chat"]["status"] == "gateway_error" and invoked["hive-chat"]["http_status"] == 500
    tenant = events(records, "stdio.ready")[0]["tenant"]
    for record in events(records, "mcp.tool.invoked") + events(records, "manifest.fetched"):
        assert record["tenant"] == tenant and len(record["request_id"]) == 12  # every record of a request
    assert all(r["level"] in ("debug", "info", "warning", "error") for r in records)
    assert PLANTED not in raw and DEMO_KEY not in raw
    assert failed["result"]["isError"] and PLANTED not in json.dumps(failed)


def test_frame_logging_is_redacted(sandbox, tmp_path):
    records, _failed, raw = run_session(sandbox, tmp_path, "--log-frames")
    frames = events(records, "mcp.frame")
    assert {f["direction"] for f in frames} == {"in", "out"}
    assert any('"method":"tools/call"' in f["frame"] for f in frames)
    assert PLANTED not in raw


def test_exceptions_are_logged_without_secrets():
    code = ("from colabhive_mcp import logs\nlogs.configure('info', 'json')\n"
            f"try:\n    raise RuntimeError('token {PLANTED}')\nexcept RuntimeError:\n"
            "    logs.log.exception('boom')\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    record = json.loads(result.stderr.splitlines()[-1])
    assert record["exc"].startswith("RuntimeError: token hive_") and PLANTED not in result.stderr
    assert record["trace"] and result.stdout == ""


def test_json_records_are_written_at_once_in_order_and_without_loguru():
    code = ("import sys, time\nfrom colabhive_mcp import logs\nlogs.configure('info', 'json')\n"
            "logs.log.bind(n=1).info('first')\ntime.sleep(0.3)\nlogs.log.bind(n=0).debug('below the level')\n"
            "logs.log.bind(n=2).warning('second')\nprint('loguru loaded:', 'loguru' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert result.stdout == "loguru loaded: False\n"  # stdio answers its handshake without it
    records = [json.loads(line) for line in result.stderr.splitlines()]
    assert [(r["event"], r["level"], r["n"]) for r in records] == [("first", "info", 1), ("second", "warning", 2)]
    gap = datetime.datetime.fromisoformat(records[1]["ts"]) - datetime.datetime.fromisoformat(records[0]["ts"])
    assert gap.total_seconds() >= 0.25 and records[0]["pid"] > 0


def test_text_records_are_readable_and_redacted_too():
    code = ("from colabhive_mcp import logs\nlogs.configure('info', 'text')\n"
            f"logs.log.bind(key='{PLANTED}', n=7).warning('text.event')\n"
            f"try:\n    raise RuntimeError('token {PLANTED}')\nexcept RuntimeError:\n"
            "    logs.log.exception('boom')\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    first, second = result.stderr.splitlines()
    assert "WARNING text.event" in first and "key=hive_…redacted" in first and "n=7" in first
    assert "ERROR   boom" in second and "exc=RuntimeError: token hive_…redacted" in second
    assert PLANTED not in result.stderr


def test_sealed_oauth_values_are_redacted_by_their_prefixes():
    from colabhive_mcp.logs import redact

    for prefix in ("hmcp_at_", "hmcp_rt_", "hmcp_code_", "hmcp_client_", "hmcp_form_"):
        assert redact(f"token={prefix}AbC-d_9xYz and more") == "token=hmcp_…redacted and more", prefix
    assert redact("a hive_abcdef key, Bearer xyz123") == "a hive_…redacted key, Bearer …redacted"
    assert redact("hmcp_other_abcdef stays") == "hmcp_other_abcdef stays"


def test_secrets_are_redacted_however_json_escapes_them_and_whatever_holds_them():
    code = ("import pathlib\nfrom colabhive_mcp import logs\nlogs.configure('info', 'json')\n"
            f"logs.log.bind(tab='Bearer\\t{PLANTED[5:]}', line='BEARER\\n{PLANTED[5:]}', nested=[{{'k': '{PLANTED}'}}],\n"
            f"             path=pathlib.Path('/tmp/{PLANTED}'), plain='nothing secret').info('escaped')\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    record = json.loads(result.stderr)
    assert record["tab"] == record["line"] == "Bearer …redacted" and record["nested"] == [{"k": "hive_…redacted"}]
    assert record["path"] == "/tmp/hive_…redacted" and record["plain"] == "nothing secret"
    assert PLANTED[5:] not in result.stderr


def test_a_process_forked_while_a_thread_writes_a_record_can_still_log():
    """gunicorn forks its workers from a process that may be logging: a child must not inherit the lock taken."""
    code = ("import os, sys, threading, time\nfrom colabhive_mcp import logs\n"
            "class Slow:\n    def write(self, text):\n        time.sleep(0.3)\n        sys.stderr.write(text)\n"
            "    def flush(self):\n        sys.stderr.flush()\n    def isatty(self):\n        return False\n"
            "logs.configure('info', 'json', stream=Slow())\n"
            "threading.Thread(target=lambda: logs.log.info('slow')).start()\ntime.sleep(0.1)  # inside the write\n"
            "pid = os.fork()\nif pid == 0:\n    logs.log.info('child')\n    os._exit(0)\n"
            "print('child status', os.waitpid(pid, 0)[1])\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=20)
    assert result.stdout == "child status 0\n"
    events = [json.loads(line)["event"] for line in result.stderr.splitlines() if line.startswith("{")]
    assert sorted(events) == ["child", "slow"]
