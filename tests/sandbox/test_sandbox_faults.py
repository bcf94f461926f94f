"""Fault injection: every kind is observable by a real HTTP client."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import requests

from colabhive_mcp.sandbox import Sandbox


def test_status_fault_with_json_body_and_retry_after(sb: Sandbox, alpha: Any) -> None:
    sb.faults.add(route="manifest", kind="status", retry_after=7)
    failed = alpha.get("/mcp/manifest")
    assert failed.status_code == 503 and failed.json() == {"detail": "injected failure"}
    assert failed.headers["Retry-After"] == "7"
    assert alpha.get("/mcp/manifest").status_code == 200  # count=1 is used up


def test_status_fault_with_a_raw_body(sb: Sandbox, alpha: Any) -> None:
    sb.faults.add(route="poll", kind="status", status=502, body="<html>bad gateway</html>")
    response = alpha.poll("inv_anything")
    assert response.status_code == 502 and response.text == "<html>bad gateway</html>"


def test_rate_limit(sb: Sandbox, alpha: Any) -> None:
    sb.faults.add(route="invoke", kind="rate_limit", retry_after=2)
    response = alpha.invoke("echo", {"text": "x"})
    assert response.status_code == 429 and response.headers["Retry-After"] == "2"


def test_latency_delays_then_serves(sb: Sandbox, alpha: Any) -> None:
    sb.faults.add(route="invoke", kind="latency", seconds=0.3)
    started = time.monotonic()
    response = alpha.invoke("echo", {"text": "late"})
    assert time.monotonic() - started >= 0.3
    assert response.status_code == 200 and response.json()["result"] == "late"


def test_hang_then_close(sb: Sandbox, alpha: Any) -> None:
    sb.faults.add(route="manifest", kind="hang", seconds=0.6)
    with pytest.raises(requests.exceptions.ReadTimeout):
        alpha.get("/mcp/manifest", timeout=0.2)
    deadline = time.monotonic() + 5
    while not sb.journal_entries() and time.monotonic() < deadline:  # the server is still hanging
        time.sleep(0.05)
    assert [(e["fault"], e["status"]) for e in sb.journal_entries()] == [("hang", 0)]
    sb.faults.add(route="manifest", kind="hang", seconds=0.2)
    with pytest.raises(requests.exceptions.ConnectionError):
        alpha.get("/mcp/manifest")


def test_reset_drops_the_connection_and_creates_nothing(sb: Sandbox, alpha: Any) -> None:
    sb.faults.add(route="invoke", kind="reset")
    with pytest.raises(requests.exceptions.ConnectionError):
        alpha.invoke("batch-report", {"seconds": 60})
    (entry,) = sb.journal_entries()
    assert (entry["status"], entry["fault"], entry["invocation_id"]) == (0, "reset", None)


def test_reset_after_creating_then_retry_with_the_same_idempotency_key(sb: Sandbox, alpha: Any) -> None:
    sb.faults.add(route="invoke", kind="reset", after=True)
    headers = {"Idempotency-Key": "retry-me"}
    with pytest.raises(requests.exceptions.ConnectionError):
        alpha.post("/actions/batch-report:invoke", json={"input": {"seconds": 60}}, headers=headers)
    retried = alpha.post("/actions/batch-report:invoke", json={"input": {"seconds": 60}}, headers=headers)
    assert retried.status_code == 202
    dropped, answered = sb.journal_entries()
    assert dropped["status"] == 0 and answered["status"] == 202
    assert dropped["invocation_id"] == answered["invocation_id"] == retried.json()["invocation_id"]


def test_truncated_body(sb: Sandbox, alpha: Any) -> None:
    sb.faults.add(route="manifest", kind="truncate")
    with pytest.raises((requests.exceptions.ChunkedEncodingError, requests.exceptions.ConnectionError)):
        alpha.get("/mcp/manifest")


def test_garbage_body(sb: Sandbox, alpha: Any) -> None:
    sb.faults.add(route="manifest", kind="garbage")
    response = alpha.get("/mcp/manifest")
    assert response.status_code == 200
    with pytest.raises(requests.exceptions.JSONDecodeError):
        response.json()


def test_bad_gzip_body(sb: Sandbox, alpha: Any) -> None:
    sb.faults.add(route="manifest", kind="bad_gzip")
    with pytest.raises(requests.exceptions.ContentDecodingError):
        alpha.get("/mcp/manifest")


def test_faults_before_invoke_create_no_invocation(sb: Sandbox, alpha: Any) -> None:
    sb.faults.add(route="invoke", kind="status", status=500)
    assert alpha.invoke("batch-report", {"seconds": 60}).status_code == 500
    (entry,) = sb.journal_entries()
    assert entry["invocation_id"] is None and entry["fault"] == "status"


def test_rules_apply_in_order_by_route_and_slug(sb: Sandbox, alpha: Any) -> None:
    sb.faults.add(route="invoke", kind="status", status=502, slug="hive-chat")
    sb.faults.add(route="any", kind="status", status=500, count=2)
    assert alpha.invoke("echo", {"text": "x"}).status_code == 500  # the slug rule does not match echo
    assert alpha.invoke("hive-chat", {"prompt": "x"}).status_code == 502
    assert alpha.get("/mcp/manifest").status_code == 500
    assert alpha.invoke("hive-chat", {"prompt": "x"}).status_code == 200
    assert sb.faults.pending() == []


def test_unlimited_rule_until_cleared(sb: Sandbox, alpha: Any) -> None:
    sb.faults.add(route="manifest_entry", kind="status", count=None)
    assert [alpha.get("/mcp/manifest/echo").status_code for _ in range(3)] == [503] * 3
    sb.faults.clear()
    assert alpha.get("/mcp/manifest/echo").status_code == 200


def test_counts_hold_under_concurrency(sb: Sandbox, alpha: Any) -> None:
    sb.faults.add(route="manifest_entry", kind="status", count=5)
    url = f"{sb.url}/mcp/manifest/echo"
    with ThreadPoolExecutor(10) as pool:
        codes = list(pool.map(lambda _: requests.get(url, headers=dict(alpha.headers), timeout=5).status_code, range(12)))
    assert sorted(codes) == [200] * 7 + [503] * 5


@pytest.mark.parametrize(
    "rule", [{"kind": "explode"}, {"route": "nowhere"}, {"kind": "latency", "status": 500}, {"count": 0}]
)
def test_bad_rules_are_refused(sb: Sandbox, rule: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        sb.faults.add(**rule)


def test_an_answer_cut_short_ends_its_connection_however_the_body_arrived(sb: Sandbox) -> None:
    """A fault answers without looking at the body; the body, arriving after the headers (a busy
    client), is still read first, so the server closes the connection and the client sees the answer
    cut short at once (Werkzeug drains an unread body after answering: it blocked there, and the
    client waited out its read timeout)."""
    import socket
    from urllib.parse import urlsplit

    from colabhive_mcp.sandbox import DEMO_KEY

    sb.faults.add(route="invoke", kind="truncate")
    url = urlsplit(sb.url)
    body = b'{"input": {"text": "x"}}'
    with socket.create_connection((url.hostname, url.port), timeout=3) as raw:
        raw.sendall(f"POST {url.path}/actions/echo:invoke HTTP/1.1\r\nHost: {url.netloc}\r\nX-API-Key: {DEMO_KEY}\r\n"
                    f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode())
        raw.settimeout(0.5)
        try:
            answer = raw.recv(65536)  # an answer before the body? (the server should wait for it)
        except TimeoutError:
            answer = b""
        raw.sendall(body)  # the body, in a packet of its own: at once after an early answer
        raw.settimeout(3)
        started = time.monotonic()
        while chunk := raw.recv(65536):  # until the server closes (a timeout here: it never did)
            answer += chunk
    head, _, got = answer.partition(b"\r\n\r\n")
    assert time.monotonic() - started < 2
    assert b" 200 " in head.split(b"\r\n")[0] and 0 < len(got) < int(head.split(b"Content-Length: ")[1].split()[0])
