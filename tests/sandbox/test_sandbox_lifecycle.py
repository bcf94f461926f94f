"""Invocations in time: queued -> running -> terminal, sync holds, cancel, cold starts."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import pytest
import requests

from colabhive_mcp.sandbox import Sandbox
from colabhive_mcp.sandbox.coldstart import ColdStarts

TERMINAL = {"succeeded", "completed", "failed", "cancelled"}


def _watch(client: Any, invocation_id: str, every: float = 0.1, limit: float = 10.0) -> list[requests.Response]:
    """Poll until terminal; every answer."""
    seen: list[requests.Response] = []
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        response = client.poll(invocation_id)
        assert response.status_code == 200
        seen.append(response)
        if response.json()["status"] in TERMINAL:
            return seen
        time.sleep(every)
    raise AssertionError(f"{invocation_id} did not finish in {limit} s")


def _changes(values: list[Any]) -> list[Any]:
    return [value for i, value in enumerate(values) if i == 0 or values[i - 1] != value]


def _seconds(start: str, end: str) -> float:
    return (datetime.fromisoformat(end.replace("Z", "+00:00")) - datetime.fromisoformat(start.replace("Z", "+00:00"))).total_seconds()


@pytest.mark.slow
def test_queued_job_runs_step_by_step_then_succeeds(alpha: Any) -> None:
    started = alpha.invoke("test_tool_with_progress")
    assert started.status_code == 202
    assert started.json()["status"] == "queued" and started.headers["Retry-After"] == "1"
    seen = _watch(alpha, started.json()["invocation_id"])
    bodies = [response.json() for response in seen]
    assert _changes([body["status"] for body in bodies]) == ["queued", "running", "succeeded"]
    progress = [body["progress"]["progress"] for body in bodies if "progress" in body]
    assert progress == sorted(progress) and len(set(progress)) >= 3
    assert len({body["status_detail"] for body in bodies[:-1]}) >= 3
    assert all(response.headers["Retry-After"] == "1" for response in seen[:-1])
    assert "Retry-After" not in seen[-1].headers
    updated = [body["updated_at"] for body in bodies]
    assert updated == sorted(updated) and len(set(updated)) >= 3
    final = bodies[-1]
    assert final["result"]["content"][0]["type"] == "text"
    assert "progress" not in final and "status_detail" not in final


def test_sync_holds_until_a_short_job_is_done(alpha: Any) -> None:
    started = time.monotonic()
    response = alpha.invoke("image-gen-tiny", {"prompt": "x"}, sync=True, sync_timeout_s=5)
    elapsed = time.monotonic() - started
    assert response.status_code == 200 and response.json()["status"] == "succeeded"
    assert 0.45 <= elapsed < 2.0


@pytest.mark.slow
def test_batch_job_outlives_sync_timeout_and_ends_completed_on_time(alpha: Any) -> None:
    started = time.monotonic()
    held = alpha.invoke("batch-report", {"seconds": 2}, sync=True, sync_timeout_s=1)
    assert 1.0 <= time.monotonic() - started < 1.8
    assert held.status_code == 202 and held.json()["status"] == "running"
    assert held.json()["progress"]["message"].startswith("step ")
    final = _watch(alpha, held.json()["invocation_id"])[-1].json()
    assert final["status"] == "completed"
    assert final["result"] == {"text": "report ready after 2 s", "steps": 2}
    assert final["metrics"]["duration_ms"] == 2000
    assert _seconds(final["created_at"], final["updated_at"]) == 2.0


def test_batch_job_can_fail(alpha: Any) -> None:
    body = alpha.invoke("batch-report", {"seconds": 0, "fail": True}).json()
    assert body["status"] == "failed" and body["error"]["code"] == "report_failed"
    assert "result" not in body


def test_cancel_stops_a_job_for_good(alpha: Any) -> None:
    invocation_id = alpha.invoke("batch-report", {"seconds": 60}).json()["invocation_id"]
    cancelled = alpha.post(f"/invocations/{invocation_id}:cancel")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert "Retry-After" not in cancelled.headers
    time.sleep(0.1)
    assert alpha.poll(invocation_id).json() == cancelled.json()
    assert alpha.post(f"/invocations/{invocation_id}:cancel").json() == cancelled.json()


def test_cancel_after_the_end_keeps_the_terminal_status(alpha: Any) -> None:
    invocation_id = alpha.invoke("echo", {"text": "done"}).json()["invocation_id"]
    body = alpha.post(f"/invocations/{invocation_id}:cancel").json()
    assert body["status"] == "succeeded" and body["result"] == "done"


def test_another_keys_invocation_is_404(alpha: Any, beta: Any) -> None:
    invocation_id = alpha.invoke("batch-report", {"seconds": 60}).json()["invocation_id"]
    assert beta.poll(invocation_id).status_code == 404
    assert beta.post(f"/invocations/{invocation_id}:cancel").status_code == 404
    assert alpha.poll(invocation_id).json()["status"] in {"queued", "running"}  # beta's cancel did nothing
    assert alpha.poll("inv_0123456789abcdef").status_code == 404


def test_first_call_is_a_cold_start_and_later_calls_are_warm(sb: Sandbox, alpha: Any, beta: Any) -> None:
    started = time.monotonic()
    first = alpha.invoke("cold-summarizer", {"text": "one two three"})
    assert first.status_code == 202
    assert first.json()["model_state"] == "cold" and first.json()["status_detail"] == "loading weights"
    bodies = [response.json() for response in _watch(alpha, first.json()["invocation_id"], every=0.05)]
    assert time.monotonic() - started >= sb.app.settings.cold_start_s
    assert _changes([body["status"] for body in bodies]) == ["queued", "running", "succeeded"]
    assert any("progress" in body for body in bodies)
    assert bodies[-1]["model_state"] == "warm" and bodies[-1]["result"] == {"text": "Summary: one two three"}

    warm = alpha.invoke("cold-summarizer", {"text": "again"})
    assert warm.status_code == 200 and warm.json()["model_state"] == "warm"
    assert beta.invoke("cold-summarizer", {"text": "beta's own model"}).json()["model_state"] == "cold"


def test_model_state_follows_calls_and_idleness() -> None:
    models = ColdStarts(cold_start_s=2.0, idle_s=600.0)
    cold = models.timing("key", "m", 0.0)
    assert (cold.model_state, cold.total_s, cold.queued_detail) == ("cold", 2.0, "loading weights")
    loading = models.timing("key", "m", 0.5)  # a second call while the weights load waits for them
    assert loading.model_state == "cold" and loading.total_s == 1.5
    assert models.timing("key", "m", 100.0).model_state == "warm"
    assert models.timing("other-key", "m", 100.0).model_state == "cold"
    assert models.timing("key", "m", 100.0 + 601.0).model_state == "cold"
