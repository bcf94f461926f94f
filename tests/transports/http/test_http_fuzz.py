"""Property-based fuzzing of the hosted Streamable HTTP transport, through a real gunicorn server.

What a client depends on, whatever it sends (headers, frames, params, tool arguments, bytes):

* the server answers with a well-formed HTTP response, never a 5xx, and never drops the connection;
* a request that carries an id gets exactly one well-formed JSON-RPC response with that very id
  (a JSON body, or inside an SSE stream that is parsed here for real), or a 4xx whose body is a
  JSON-RPC error; an id that is not a string or an integer gets an Invalid Request error;
* a notification or a response gets ``202 Accepted`` with no body (or a 4xx);
* every body is strict JSON in valid UTF-8, in a format the client said it accepts;
* the server keeps serving afterwards, and logs no unhandled exception.

``tests/protocol/test_fuzz.py`` fuzzes the protocol core in-process; this file fuzzes the HTTP edge
(headers, content negotiation, SSE framing, sessions, the 2026 routing headers, bytes). The
fixed cases cover what random generation rarely reaches: huge bodies, deep nesting, invalid
UTF-8, unpaired surrogates and ids of every JSON type, in both eras.
"""

import base64
import json
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from hypothesis import event, given, settings, strategies as st

from colabhive_mcp.sandbox import DEMO_KEY

from ...support.fuzzing import (ACCEPT_BOTH, CANCELLED_PREFIX, CAPS_KEY, JSON_TYPE, LEGACY, LOG_LEVELS, MODERN, SSE_TYPE,
                      SURROGATE, TASKS_EXTENSION, VERSION_KEY, FUZZ, any_ids, check_answer, finite, header_safe,
                      json_values, kind_of, mcp_name_header, modern_meta, objects, plain_ids, request_ids, same_id,
                      strict_json, text, weighted, wrapped)

pytestmark = pytest.mark.slow

known_tools = st.sampled_from(["echo", "test_simple_text", "no-such-tool", "colabhive__wait_for_result",
                              "colabhive__get_invocation"])
tool_names = st.one_of(known_tools, known_tools, text)
known_methods = st.sampled_from(["ping", "tools/list", "tools/call", "server/discover", "initialize",
                                 "logging/setLevel", "tasks/get", "tasks/cancel", "tasks/update", "tasks/result",
                                 "resources/list", "prompts/get", "completion/complete"])
methods = st.one_of(known_methods, known_methods, known_methods, text)
notification_methods = st.sampled_from(["notifications/initialized", "notifications/cancelled",
                                        "notifications/progress", "notifications/roots/list_changed",
                                        "notifications/message"]) | text
params_fields = {
    "name": tool_names,
    "arguments": st.fixed_dictionaries({}, optional={"text": text | json_values}) | json_values,
    "cursor": json_values, "taskId": text | json_values, "task": st.just({}) | json_values,
    "level": st.sampled_from(LOG_LEVELS) | json_values,
    "protocolVersion": st.sampled_from(LEGACY + (MODERN,)) | json_values,
    "capabilities": objects | json_values, "clientInfo": json_values,
    "requestId": st.text(max_size=6).map(CANCELLED_PREFIX.__add__) | json_values,
    "progressToken": json_values, "notifications": json_values}
meta_values = st.fixed_dictionaries(
    {VERSION_KEY: weighted(MODERN, st.sampled_from(LEGACY), json_values, one_in=5),
     CAPS_KEY: st.just({}) | st.just({"extensions": {TASKS_EXTENSION: {}}}) | json_values},
    optional={"progressToken": request_ids | json_values,
              "io.modelcontextprotocol/logLevel": st.sampled_from(LOG_LEVELS) | json_values,
              "io.modelcontextprotocol/clientInfo": json_values})
legacy_meta = st.fixed_dictionaries({}, optional={"progressToken": request_ids | json_values})
header_text = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E) | st.sampled_from("é\xa0ÿ"),
                      max_size=24).map(str.strip)

# Accept headers whose meaning is not in doubt, and what each allows
ACCEPTS = {
    "application/json, text/event-stream": {JSON_TYPE, SSE_TYPE},
    "text/event-stream, application/json": {JSON_TYPE, SSE_TYPE},
    "APPLICATION/JSON, Text/Event-Stream": {JSON_TYPE, SSE_TYPE},
    "application/json;q=0.9, text/event-stream;q=0.8": {JSON_TYPE, SSE_TYPE},
    "*/*": {JSON_TYPE, SSE_TYPE},
    "application/json": {JSON_TYPE},
    "application/json; charset=utf-8": {JSON_TYPE},
    "application/*": {JSON_TYPE},
    "text/event-stream": {SSE_TYPE},
    "text/*": {SSE_TYPE},
    "text/event-stream; charset=utf-8": {SSE_TYPE},
    "text/html": set(),
    "application/xml, text/plain": set(),
    "image/*": set(),
    "application/jsonl, text/event-streams": set(),
}
CONTENT_TYPES = {  # Content-Type -> whether it says JSON
    "application/json": True, "application/json; charset=utf-8": True, "Application/JSON": True,
    "application/json;charset=UTF-8": True,
    None: False, "text/plain": False, "application/x-www-form-urlencoded": False, "application/jsonl": False,
    "application/json-rpc": False, "multipart/form-data; boundary=x": False,
}



@st.composite
def frames(draw):
    """(message or None, body bytes, era): mostly well-formed frames with fuzzed fields, some junk."""
    era = draw(st.sampled_from(["legacy", "modern"]))
    kind = draw(st.sampled_from(["request"] * 6 + ["notification", "response", "junk", "bytes"]))
    params = draw(st.fixed_dictionaries({}, optional=params_fields))
    if era == "modern":
        params["_meta"] = draw(meta_values)
    elif draw(st.booleans()):
        params["_meta"] = draw(legacy_meta)
    if kind in ("request", "bytes"):  # the bytes of a request get mangled below
        message = {"jsonrpc": draw(weighted("2.0", json_values)),
                   "id": draw(request_ids if draw(weighted(True, st.just(False), one_in=6)) else any_ids),
                   "method": draw(methods)}
    elif kind == "notification":
        message = {"jsonrpc": "2.0", "method": draw(notification_methods)}
    elif kind == "response":  # only a legacy client answers requests of the server's
        era, message = "legacy", {"jsonrpc": "2.0", "id": draw(request_ids)}
        message.update(draw(st.sampled_from([{"result": {}}, {"result": {"action": "accept", "content": {}}},
                                             {"error": {"code": -32601, "message": "no"}}])))
    else:
        message = draw(json_values | st.lists(st.fixed_dictionaries(
            {"jsonrpc": st.just("2.0"), "id": request_ids, "method": st.sampled_from(["ping", "tools/list"])}),
            max_size=3))
    if isinstance(message, dict) and "method" in message and draw(weighted(True, st.just(False))):
        message["params"] = draw(weighted(params, json_values))
    if draw(weighted(True, st.just(False), one_in=4)):
        body = json.dumps(message).encode()  # lone surrogates travel as \\ud800 escapes
    else:  # raw UTF-8; a lone surrogate becomes bytes that are not UTF-8 at all
        body = json.dumps(message, ensure_ascii=False).encode("utf-8", "surrogatepass")
    if kind == "bytes":  # mangle the frame: cut it, or splice in arbitrary bytes
        cut = draw(st.integers(0, len(body)))
        body = body[:cut] + draw(st.binary(max_size=8)) + body[cut:] * draw(st.sampled_from([0, 1]))
        try:
            message = strict_json(body.decode("utf-8"))
        except ValueError:  # includes UnicodeDecodeError
            message = None
    return message, body, era


@st.composite
def exchanges(draw):
    """A frame with the headers a client might send around it."""
    message, body, era = draw(frames())
    method = message.get("method") if isinstance(message, dict) else None
    params = message.get("params") if isinstance(message, dict) else None
    accept = draw(weighted(ACCEPT_BOTH, st.sampled_from([None, *ACCEPTS]), header_text))
    content_type = draw(weighted(JSON_TYPE, st.sampled_from(list(CONTENT_TYPES)), header_text))
    headers = {"Accept": accept, "Content-Type": content_type}
    auth = draw(weighted("bearer", st.sampled_from(["lower", "x-api-key", "none"])))
    headers["Authorization"] = {"bearer": f"Bearer {DEMO_KEY}", "lower": f"bearer {DEMO_KEY}"}.get(auth)
    if auth == "x-api-key":
        headers["X-API-Key"] = DEMO_KEY
    version = draw(st.sampled_from(LEGACY))
    session = draw(weighted("valid", st.sampled_from(["none", "empty", "garbage", "foreign", "tampered", "random"])))
    if era == "modern":
        session = draw(weighted("none", st.just(session)))
    headers["Mcp-Session-Id"] = {"valid": f"<{version} session>", "none": None, "empty": "", "garbage": "s1.nope.nope",
                                 "foreign": "<another key's session>", "tampered": "<tampered session>",
                                 "random": draw(header_text)}.get(session)
    if era == "modern":
        meta = params.get("_meta") if isinstance(params, dict) else None
        meta_version = meta.get(VERSION_KEY) if isinstance(meta, dict) else None
        headers["MCP-Protocol-Version"] = draw(weighted(
            meta_version if isinstance(meta_version, str) and header_safe(meta_version) else MODERN,
            st.sampled_from([None, MODERN, *LEGACY]), header_text))
        headers["Mcp-Method"] = draw(weighted(method if header_safe(method) else None, st.none(), header_text))
        name = params.get("name", params.get("taskId")) if isinstance(params, dict) else None
        if isinstance(name, str) and not SURROGATE.search(name):
            headers["Mcp-Name"] = draw(weighted(mcp_name_header(name), st.none(), header_text))
        else:
            headers["Mcp-Name"] = draw(st.none() | header_text)
    else:
        headers["MCP-Protocol-Version"] = draw(weighted(None, st.just(version), st.just(version), st.sampled_from(
            [MODERN, *LEGACY]), header_text, one_in=3))
        if draw(st.integers(0, 9)) == 9:  # a legacy request has no use for it
            headers["Mcp-Method"] = draw(header_text)
    chunked = draw(st.integers(0, 9)) == 9
    return message, body, headers, chunked


def resolve_session(live, headers):
    """The session ids of the module's sessions in place of their labels."""
    token = live.sessions[LEGACY[0]]
    labels = {**{f"<{version} session>": session for version, session in live.sessions.items()},
              "<another key's session>": live.foreign_session,
              "<tampered session>": token[:-4] + ("BBBB" if token.endswith("AAAA") else "AAAA")}
    value = headers.get("Mcp-Session-Id")
    return {**headers, "Mcp-Session-Id": labels.get(value, value)}


# -- the fuzz properties ----------------------------------------------------------------------------------

@FUZZ
@given(exchange=exchanges())
def test_any_post_gets_a_well_formed_answer_with_its_id_and_never_a_5xx(serving, exchange):
    message, body, headers, chunked = exchange
    headers = resolve_session(serving, headers)
    answer = serving.post(body, headers, chunked=chunked)
    event(f"{kind_of(message) if message is not None else 'not JSON'}: HTTP {answer.status} {answer.type}")
    if answer.status >= 400 and answer.responses:
        event(f"error: {answer.responses[0]['error']['message'][:40]}")
    accept, content_type = headers["Accept"], headers["Content-Type"]
    accepts = ACCEPTS.get(accept) if accept is not None else None
    check_answer(message, answer, accepts)
    if accepts == set():
        assert answer.status == 406, answer
    elif accepts and content_type in CONTENT_TYPES and not CONTENT_TYPES[content_type]:
        assert answer.status == 415, answer
    elif accepts and content_type in CONTENT_TYPES and headers["Authorization"] is None \
            and "X-API-Key" not in headers:
        assert answer.status == 401, answer


@st.composite
def routed_requests(draw):
    """A well-formed 2026 request, and routing headers that may or may not mirror it."""
    method = draw(st.sampled_from(["tools/call", "tools/call", "tools/list", "server/discover", "tasks/get",
                                   "tasks/cancel"]))
    name = draw(st.sampled_from(["echo", "test_simple_text"]) | st.text(
        st.sampled_from("abz09-_./ é✓\t"), min_size=1, max_size=10).filter(lambda s: not s.startswith("=?")))
    params = {"_meta": modern_meta()}
    if method == "tools/call":
        params.update(name=name, arguments={"text": "routed"})
    elif method.startswith("tasks/"):
        params.update(taskId=name, _meta=modern_meta(**{CAPS_KEY: {"extensions": {TASKS_EXTENSION: {}}}}))
    mirrored = params.get("name", params.get("taskId"))

    version = draw(st.sampled_from(["same", "same", "missing", "legacy", "padded", "other"]))
    method_header = draw(st.sampled_from(["same", "same", "missing", "other", "case", "padded"]))
    name_header = draw(st.sampled_from(["same", "same", "base64", "missing", "other", "bad base64", "case"]))
    header_names = draw(st.sampled_from([("MCP-Protocol-Version", "Mcp-Method", "Mcp-Name"),
                                         ("mcp-protocol-version", "mcp-method", "mcp-name"),
                                         ("MCP-PROTOCOL-VERSION", "MCP-METHOD", "MCP-NAME")]))
    headers, match = {}, True
    value = {"same": MODERN, "missing": None, "legacy": LEGACY[0], "padded": MODERN + " ", "other": "2026-07-29"}[version]
    match &= version in ("same", "padded")  # HTTP drops the whitespace around a field value
    headers[header_names[0]] = value
    value = {"same": method, "missing": None, "other": "tools/lis", "case": method.upper(),
             "padded": method + " \t"}[method_header]
    match &= method_header in ("same", "padded")
    headers[header_names[1]] = value
    if mirrored is not None:
        if name_header == "same":
            value = mcp_name_header(mirrored)
        elif name_header == "base64":
            value = wrapped(mirrored)
        elif name_header == "case":
            value = mcp_name_header(mirrored.swapcase())
            match &= mirrored.swapcase() == mirrored
        elif name_header == "other":
            value = mcp_name_header(mirrored + "x")
            match = False
        elif name_header == "bad base64":
            value = "=?base64?" + base64.b64encode(mirrored.encode()).decode().rstrip("=") + "!?="
            match = False
        else:
            value, match = None, False
        headers[header_names[2]] = value
    elif name_header not in ("same", "missing", "base64"):
        headers[header_names[2]] = "ignored"  # no name to mirror: the header is not checked
    return {"jsonrpc": "2.0", "id": draw(plain_ids), "method": method, "params": params}, headers, match


@FUZZ
@given(request=routed_requests())
def test_2026_routing_headers_must_mirror_the_body_or_get_header_mismatch(serving, request):
    message, headers, match = request
    answer = serving.post(message, headers)
    check_answer(message, answer)
    codes = [m["error"]["code"] for m in answer.responses if "error" in m]
    if match:
        assert -32020 not in codes, f"headers mirror the body, yet: {answer}"
    else:
        assert answer.status == 400 and codes == [-32020], f"headers disagree with the body: {answer}"


@st.composite
def negotiated_requests(draw):
    """A valid request of either era, and an Accept header whose meaning is clear."""
    era = draw(st.sampled_from(["legacy", "modern"]))
    accept = draw(st.sampled_from(list(ACCEPTS)))
    id_ = draw(plain_ids)
    call = {"name": draw(st.sampled_from(["echo", "no-such-tool"])), "arguments": {"text": "negotiated"}}
    method = draw(st.sampled_from(["tools/list", "tools/call", "tools/call+progress", "ping"]))
    if method == "tools/call+progress":
        method, call["_meta"] = "tools/call", {"progressToken": draw(request_ids.filter(lambda i: isinstance(i, int)))}
    params = call if method == "tools/call" else None
    if era == "modern" and method == "ping":
        method = "server/discover"
    return era, accept, id_, method, params


@FUZZ
@given(request=negotiated_requests())
def test_each_accept_header_gets_its_answer_in_a_format_it_takes_with_exactly_one_response(serving, request):
    era, accept, id_, method, params = request
    if era == "modern":
        answer = serving.modern(method, params, id_=id_, headers={"Accept": accept})
        message = {"jsonrpc": "2.0", "id": id_, "method": method, "params": {**(params or {}), "_meta": modern_meta()}}
    else:
        answer = serving.legacy(method, params, id_=id_, headers={"Accept": accept})
        message = {"jsonrpc": "2.0", "id": id_, "method": method}
    accepts = ACCEPTS[accept]
    check_answer(message, answer, accepts)
    if not accepts:
        assert answer.status == 406, answer
        return
    if accepts == {SSE_TYPE}:
        assert answer.status >= 400 or answer.type == SSE_TYPE, answer
    if answer.status == 200 and answer.type == SSE_TYPE:
        assert answer.headers.get("Cache-Control") == "no-cache", answer  # a proxy must not hold it back
    if answer.status < 400 and params and "_meta" in params:
        for note in answer.messages[:-1]:
            if note["method"] == "notifications/progress":
                assert same_id(note["params"]["progressToken"], params["_meta"]["progressToken"]), answer


@st.composite
def one_way_messages(draw):
    """A notification or a response, for either era, with any Accept a client may send."""
    era = draw(st.sampled_from(["legacy", "modern"]))
    if draw(st.booleans()):
        method = draw(notification_methods.filter(header_safe))
        message = {"jsonrpc": "2.0", "method": method}
        params = draw(st.fixed_dictionaries({}, optional={
            "requestId": st.text(max_size=6).map(CANCELLED_PREFIX.__add__), "reason": text,
            "progressToken": request_ids, "progress": st.integers() | finite,
            "level": st.sampled_from(LOG_LEVELS), "data": json_values}))
        if era == "modern":
            params["_meta"] = modern_meta()
        if params or draw(st.booleans()):
            message["params"] = params
    else:
        message = {"jsonrpc": "2.0", "id": draw(request_ids), **draw(st.sampled_from([
            {"result": {}}, {"result": {"action": "decline"}}, {"error": {"code": -1, "message": "no"}}]))}
        era = "legacy"  # 2026 clients send no responses; a legacy client answers the server's requests
    return era, message, draw(st.sampled_from(["application/json, text/event-stream", "application/json",
                                                "text/event-stream", "*/*"]))


@settings(FUZZ, max_examples=80)
@given(one_way=one_way_messages())
def test_notifications_and_responses_are_accepted_with_202_and_no_body(serving, one_way):
    era, message, accept = one_way
    headers = {"Accept": accept}
    if era == "modern":
        headers.update({"MCP-Protocol-Version": MODERN, "Mcp-Method": message["method"]})
    else:
        headers["Mcp-Session-Id"] = serving.sessions[LEGACY[0]]
    answer = serving.post(message, headers)
    check_answer(message, answer)
    assert answer.status == 202 and answer.content == b"", answer


# -- fixed cases -------------------------------------------------------------------------------------------

IDS = [  # (label, JSON text of the id, how it must be answered)
    ("string", '"abc"', "echo"), ("empty string", '""', "echo"), ("unicode string", '"ü-✓-𝄞"', "echo"),
    ("long string", json.dumps("i" * 10_000), "echo"), ("int", "7", "echo"), ("zero", "0", "echo"),
    ("negative int", "-42", "echo"), ("big int", str(2 ** 80), "echo"), ("huge int", "9" * 4000, "echo"),
    ("float", "1.5", "invalid"),  # MCP: "string or integer"
    ("exponent float", "2.5e-1", "invalid"), ("null", "null", "invalid"), ("true", "true", "invalid"),
    ("false", "false", "invalid"), ("object", '{"a":1}', "invalid"), ("empty object", "{}", "invalid"),
    ("array", "[1]", "invalid"), ("empty array", "[]", "invalid"),
]


def raw_request(id_text, method, params):
    return ('{"jsonrpc":"2.0","id":%s,"method":%s,"params":%s}' % (id_text, json.dumps(method), json.dumps(params))
            ).encode()


def era_headers(live, era, method="tools/call", name="echo"):
    """What a well-behaved client of that era sends besides the body."""
    if era == "legacy":
        return {"Mcp-Session-Id": live.sessions[LEGACY[0]]}
    headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": method}
    if method == "tools/call":
        headers["Mcp-Name"] = name
    return headers


def era_params(era, params):
    return {**params, "_meta": modern_meta(**params.get("_meta", {}))} if era == "modern" else params


@pytest.mark.parametrize("accept", [ACCEPT_BOTH, "application/json", "text/event-stream"])
@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_string_and_integer_ids_are_echoed_exactly_and_other_ids_are_invalid_requests(serving, era, accept):
    failures = []
    for method, params in (("ping" if era == "legacy" else "server/discover", {}),
                           ("tools/call", {"name": "echo", "arguments": {"text": "id"}})):
        headers = {**era_headers(serving, era, method), "Accept": accept}
        for label, id_text, expected in IDS:
            body = raw_request(id_text, method, era_params(era, params))
            message = json.loads(body)
            answer = serving.post(body, headers)
            try:
                check_answer(message, answer, ACCEPTS[accept])
                (response,) = answer.responses
                if expected == "echo":
                    assert answer.status == 200 and "result" in response, answer
                    assert same_id(response["id"], message["id"]), answer
                else:
                    assert "error" in response and response["error"]["code"] == -32600, answer
                    assert response.get("id") is None, answer
            except (AssertionError, ValueError) as exc:
                failures.append(f"{method} with a {label} id: {exc}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("shape", ["one long string", "a valid call, then padding"])
@pytest.mark.parametrize("transfer", ["content-length", "chunked"])
def test_a_10_mb_body_is_refused_with_413_quickly_and_the_server_keeps_serving(serving, transfer, shape):
    ten_mb = 10 * 1024 * 1024
    failures = []
    for era in ("legacy", "modern"):
        if shape == "one long string":
            body = raw_request('"big"', "tools/call", era_params(era, {"name": "echo", "arguments": {"text": "x"}}))
            body = body.replace(b'"x"', b'"' + b"x" * ten_mb + b'"')
        else:  # a body whose first 4 MiB parse as a whole request: it must not run
            body = raw_request('"big"', "tools/call", era_params(era, {"name": "echo", "arguments": {"text": "ran"}}))
            body += b" " * ten_mb + b"and then something that is not JSON"
        answer = serving.post(body, era_headers(serving, era), chunked=transfer == "chunked")
        if answer.status != 413 or answer.elapsed > 5:
            failures.append(f"{era}: {answer}")
        else:
            check_answer(None, answer)
        # gunicorn may drop a connection whose body it would have to drain: go on with a new one
        serving.http = requests.Session()
        after = serving.legacy("ping", id_="next")
        assert after.responses == [{"jsonrpc": "2.0", "id": "next", "result": {}}], after
    assert not failures, f"a {transfer} body of 10 MB was not refused with a quick 413:\n" + "\n".join(failures)


DEEP = 100_000


def nestings(era):
    meta = b'"_meta":' + json.dumps(modern_meta()).encode() + b"," if era == "modern" else b""
    arrays = b"[" * DEEP + b"]" * DEEP
    return {
        "unclosed arrays": b"[" * DEEP,
        "unclosed objects": b'{"a":' * DEEP,
        "balanced arrays": arrays,
        "balanced arrays as the id": b'{"jsonrpc":"2.0","id":' + arrays + b',"method":"tools/call","params":{'
                                     + meta + b'"name":"echo","arguments":{"text":"x"}}}',
        "balanced arrays in a tool argument": b'{"jsonrpc":"2.0","id":"deep","method":"tools/call","params":{'
                                              + meta + b'"name":"echo","arguments":{"text":' + arrays + b"}}}",
    }


@pytest.mark.parametrize("era", ["legacy", "modern"])
@pytest.mark.parametrize("shape", list(nestings("legacy")))
def test_100000_levels_of_nesting_get_a_parse_error_quickly_not_a_crash(serving, shape, era):
    answer = serving.post(nestings(era)[shape], era_headers(serving, era))
    check_answer(None, answer)
    assert answer.status == 400 and answer.responses[0]["error"]["code"] == -32700, answer
    assert answer.elapsed < 5, answer


def with_nesting(message, depth):
    """``message`` as bytes, its ``"DEEP"`` string replaced by ``depth`` levels of nested arrays."""
    return json.dumps(message).encode().replace(b'"DEEP"', b"[" * depth + b"]" * depth)


@pytest.mark.parametrize("where", ["tool argument", "initialize clientInfo", "2026 clientInfo"])
def test_nesting_the_parser_accepts_is_answered_without_an_internal_error(serving, where):
    """Up to the parser's own limit: a parse error (too deep for it) or a real answer, never the
    catch-all Internal error of an exception the server did not expect."""
    failures = []
    eras = {"tool argument": ("legacy", "modern"), "initialize clientInfo": ("legacy",), "2026 clientInfo": ("modern",)}
    for depth in (100, 300, 450, 600, 800, 900, 950, 970, 985):
        for era in eras[where]:
            if where == "tool argument":
                method, params = "tools/call", {"name": "echo", "arguments": {"text": "deep", "extra": "DEEP"}}
            elif where == "initialize clientInfo":
                method, params = "initialize", {"protocolVersion": LEGACY[0], "capabilities": {"x": "DEEP"},
                                                "clientInfo": {"name": "DEEP", "version": "1"}}
            else:
                method, params = "server/discover", {"_meta": {"io.modelcontextprotocol/clientInfo": {
                    "name": "DEEP", "version": "1"}}}
            message = {"jsonrpc": "2.0", "id": depth, "method": method, "params": era_params(era, params)}
            answer = serving.post(with_nesting(message, depth), era_headers(serving, era, method))
            if answer.status == 400 and answer.responses and answer.responses[0]["error"]["code"] == -32700:
                continue  # deeper than the parser goes
            try:
                check_answer(message, answer)
            except AssertionError as exc:
                failures.append(f"{era} {method}, {depth} levels: {exc}")
    assert not failures, "\n".join(failures)


INVALID_UTF8 = {
    "a lone 0xFF": b"\xff", "a lone continuation byte": b"\x80", "a truncated 2-byte sequence": b"\xc3",
    "an overlong '/'": b"\xc0\xaf", "a UTF-8-encoded surrogate (CESU-8)": b"\xed\xa0\x80",
    "a code point past U+10FFFF": b"\xf4\x90\x80\x80", "a 5-byte sequence": b"\xf8\x88\x80\x80\x80",
    "Latin-1 text": "café".encode("latin-1"),
}


@pytest.mark.parametrize("where", ["tool argument", "method", "id", "between tokens"])
@pytest.mark.parametrize("bad", list(INVALID_UTF8))
def test_bodies_that_are_not_utf_8_get_a_parse_error(serving, bad, where):
    junk = INVALID_UTF8[bad]
    for era in ("legacy", "modern"):
        body = raw_request('"utf8"', "tools/call", era_params(era, {"name": "echo", "arguments": {"text": "ok"}}))
        if where == "tool argument":
            body = body.replace(b'"ok"', b'"o' + junk + b'k"')
        elif where == "method":
            body = body.replace(b'"tools/call"', b'"tools/' + junk + b'call"')
        elif where == "id":
            body = body.replace(b'"utf8"', b'"utf' + junk + b'8"')
        else:
            body = body.replace(b",", b"," + junk, 1)
        answer = serving.post(body, era_headers(serving, era))
        check_answer(None, answer)
        assert answer.status == 400 and answer.responses[0]["error"]["code"] == -32700, f"{era}: {answer}"


SURROGATES = {  # where a lone surrogate goes; json.dumps sends it as a \ud800 escape: valid JSON, no UTF-8 form
    "tool argument": ("tools/call", {"name": "echo", "arguments": {"text": "a\ud800b"}}, "s1"),
    "tool argument (reversed pair)": ("tools/call", {"name": "echo", "arguments": {"text": "\udc00\ud83d"}}, "s2"),
    "argument name": ("tools/call", {"name": "echo", "arguments": {"text": "x", "\udfff": 1}}, "s3"),
    "tool name": ("tools/call", {"name": "ec\ud800ho", "arguments": {"text": "x"}}, "s4"),
    "method name": ("tools/\ud800", {}, "s5"),
    "id": ("tools/list", {}, "id-\ud800"),
    "progress token": ("tools/call", {"name": "echo", "arguments": {"text": "x"}, "_meta": {"progressToken": "\udbff"}},
                       "s6"),
    "cursor": ("tools/list", {"cursor": "\ud800"}, "s7"),
}


@pytest.mark.parametrize("accept", [ACCEPT_BOTH, "text/event-stream"])
@pytest.mark.parametrize("era", ["legacy", "modern"])
@pytest.mark.parametrize("where", list(SURROGATES))
def test_unpaired_surrogates_get_a_well_formed_answer_not_a_500(serving, where, era, accept):
    method, params, id_ = SURROGATES[where]
    message = {"jsonrpc": "2.0", "id": id_, "method": method, "params": era_params(era, params)}
    headers = {"Accept": accept}
    if era == "modern":  # header values can carry no surrogate: sent escaped, or wrapped as the bytes they'd be
        headers.update({"MCP-Protocol-Version": MODERN, "Mcp-Method": json.dumps(method)[1:-1]})
        if method == "tools/call":
            name = params["name"]
            headers["Mcp-Name"] = name if header_safe(name) else "=?base64?" + base64.b64encode(
                name.encode("utf-8", "surrogatepass")).decode() + "?="
    else:
        headers["Mcp-Session-Id"] = serving.sessions[LEGACY[0]]
    answer = serving.post(json.dumps(message).encode(), headers)
    check_answer(message, answer, ACCEPTS[accept])


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_progress_streams_carry_notifications_then_exactly_one_response(serving, era):
    """A slow call with a progress token, for each kind of client at once (concurrently)."""
    accepts = {"both": ACCEPT_BOTH, "SSE only": "text/event-stream", "JSON only": "application/json"}

    def call(item):
        label, accept = item
        client = serving.fork()
        params = {"name": "test_tool_with_progress", "arguments": {}, "_meta": {"progressToken": f"p-{label}"}}
        if era == "modern":
            return label, client.modern("tools/call", params, id_=label, headers={"Accept": accept})
        return label, client.legacy("tools/call", params, id_=label, headers={"Accept": accept})

    with ThreadPoolExecutor(len(accepts)) as pool:
        answers = dict(pool.map(call, accepts.items()))
    for label, answer in answers.items():
        message = {"jsonrpc": "2.0", "id": label, "method": "tools/call"}
        check_answer(message, answer, ACCEPTS[accepts[label]])
        assert answer.status == 200, answer
        response = answer.messages[-1]
        assert response["result"]["content"][0]["text"] == "Tool with progress completed.", answer
        progress = [m["params"] for m in answer.messages[:-1] if m["method"] == "notifications/progress"]
        if label == "JSON only":
            assert answer.type == JSON_TYPE and not progress, answer
        else:
            assert answer.type == SSE_TYPE and progress, answer
            assert all(p["progressToken"] == f"p-{label}" for p in progress), answer
            values = [p["progress"] for p in progress]
            assert values == sorted(values), answer
