"""Invoke: result shapes, validation, alias route, idempotency."""

from __future__ import annotations

import base64
import hashlib
import io
import math
import struct
import wave
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from colabhive_mcp.sandbox import DEMO_KEY, Sandbox


def _result(client: Any, slug: str, args: dict[str, Any], status: str = "succeeded") -> Any:
    response = client.invoke(slug, args, sync=True, sync_timeout_s=10)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] == status, body
    return body.get("result", body.get("error"))


def _png_size(data: bytes) -> tuple[int, int]:
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def _wav_frames(data: bytes) -> int:
    with wave.open(io.BytesIO(data)) as audio:
        return audio.getnframes()


def test_fast_action_answers_200_terminal_without_sync(alpha: Any) -> None:
    response = alpha.invoke("echo", {"text": "hello"})
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "succeeded" and body["result"] == "hello"
    assert body["invocation_id"].startswith("inv_")
    assert body["poll_url"] == f"/api/builder/v1/invocations/{body['invocation_id']}"
    assert body["created_at"].endswith("Z") and "metrics" in body
    assert "Retry-After" not in response.headers
    assert not {"error", "progress", "status_detail", "model_state"} & set(body)


def test_chat_quotes_the_prompt_or_last_user_message(alpha: Any) -> None:
    reply = _result(alpha, "hive-chat", {"prompt": "What is a hive?"})
    assert reply["choices"][0]["message"]["role"] == "assistant"
    assert "What is a hive?" in reply["choices"][0]["message"]["content"]
    assert reply["usage"]["total_tokens"] > 0
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "ping"}]
    assert "ping" in _result(alpha, "hive-chat", {"messages": messages})["choices"][0]["message"]["content"]


def test_embedding_is_a_deterministic_unit_vector(alpha: Any) -> None:
    first = _result(alpha, "text-embed-small", {"text": "bees"})["embedding"]
    assert len(first) == 384
    assert math.isclose(math.sqrt(sum(x * x for x in first)), 1.0, abs_tol=1e-4)
    assert _result(alpha, "text-embed-small", {"text": "bees"})["embedding"] == first
    assert _result(alpha, "text-embed-small", {"text": "wasps"})["embedding"] != first


def test_image_is_a_real_png_of_the_asked_size(alpha: Any) -> None:
    result = _result(alpha, "image-gen-tiny", {"prompt": "a sunset", "size": 40})
    assert result["mime_type"] == "image/png"
    assert _png_size(base64.b64decode(result["image_b64"])) == (40, 40)
    default = _result(alpha, "image-gen-tiny", {"prompt": "a sunset"})
    assert _png_size(base64.b64decode(default["image_b64"])) == (64, 64)


def test_speech_is_a_real_wav(alpha: Any) -> None:
    result = _result(alpha, "tts-voice", {"text": "hello"})
    assert result["mime_type"] == "audio/wav"
    assert _wav_frames(base64.b64decode(result["audio_b64"])) > 0


def test_contact_matches_its_output_schema(alpha: Any) -> None:
    schema = alpha.get("/mcp/manifest/crm-create-contact").json()["outputSchema"]
    contact = _result(alpha, "crm-create-contact", {"name": "Ada", "email": "ada@example.com"})
    Draft202012Validator(schema).validate(contact)
    assert contact["id"].startswith("ct_") and contact["email"] == "ada@example.com"


def test_other_realistic_actions(alpha: Any, beta: Any) -> None:
    assert _result(alpha, "alpha-classifier", {"text": "refund"})["label"] in {"billing", "support", "sales"}
    assert _result(beta, "beta-sentiment", {"text": "great"})["label"] in {"positive", "negative", "neutral"}
    assert "https://example.com" in _result(alpha, "web-scrape", {"url": "https://example.com"})["text"]
    error = _result(alpha, "flaky-translate", {"text": "hi"}, status="failed")
    assert error == {"code": "model_error", "message": "upstream model crashed"}


def test_text_with_an_unpaired_surrogate_is_run_not_a_500(alpha: Any) -> None:
    """Valid JSON may escape a lone surrogate (an MCP client's ``"\\ud83d"``): the actions that digest
    their text still run."""
    assert _result(alpha, "alpha-classifier", {"text": "\ud83d"})["label"] in {"billing", "support", "sales"}


def test_conformance_tools_return_mcp_content(alpha: Any) -> None:
    text = _result(alpha, "test_simple_text", {})["content"]
    assert text == [{"type": "text", "text": "This is a simple text response for testing."}]
    (image,) = _result(alpha, "test_image_content", {})["content"]
    assert image["type"] == "image" and image["mimeType"] == "image/png"
    _png_size(base64.b64decode(image["data"]))
    (audio,) = _result(alpha, "test_audio_content", {})["content"]
    assert audio["mimeType"] == "audio/wav" and _wav_frames(base64.b64decode(audio["data"])) > 0
    (resource,) = _result(alpha, "test_embedded_resource", {})["content"]
    assert resource["resource"]["uri"] == "test://embedded-resource" and resource["resource"]["text"]
    mixed = _result(alpha, "test_multiple_content_types", {})["content"]
    assert [block["type"] for block in mixed] == ["text", "image", "resource"]
    error = _result(alpha, "test_error_handling", {}, status="failed")
    assert error == "This tool intentionally returns an error for testing"
    echoed = _result(alpha, "json_schema_2020_12_tool", {"name": "Ada", "address": {"city": "Paris"}})["content"]
    assert "Paris" in echoed[0]["text"]


@pytest.mark.parametrize(
    ("slug", "args", "field"),
    [
        ("crm-create-contact", {"name": "Ada"}, "email"),
        ("crm-create-contact", {"name": "Ada", "email": "not-an-email"}, "input.email"),
        ("image-gen-tiny", {"prompt": "x", "size": 300}, "input.size"),
        ("hive-chat", {"messages": [{"role": "user"}]}, "content"),
        ("json_schema_2020_12_tool", {"name": "Ada", "extra": 1}, "extra"),
    ],
)
def test_invalid_input_is_422_naming_the_field(alpha: Any, slug: str, args: dict[str, Any], field: str) -> None:
    response = alpha.invoke(slug, args)
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert field in detail["message"] and detail["errors"]


def test_malformed_bodies(alpha: Any) -> None:
    bad_json = alpha.post("/actions/echo:invoke", data=b"{not json", headers={"Content-Type": "application/json"})
    assert bad_json.status_code == 400
    bad_timeout = alpha.invoke("echo", {"text": "x"}, sync=True, sync_timeout_s=0)
    assert bad_timeout.status_code == 422 and "sync_timeout_s" in bad_timeout.json()["detail"]["message"]
    assert alpha.post("/actions/echo:invoke", json=[1]).status_code == 422
    assert alpha.invoke("no-such-action", {}).status_code == 404


def test_internal_alias_route_serves_the_same_handler(alpha: Any) -> None:
    response = alpha.post("/internal/mcp/actions/echo:invoke", json={"input": {"text": "via alias"}})
    assert response.status_code == 200 and response.json()["result"] == "via alias"


def test_idempotency_key_returns_the_original_invocation(sb: Sandbox, alpha: Any, beta: Any) -> None:
    headers = {"Idempotency-Key": "3f6c1d1e-0000-4000-8000-000000000001"}
    body = {"input": {"seconds": 2}}
    first = alpha.post("/actions/batch-report:invoke", json=body, headers=headers)
    again = alpha.post("/actions/batch-report:invoke", json=body, headers=headers)
    assert first.status_code == again.status_code == 202
    assert again.json()["invocation_id"] == first.json()["invocation_id"]
    other_key = beta.post("/actions/batch-report:invoke", json=body, headers=headers)
    assert other_key.json()["invocation_id"] != first.json()["invocation_id"]
    fresh = alpha.post("/actions/batch-report:invoke", json=body)
    assert fresh.json()["invocation_id"] != first.json()["invocation_id"]
    alpha_hash = hashlib.sha256(DEMO_KEY.encode()).hexdigest()[:12]
    retried = [entry for entry in sb.journal_entries() if entry["key"] == alpha_hash and entry["idempotency_key"]]
    assert len(retried) == 2
    assert {entry["invocation_id"] for entry in retried} == {first.json()["invocation_id"]}
