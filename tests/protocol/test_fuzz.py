"""Property-based fuzzing of the protocol core: any JSON in, exactly one well-formed answer out
for every request, nothing for notifications and responses, and never a crash."""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from colabhive_mcp.calls.cancellation import Cancellation
from colabhive_mcp.manifest.version import Manifest
from colabhive_mcp.protocol import Server, Session, jsonrpc
from colabhive_mcp.settings.config import Config
from colabhive_mcp.tenants.tenant import Tenant

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20)
ids = st.one_of(st.integers(), st.text(max_size=8), st.none(), st.booleans(), st.floats(allow_nan=False))
methods = st.sampled_from(["initialize", "ping", "tools/list", "tools/call", "server/discover", "logging/setLevel",
                           "tasks/get", "tasks/result", "tasks/cancel", "subscriptions/listen",
                           "notifications/initialized", "notifications/cancelled", "resources/list"]) | st.text(max_size=12)
meta = st.fixed_dictionaries({}, optional={
    "io.modelcontextprotocol/protocolVersion": st.sampled_from(["2026-07-28", "2025-11-25", "x"]) | json_values,
    "io.modelcontextprotocol/clientCapabilities": json_values,
    "progressToken": json_values})
params = st.one_of(json_values, st.fixed_dictionaries({}, optional={
    "name": st.sampled_from(["echo", "colabhive__search_tools", "nope"]) | json_values,
    "arguments": json_values, "cursor": json_values, "taskId": json_values, "level": json_values,
    "protocolVersion": json_values, "task": json_values, "_meta": meta}))
frames = st.fixed_dictionaries({"jsonrpc": st.sampled_from(["2.0", "1.0"]) | json_values}, optional={
    "id": ids, "method": methods, "params": params, "result": json_values, "error": json_values})


class OfflineTenant(Tenant):
    """A tenant whose manifest is a snapshot and whose gateway is never reached (fuzzing the core)."""

    def __init__(self):
        config = Config(api_url="http://127.0.0.1:9", api_key="hive_fuzz_key", retries=0, request_timeout=1,
                        poll_max_wait=1)
        super().__init__(config, config.api_key)
        self.manifest._current = Manifest(({"name": "echo", "description": "echo", "sideEffects": [],
                                            "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}},),
                                          '"fuzz"')
        self.manifest._expires = float("inf")


TENANT = OfflineTenant()
SERVER = Server(TENANT.config)


def check_answer(message, answer):
    is_request = isinstance(message, dict) and "method" in message and "id" in message
    if answer is None:
        assert not is_request or message.get("method") == "subscriptions/listen" or not _valid_id(message)
        return
    json.dumps(answer)  # serialisable
    assert answer["jsonrpc"] == "2.0" and ("result" in answer) != ("error" in answer)
    if "error" in answer:
        assert isinstance(answer["error"]["code"], int) and isinstance(answer["error"]["message"], str)
    if is_request and _valid_id(message):
        assert answer["id"] == message["id"]


def _valid_id(message):
    value = message.get("id")
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(frames, json_values))
@pytest.mark.slow
def test_any_frame_gets_one_well_formed_answer_or_none(message):
    session = Session(id="fuzz", version="2025-11-25")
    cancelled = Cancellation()
    if isinstance(message, dict) and message.get("method") == "subscriptions/listen":
        cancelled.set()  # a listen runs until cancelled
    answer = SERVER.serve(jsonrpc.frame_of(message), tenant=TENANT, session=session, cancelled=cancelled)
    check_answer(message, answer)


@settings(max_examples=100, deadline=None)
@given(st.lists(frames, max_size=5))
@pytest.mark.slow
def test_batches_never_crash(messages):
    session = Session(id="fuzz-batch", version="2025-03-26")
    answer = SERVER.serve(jsonrpc.frame_of(messages), session=session, tenant=TENANT)
    assert answer is None or isinstance(answer, (list, dict))
    for item in answer if isinstance(answer, list) else [answer] if answer else []:
        assert item["jsonrpc"] == "2.0"
