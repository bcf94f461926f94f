"""Manifest: authentication, per-key visibility, pages, ETag/304, gzip, cursors."""

from __future__ import annotations

from typing import Any

import pytest
import requests
from jsonschema import Draft202012Validator

from colabhive_mcp.sandbox import DEMO_KEY_B, Sandbox

CONFORMANCE_TOOLS = {
    "test_simple_text", "test_image_content", "test_audio_content", "test_embedded_resource",
    "test_multiple_content_types", "test_error_handling", "test_tool_with_progress",
    "test_tool_with_logging", "json_schema_2020_12_tool", "test_reconnection",
}


def _all_pages(client: requests.Session) -> tuple[list[dict[str, Any]], set[str]]:
    tools, etags, cursor = [], set(), None
    while True:
        response = client.get("/mcp/manifest", params={"cursor": cursor} if cursor else None)
        assert response.status_code == 200
        body = response.json()
        assert len(body["tools"]) <= 8
        etags |= {response.headers["ETag"], body["etag"]}
        tools += body["tools"]
        cursor = body["nextCursor"]
        if cursor is None:
            return tools, etags


@pytest.mark.parametrize("headers", [{}, {"X-API-Key": "hive_not_a_key"}])
@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/mcp/manifest"), ("GET", "/mcp/manifest/echo"), ("POST", "/actions/echo:invoke"),
     ("GET", "/invocations/inv_123"), ("POST", "/invocations/inv_123:cancel")],
)
def test_every_route_needs_a_demo_key(sb: Sandbox, headers: dict[str, str], method: str, path: str) -> None:
    response = requests.request(method, sb.url + path, headers=headers, json={"input": {"text": "x"}}, timeout=5)
    assert response.status_code == 401
    if headers:  # a key it does not know: said without naming a header the caller may not have used
        assert response.json()["detail"] == "unknown API key"
    else:  # no key: where to send it
        assert response.json()["detail"] == "no API key: send it in the X-API-Key header"


def test_a_hosted_client_whose_bearer_token_is_unknown_is_told_so_in_its_own_terms(sb: Sandbox, tmp_path) -> None:
    from werkzeug.test import Client

    from colabhive_mcp.settings.config import Config
    from colabhive_mcp.transports.http.app import create_app

    app = Client(create_app(Config(api_url=sb.url, session_secret="s" * 64, runtime_dir=str(tmp_path))))
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    answer = app.post("/mcp", json=initialize, headers={"Authorization": "Bearer hive_nobody_has_this_key",
                                                        "Accept": "application/json, text/event-stream"})
    assert answer.status_code == 401
    message = answer.json["error"]["message"]  # what the MCP client shows its user
    assert message.startswith("The ColabHive gateway rejected the API key (401 unknown API key).")
    assert "X-API-Key" not in message.split(". Check the API key:")[0]  # the client sent no X-API-Key


def test_pages_cover_the_whole_manifest_under_one_etag(alpha: requests.Session) -> None:
    tools, etags = _all_pages(alpha)
    names = [tool["name"] for tool in tools]
    assert len(etags) == 1
    assert names == sorted(set(names))
    assert len(names) > 16  # at least three pages of 8
    assert CONFORMANCE_TOOLS <= set(names)


def test_entries_are_complete_and_schemas_valid(alpha: requests.Session) -> None:
    tools, _ = _all_pages(alpha)
    for tool in tools:
        assert tool["description"] and tool["displayName"] and tool["kind"]
        assert tool["inputSchema"]["type"] == "object"
        Draft202012Validator.check_schema(tool["inputSchema"])
        assert isinstance(tool["sideEffects"], list)
        assert tool["stability"] in {"experimental", "beta", "stable"}
        assert tool["latencyClass"] in {"fast", "medium", "slow", "batch"}
    by_name = {tool["name"]: tool for tool in tools}
    assert by_name["crm-create-contact"]["sideEffects"] == ["writes"]
    assert "annotations" not in by_name["crm-create-contact"]
    assert by_name["echo"]["annotations"] == {"readOnlyHint": True}
    assert by_name["cold-summarizer"]["latencyClass"] == "slow"
    assert by_name["batch-report"]["latencyClass"] == "batch"


def test_each_key_sees_only_its_own_private_actions(alpha: requests.Session, beta: requests.Session) -> None:
    alpha_names = {tool["name"] for tool in _all_pages(alpha)[0]}
    beta_names = {tool["name"] for tool in _all_pages(beta)[0]}
    assert "alpha-classifier" in alpha_names and "beta-sentiment" not in alpha_names
    assert "beta-sentiment" in beta_names and "alpha-classifier" not in beta_names
    assert alpha.get("/mcp/manifest/beta-sentiment").status_code == 404
    assert alpha.invoke("beta-sentiment", {"text": "great"}).status_code == 404
    assert beta.get("/mcp/manifest/alpha-classifier").status_code == 404
    # an invisible action looks exactly like a missing one
    assert alpha.get("/mcp/manifest/beta-sentiment").json() == {"detail": "no action named 'beta-sentiment'"}
    assert alpha.get("/mcp/manifest").headers["ETag"] != beta.get("/mcp/manifest").headers["ETag"]


def test_single_entry_matches_the_listing(alpha: requests.Session) -> None:
    tools, _ = _all_pages(alpha)
    listed = next(tool for tool in tools if tool["name"] == "json_schema_2020_12_tool")
    entry = alpha.get("/mcp/manifest/json_schema_2020_12_tool").json()
    assert entry == listed
    schema = entry["inputSchema"]
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["additionalProperties"] is False
    assert schema["properties"]["address"] == {"$ref": "#/$defs/address"}


def test_if_none_match_gives_304_on_the_first_page(alpha: requests.Session) -> None:
    etag = alpha.get("/mcp/manifest").headers["ETag"]
    for value in (etag, f"W/{etag}", f'"other", {etag}'):
        response = alpha.get("/mcp/manifest", headers={"If-None-Match": value})
        assert response.status_code == 304 and response.content == b""
        assert response.headers["ETag"] == etag
    assert alpha.get("/mcp/manifest", headers={"If-None-Match": '"stale"'}).status_code == 200


def test_manifest_is_gzipped_when_accepted(alpha: requests.Session) -> None:
    response = alpha.get("/mcp/manifest", headers={"Accept-Encoding": "gzip"}, stream=True)
    assert response.raw.headers["Content-Encoding"] == "gzip"
    assert "Accept-Encoding" in response.headers["Vary"]
    assert response.raw.read(decode_content=False).startswith(b"\x1f\x8b")
    plain = alpha.get("/mcp/manifest", headers={"Accept-Encoding": "identity"}, stream=True)
    assert "Content-Encoding" not in plain.raw.headers
    assert plain.raw.read(decode_content=False).startswith(b"{")


@pytest.mark.parametrize("cursor", ["not-a-cursor", "%%%", "MTIzOjQ"])
def test_invalid_cursor_is_400(alpha: requests.Session, cursor: str) -> None:
    response = alpha.get("/mcp/manifest", params={"cursor": cursor})
    assert response.status_code == 400
    assert "cursor" in response.json()["detail"]


def test_cursor_of_an_old_manifest_version_is_rejected(sb: Sandbox, alpha: requests.Session) -> None:
    cursor = alpha.get("/mcp/manifest").json()["nextCursor"]
    sb.add_action({"name": "zz-new", "description": "new", "inputSchema": {"type": "object"}})
    response = alpha.get("/mcp/manifest", params={"cursor": cursor})
    assert response.status_code == 400
    assert "stale" in response.json()["detail"]


def test_adding_and_removing_actions_changes_the_etag(
    sb: Sandbox, alpha: requests.Session, beta: requests.Session
) -> None:
    before = alpha.get("/mcp/manifest").headers["ETag"]
    sb.add_action({"name": "beta-only", "description": "d", "inputSchema": {"type": "object"}}, keys=[DEMO_KEY_B])
    assert alpha.get("/mcp/manifest").headers["ETag"] == before  # alpha cannot see it
    assert beta.get("/mcp/manifest/beta-only").status_code == 200
    sb.add_action({"name": "aaa-first", "description": "d", "inputSchema": {"type": "object"}})
    changed = alpha.get("/mcp/manifest")
    assert changed.headers["ETag"] != before
    assert changed.json()["tools"][0] == {"name": "aaa-first", "description": "d", "inputSchema": {"type": "object"}}
    sb.remove_action("aaa-first")
    assert alpha.get("/mcp/manifest").headers["ETag"] == before
