"""Every result shape of the gateway contract becomes the right MCP content."""

import base64
import json

import pytest

from colabhive_mcp.calls.results import failure_message, for_version, tool_result
from colabhive_mcp.catalog.schemas import Check
from colabhive_mcp.invocation import Invocation

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\nfake").decode()


def done(result, status="succeeded"):
    return Invocation.of({"invocation_id": "inv_1", "status": status, "result": result})


@pytest.mark.parametrize("result,expected_text", [
    ("plain words", "plain words"),
    ({"choices": [{"message": {"role": "assistant", "content": "Hi there"}}]}, "Hi there"),
    ({"choices": [{"text": "legacy completion"}]}, "legacy completion"),
    ({"text": "a summary"}, "a summary"),
    (None, "(the action returned no result)"),
])
def test_text_shapes(result, expected_text):
    assert tool_result(done(result), "t", "2025-11-25") == {"content": [{"type": "text", "text": expected_text}]}


def test_completed_means_succeeded():
    assert tool_result(done("ok", status="completed"), "t", "2025-11-25")["content"][0]["text"] == "ok"


def test_embeddings_are_summarised_not_dumped():
    vector = [0.5] * 4096
    text = tool_result(done({"embedding": vector}), "t", "2025-11-25")["content"][0]["text"]
    assert "4096 dimensions" in text and "L2 norm 32.0000" in text and len(text) < 300


def test_image_and_audio_become_blocks():
    image = tool_result(done({"image_b64": PNG, "mime_type": "image/png"}), "t", "2025-11-25")["content"][0]
    assert image == {"type": "image", "data": PNG, "mimeType": "image/png"}
    audio = tool_result(done({"audio_b64": "UklGRg==", "mime_type": "audio/wav"}), "t", "2025-11-25")["content"][0]
    assert audio == {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"}
    link = tool_result(done({"image_url": "https://cdn.example/x.png"}), "t", "2025-11-25")["content"][0]
    assert link["text"] == "Image: https://cdn.example/x.png"


def test_mcp_native_results_pass_through_without_malformed_blocks():
    native = {"content": [{"type": "text", "text": "a"}, "junk", {"no": "type"},
                          {"type": "resource", "resource": {"uri": "test://x", "text": "t"}}],
              "structuredContent": {"a": 1}}
    result = tool_result(done(native), "t", "2025-11-25")
    assert [b["type"] for b in result["content"]] == ["text", "resource"]
    assert result["structuredContent"] == {"a": 1}


def test_other_json_falls_back_to_text_and_structured_content_needs_a_matching_schema():
    value = {"id": "ct_1", "name": "Ada"}
    schema = {"type": "object", "required": ["id"], "properties": {"id": {"type": "string"}}}
    plain = tool_result(done(value), "t", "2025-11-25")
    assert json.loads(plain["content"][0]["text"]) == value and "structuredContent" not in plain
    structured = tool_result(done(value), "t", "2025-11-25", Check(schema))
    assert structured["structuredContent"] == value and json.loads(structured["content"][0]["text"]) == value
    mismatch = tool_result(done({"name": "no id"}), "t", "2025-11-25", Check(schema))
    assert "structuredContent" not in mismatch and mismatch["isError"] is True  # clients reject less
    assert json.loads(mismatch["content"][0]["text"]) == {"name": "no id"}  # the data is still there
    binary = tool_result(done({"image_b64": "AAAA", "mime_type": "image/png"}), "t", "2025-11-25", Check({"type": "object"}))
    assert "structuredContent" not in binary  # base64 is never copied into structured content


def test_a_broken_output_schema_is_said_and_no_result_is_given_as_structured_content():
    """An action whose outputSchema is not valid JSON Schema: its result stays readable as text, the call
    is an error saying why, and nothing is offered as structured content that no client could check."""
    broken = Check({"type": "object", "properties": 5})
    result = tool_result(done({"id": "ct_1"}), "t", "2025-11-25", broken)
    assert result["isError"] is True and "structuredContent" not in result
    assert json.loads(result["content"][0]["text"]) == {"id": "ct_1"}
    assert "does not match the output schema 't' declares: the schema itself is invalid: 5 is not of type" \
        in result["content"][-1]["text"]


def test_results_are_fitted_to_the_client_budget():
    from colabhive_mcp.calls.results import fit

    big = {"content": [{"type": "text", "text": "z" * 500}, {"type": "image", "data": "A" * 4000, "mimeType": "image/png"},
                       {"type": "image", "data": "A" * 40, "mimeType": "image/png"}]}
    fitted = fit(big, 100, 1000)
    assert fitted["content"][0]["text"].startswith("z" * 100) and "100 of 500 characters" in fitted["content"][0]["text"]
    assert fitted["content"][1]["type"] == "text" and "3000 bytes not shown" in fitted["content"][1]["text"]
    assert fitted["content"][2]["type"] == "image"


@pytest.mark.parametrize("error,expected", [
    ("model exploded", "model exploded"),
    ({"code": "model_error", "message": "upstream model crashed"}, "upstream model crashed (model_error)"),
    (None, "the action failed without saying why"),
])
def test_failures_are_readable_error_results(error, expected):
    result = tool_result(Invocation.of({"invocation_id": "inv_1", "status": "failed", "error": error}), "t", "2025-11-25")
    assert result["isError"] is True and expected in result["content"][0]["text"]
    assert failure_message(error) == expected


def test_cancelled_is_an_error_result():
    result = tool_result(Invocation("inv_1", "cancelled"), "t", "2025-11-25")
    assert result["isError"] is True and "cancelled" in result["content"][0]["text"]


def test_older_revisions_get_only_what_they_understand():
    result = {"content": [{"type": "audio", "data": "x", "mimeType": "audio/wav"},
                          {"type": "resource_link", "uri": "https://x", "name": "x"}],
              "structuredContent": {"a": 1}}
    old = for_version(result, "2024-11-05")
    assert [b["type"] for b in old["content"]] == ["text", "text"] and "structuredContent" not in old
    mid = for_version(result, "2025-03-26")
    assert [b["type"] for b in mid["content"]] == ["audio", "text"]
    assert for_version(result, "2025-06-18") is result
