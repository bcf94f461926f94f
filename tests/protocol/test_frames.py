"""jsonrpc.parse: one frozen value per message, checked as it is built."""

import dataclasses

import pytest

from colabhive_mcp.protocol import jsonrpc
from colabhive_mcp.protocol.jsonrpc import (BatchFrame, InvalidFrame, JsonRpcError, NotificationFrame, RequestFrame,
                                            ResponseFrame)

MODERN_META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "progressToken": 7}


def test_a_request_carries_what_every_layer_asks_of_it_and_cannot_be_changed():
    frame = jsonrpc.parse(b'{"jsonrpc": "2.0", "id": "a", "method": "tools/call", "params": '
                          b'{"name": "echo", "arguments": {}, "_meta": {"io.modelcontextprotocol/protocolVersion": '
                          b'"2026-07-28", "progressToken": 7}}}')
    assert isinstance(frame, RequestFrame)
    assert (frame.id, frame.method, frame.name, frame.progress_token, frame.modern) == ("a", "tools/call", "echo", 7, True)
    assert frame.meta == MODERN_META
    with pytest.raises(dataclasses.FrozenInstanceError):
        frame.method = "tools/list"  # type: ignore[misc]


@pytest.mark.parametrize("method, params, name", [
    ("tasks/get", {"taskId": "t1"}, "t1"), ("tools/call", {"name": 3}, None), ("tools/list", {"name": "x"}, None)])
def test_the_name_is_the_field_mcp_name_mirrors_when_it_is_a_string(method, params, name):
    assert jsonrpc.frame_of({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).name == name


def test_initialize_is_never_modern_and_an_unusable_progress_token_is_none():
    frame = jsonrpc.frame_of({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                              "params": {"_meta": {**MODERN_META, "progressToken": 1.5}}})
    assert isinstance(frame, RequestFrame) and not frame.modern and frame.progress_token is None


@pytest.mark.parametrize("message, code, answered, id_", [
    ({"jsonrpc": "2.0", "id": 1.5, "method": "ping"}, -32600, True, None),
    ({"jsonrpc": "1.0", "id": 4, "method": "ping"}, -32600, True, 4),
    ({"jsonrpc": "2.0", "id": 4, "method": "ping", "params": [1]}, -32602, True, 4),
    ({"jsonrpc": "2.0", "method": 5}, -32600, False, None),  # a malformed notification: nobody awaits an answer
    ([1], None, None, None),
    ("text", -32600, True, None),
])
def test_invalid_messages_carry_the_error_they_are_answered_with(message, code, answered, id_):
    frame = jsonrpc.frame_of(message)
    if isinstance(message, list):
        assert isinstance(frame, BatchFrame) and isinstance(frame.frames[0], InvalidFrame)
        return
    assert isinstance(frame, InvalidFrame)
    assert (frame.error.code, frame.answered, frame.id) == (code, answered, id_)


def test_an_invalid_message_keeps_its_era_so_it_is_answered_in_its_own_terms():
    frame = jsonrpc.frame_of({"jsonrpc": "2.0", "id": None, "method": "tools/list", "params": {"_meta": MODERN_META}})
    assert isinstance(frame, InvalidFrame) and frame.modern and frame.method == "tools/list"


def test_notifications_responses_and_batches():
    batch = jsonrpc.parse(b'[{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3}},'
                          b' {"jsonrpc": "2.0", "id": "colabhive-1", "result": {"action": "accept"}},'
                          b' {"jsonrpc": "2.0", "id": "colabhive-2", "error": {"code": 1, "message": "no"}}, [] ]')
    assert isinstance(batch, BatchFrame)
    cancelled, accepted, refused, nested = batch.frames
    assert isinstance(cancelled, NotificationFrame) and cancelled.params == {"requestId": 3}
    assert isinstance(accepted, ResponseFrame) and accepted.result == {"action": "accept"}
    assert isinstance(refused, ResponseFrame) and refused.result is None
    assert isinstance(nested, InvalidFrame) and nested.answered


@pytest.mark.parametrize("raw", [b"{", b"\xff", b"NaN", b"[" * 100_000])
def test_what_is_not_json_is_a_parse_error(raw):
    with pytest.raises(JsonRpcError) as caught:
        jsonrpc.parse(raw)
    assert caught.value.code == -32700
