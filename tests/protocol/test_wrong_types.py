"""Frames whose fields have the wrong JSON type, through the real stdio process and real gunicorn.

A transport looks at a frame before the protocol core checks it (to route it, to pick JSON or
SSE, to check the 2026 headers). Every field of a frame — ``jsonrpc``, ``id``, ``method``,
``params``, ``params._meta``, tool names and arguments, progress tokens, the 2026 ``_meta``
keys — may arrive as an object, an array, a number, a boolean, null or a huge float. Each such
frame gets the JSON-RPC error the spec prescribes (nothing, for a notification), never a dead
process, a 5xx or an HTML page, and the next frame is served.
"""

import json
import sys
import uuid

import pytest
from hypothesis import given, strategies as st

from colabhive_mcp.cli.demo import StdioPeer
from colabhive_mcp.sandbox import DEMO_KEY

from ..support.fuzzing import (CAPS_KEY, FUZZ, LEGACY, MODERN, VERSION_KEY, check_answer, header_safe, json_values,
                      mcp_name_header, valid_id)
from ..support.environ import server_env

pytestmark = pytest.mark.slow

WRONG = {"object": {"a": [None]}, "array": [{"a": None}], "number": 7, "true": True, "false": False, "null": None,
         "huge float": 1e308, "negative huge float": -1.7976931348623157e308, "tiny float": 5e-324,
         "big int": 2 ** 100, "string": "x"}
TOP_FIELDS = ("jsonrpc", "id", "method", "params")
META_FIELDS = ("progressToken", VERSION_KEY, CAPS_KEY)
FIELDS = TOP_FIELDS + ("_meta", "name", "arguments", "cursor", "task", "taskId") + META_FIELDS
METHODS = ("tools/call", "tools/list", "ping", "initialize", "server/discover", "logging/setLevel", "tasks/get",
           "tasks/result", "tasks/cancel", "notifications/cancelled")


def base_frame(method, era):
    """A well-formed frame of ``method`` to spoil one field of."""
    params = {"name": "echo", "arguments": {"text": "typed"}, "_meta": {"progressToken": "p"}}
    if method == "initialize":
        params = {"protocolVersion": LEGACY[0], "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    elif method == "logging/setLevel":
        params = {"level": "info"}
    elif method.startswith("tasks/"):
        params = {"taskId": "t1.bogus.bogus", "_meta": {}}
    if era == "modern":
        params.setdefault("_meta", {}).update({VERSION_KEY: MODERN, CAPS_KEY: {}})
    return {"jsonrpc": "2.0", "id": f"w-{uuid.uuid4().hex[:8]}", "method": method, "params": params}


def spoil(frame, field, value):
    """``frame`` with ``field`` (top level, in params, or in params._meta) set to ``value``."""
    frame = json.loads(json.dumps(frame))
    if field in TOP_FIELDS:
        frame[field] = value
    elif not isinstance(frame.get("params"), dict):
        pass  # params itself was spoiled already
    elif field in META_FIELDS:
        if isinstance(frame["params"].setdefault("_meta", {}), dict):
            frame["params"]["_meta"][field] = value
    else:
        frame["params"][field] = value
    return frame


def fixed_cases():
    for era in ("legacy", "modern"):
        for method in METHODS:
            for field in FIELDS:
                for label, value in WRONG.items():
                    yield era, method, field, label, value


# -- stdio ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def stdio_server(gateway_sandbox):
    peer = StdioPeer([sys.executable, "-m", "colabhive_mcp", "stdio", "--api-url", gateway_sandbox.url],
                     env=server_env(COLABHIVE_API_KEY=DEMO_KEY))
    peer.initialize()
    yield peer
    assert peer.close() == 0  # it ran to the end of its input: no frame ended it
    assert peer.unparsable == []


def stdio_exchange(peer, frame, raw=None):
    """Send one frame (as ``raw`` bytes when given); return its answer (``None`` when none is due)
    after checking that the server is still serving (a ping right after it is answered)."""
    peer.send(raw or json.dumps(frame).encode())
    is_dict = isinstance(frame, dict)
    if is_dict and "method" in frame and "id" not in frame:
        answer = None  # a notification, well-formed or not, is never answered
    elif is_dict and "method" not in frame and "id" in frame and ("result" in frame or "error" in frame) \
            and (frame["id"] is None or valid_id(frame["id"])):
        answer = None  # a response to a request of ours
    elif is_dict and valid_id(frame.get("id")):
        answer = peer.wait_for(frame["id"], timeout=30)
    else:
        answer = peer.next_anonymous(timeout=30)
    sentinel = f"alive-{uuid.uuid4().hex}"
    assert peer.request("ping", request_id=sentinel, timeout=30)["result"] == {}
    assert peer.process.poll() is None
    assert not peer._anonymous, f"an unexpected answer: {peer._anonymous}"
    return answer


def check_stdio_answer(frame, answer):
    if answer is None:
        return
    assert answer["jsonrpc"] == "2.0" and ("result" in answer) != ("error" in answer), answer
    if "error" in answer:
        error = answer["error"]
        assert type(error["code"]) is int and error["message"] and error["message"] != "Internal error", answer
        assert error["code"] in (-32700, -32600, -32601, -32602, -32603, -32020, -32021, -32022) \
            or error["code"] >= -32000, answer
    if isinstance(frame, dict) and valid_id(frame.get("id")):
        assert type(answer["id"]) is type(frame["id"]) and answer["id"] == frame["id"], answer
    else:
        assert answer.get("id") is None and answer["error"]["code"] == -32600, answer


def test_every_field_of_every_method_with_every_wrong_type_over_stdio(stdio_server):
    for era, method, field, label, value in fixed_cases():
        frame = spoil(base_frame(method, era), field, value)
        try:
            check_stdio_answer(frame, stdio_exchange(stdio_server, frame))
        except AssertionError as exc:
            raise AssertionError(f"{era} {method} with {field} = {label}: {exc}") from None
    stdio_server.initialize()  # the spoiled initialize frames changed nothing lasting


def test_the_reported_frames_no_longer_end_the_process(stdio_server):
    for line in (b'{"jsonrpc":"2.0","id":1,"method":[{"a":null}]}', b'{"jsonrpc":"2.0","id":[1],"result":{}}',
                 b'{"jsonrpc":"2.0","id":{"a":1},"error":{"code":1,"message":"m"}}',
                 b'{"jsonrpc":"2.0","method":{"a":1}}', b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":7}',
                 b'{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","_meta":[1]}}'):
        frame = json.loads(line)
        check_stdio_answer(frame, stdio_exchange(stdio_server, frame, line))


@st.composite
def wrong_typed_frames(draw):
    """A frame of a known method whose fields are each, now and then, any JSON value."""
    era = draw(st.sampled_from(["legacy", "modern"]))
    frame = base_frame(draw(st.sampled_from(METHODS)), era)
    for field in draw(st.lists(st.sampled_from(FIELDS), min_size=1, max_size=4, unique=True)):
        frame = spoil(frame, field, draw(json_values | st.sampled_from(list(WRONG.values()))))
    if draw(st.integers(0, 5)) == 0:
        del frame["id"]  # a notification
    return era, frame


@FUZZ
@given(case=wrong_typed_frames())
def test_hypothesis_frames_of_wrong_types_over_stdio(stdio_server, case):
    _era, frame = case
    check_stdio_answer(frame, stdio_exchange(stdio_server, frame))


# -- HTTP (the hosted server, gunicorn with two workers) ------------------------------------------------

def http_exchange(live, era, frame):
    """POST one frame as a client of its era would, with the headers it would derive from the frame."""
    if era == "legacy":
        return live.post(frame, {"Mcp-Session-Id": live.sessions[LEGACY[0]]})
    headers = {"MCP-Protocol-Version": MODERN}
    method = frame.get("method")
    if header_safe(method):
        headers["Mcp-Method"] = method
    params = frame.get("params")
    name = params.get("name", params.get("taskId")) if isinstance(params, dict) else None
    if isinstance(name, str) and name:
        headers["Mcp-Name"] = mcp_name_header(name)
    return live.post(frame, headers)


def test_every_field_of_every_method_with_every_wrong_type_over_http(serving):
    for era, method, field, label, value in fixed_cases():
        frame = spoil(base_frame(method, era), field, value)
        answer = http_exchange(serving, era, frame)
        try:
            check_answer(frame, answer)
        except AssertionError as exc:
            raise AssertionError(f"{era} {method} with {field} = {label}: {exc}") from None


@pytest.mark.parametrize("where,value", [("params", 7), ("params", True), ("params", 1e308), ("params", [1]),
                                         ("params", None), ("_meta", 7), ("_meta", [1]), ("_meta", "x")])
def test_tools_call_fields_of_the_wrong_type_get_a_json_rpc_error_not_a_500(serving, where, value):
    frame = spoil(base_frame("tools/call", "legacy"), where, value)
    answer = http_exchange(serving, "legacy", frame)
    check_answer(frame, answer)  # JSON, or SSE when an earlier case turned logging on for the session
    assert answer.status == 200, answer
    if where == "params":
        assert answer.responses[0]["error"]["code"] == -32602, answer
    else:  # a _meta that is not an object carries no progress token: the call simply runs
        assert answer.responses[0]["result"]["content"] == [{"type": "text", "text": "typed"}], answer


@FUZZ
@given(case=wrong_typed_frames())
def test_hypothesis_frames_of_wrong_types_over_http(serving, case):
    era, frame = case
    check_answer(frame, http_exchange(serving, era, frame))
