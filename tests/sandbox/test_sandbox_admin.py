"""The /_sandbox/ routes and the request journal."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import requests

from colabhive_mcp.sandbox import DEMO_KEY, DEMO_KEY_B, DEMO_KEYS, Sandbox


def test_journal_records_requests_without_raw_keys(sb: Sandbox, alpha: Any) -> None:
    etag = alpha.get("/mcp/manifest").headers["ETag"]
    alpha.get("/mcp/manifest", headers={"If-None-Match": etag})
    invocation_id = alpha.post(
        "/actions/echo:invoke", json={"input": {"text": "x"}}, headers={"Idempotency-Key": "k-1"}
    ).json()["invocation_id"]
    alpha.poll(invocation_id)
    alpha.post(f"/invocations/{invocation_id}:cancel")
    requests.get(f"{sb.url}/mcp/manifest", headers={"X-API-Key": "hive_wrong"}, timeout=5)
    journal = requests.get(f"{sb.root_url}/_sandbox/journal", timeout=5).json()
    assert journal == sb.journal_entries()
    assert [(e["route"], e["status"]) for e in journal] == [
        ("manifest", 200), ("manifest", 304), ("invoke", 200), ("poll", 200), ("cancel", 200), ("manifest", 401),
    ]
    assert journal[1]["if_none_match"] == etag and journal[1]["cursor"] is None
    assert journal[2]["idempotency_key"] == "k-1" and journal[2]["slug"] == "echo"
    assert journal[3]["invocation_id"] == invocation_id and journal[3]["slug"] == "echo"
    assert journal[0]["key"] == hashlib.sha256(DEMO_KEY.encode()).hexdigest()[:12]
    assert set(journal[0]) == {
        "t", "method", "route", "path", "slug", "invocation_id", "key", "status", "idempotency_key",
        "if_none_match", "cursor", "fault", "traceparent", "tracestate",
    }
    dumped = json.dumps(journal)
    assert not any(key in dumped for key in [*DEMO_KEYS, "hive_wrong"])


def test_admin_faults_routes(sb: Sandbox, alpha: Any) -> None:
    admin = f"{sb.root_url}/_sandbox/faults"
    added = requests.post(admin, json={"route": "poll", "kind": "rate_limit", "count": 2}, timeout=5)
    assert added.status_code == 201 and added.json()["retry_after"] == 1
    assert requests.get(admin, timeout=5).json()[0]["kind"] == "rate_limit"
    assert alpha.poll("inv_x").status_code == 429
    assert requests.delete(admin, timeout=5).json() == []
    assert alpha.poll("inv_x").status_code == 404
    assert requests.post(admin, json={"kind": "explode"}, timeout=5).status_code == 400
    assert requests.post(admin, data=b"nope", timeout=5).status_code == 400


def test_admin_actions_routes(sb: Sandbox, alpha: Any, beta: Any) -> None:
    admin = f"{sb.root_url}/_sandbox/actions"
    entry = {"name": "weird.name/with:chars", "description": "odd", "inputSchema": {"type": "object"}}
    added = requests.post(admin, json={"entry": entry, "keys": [DEMO_KEY_B], "result": {"ok": 1}}, timeout=5)
    assert added.status_code == 201
    assert alpha.get(f"/mcp/manifest/{entry['name']}").status_code == 404
    assert beta.invoke(entry["name"]).json()["result"] == {"ok": 1}
    assert requests.delete(f"{admin}/{entry['name']}", timeout=5).status_code == 204
    assert requests.delete(f"{admin}/{entry['name']}", timeout=5).status_code == 404
    assert beta.get(f"/mcp/manifest/{entry['name']}").status_code == 404
    bad = {"entry": {"name": "x", "inputSchema": {"type": 12}}}
    assert requests.post(admin, json=bad, timeout=5).status_code == 400


def test_added_action_echoes_its_arguments_after_its_duration(sb: Sandbox, alpha: Any) -> None:
    sb.add_action({"name": "slow-echo", "description": "d", "inputSchema": {"type": "object"}}, seconds=0.5)
    started = alpha.invoke("slow-echo", {"a": 1})
    assert started.status_code == 202
    done = alpha.invoke("slow-echo", {"a": 1}, sync=True, sync_timeout_s=5)
    assert done.json()["result"] == {"a": 1}


def test_reset_restores_everything(sb: Sandbox, alpha: Any) -> None:
    etag = alpha.get("/mcp/manifest").headers["ETag"]
    sb.remove_action("echo")
    sb.faults.add(route="poll", kind="status", count=None)
    invocation_id = alpha.invoke("batch-report", {"seconds": 60}).json()["invocation_id"]
    assert requests.post(f"{sb.root_url}/_sandbox/reset", timeout=5).status_code == 200
    assert sb.journal_entries() == [] and sb.faults.pending() == []
    assert alpha.poll(invocation_id).status_code == 404
    assert alpha.get("/mcp/manifest").headers["ETag"] == etag


def test_added_keys_see_public_actions_and_their_own_until_reset(sb: Sandbox) -> None:
    def slugs(key: str) -> set[str] | int:
        response = requests.get(f"{sb.url}/mcp/manifest", headers={"X-API-Key": key}, params={"limit": 500}, timeout=5)
        if response.status_code != 200:
            return response.status_code
        page, names = response.json(), set()
        while True:
            names |= {entry["name"] for entry in page["tools"]}
            if not page.get("nextCursor"):
                return names
            page = requests.get(f"{sb.url}/mcp/manifest", headers={"X-API-Key": key},
                                params={"cursor": page["nextCursor"]}, timeout=5).json()

    assert slugs("hive_extra_1") == 401
    assert requests.post(f"{sb.root_url}/_sandbox/keys", json={"key": "hive_extra_1"}, timeout=5).status_code == 204
    assert requests.post(f"{sb.root_url}/_sandbox/keys", json={"key": "nope"}, timeout=5).status_code == 400
    sb.add_action({"name": "only-extra", "inputSchema": {"type": "object"}}, ["hive_extra_1"])
    extra = slugs("hive_extra_1")
    assert "only-extra" in extra and "echo" in extra
    assert "only-extra" not in slugs(DEMO_KEY)
    sb.reset()
    assert slugs("hive_extra_1") == 401
