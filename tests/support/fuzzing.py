"""What the HTTP fuzz tests share: the live hosted server, strict parsing of its answers, the
properties every exchange must have, and hypothesis strategies for JSON-RPC frames."""

import base64
import json
import re
import time

import requests
from hypothesis import HealthCheck, settings, strategies as st

from colabhive_mcp.sandbox import DEMO_KEY, DEMO_KEY_B

MODERN = "2026-07-28"
LEGACY = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
JSON_TYPE = "application/json"
SSE_TYPE = "text/event-stream"
ACCEPT_BOTH = "application/json, text/event-stream"
VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
CAPS_KEY = "io.modelcontextprotocol/clientCapabilities"
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
# a cancellation names ids from this family only, so no fuzzed request is ever "cancelled early"
CANCELLED_PREFIX = "gone-"
INTERNAL = "Internal error"  # the core's catch-all answer to an unexpected exception
SURROGATE = re.compile("[\ud800-\udfff]")
SERVER_FAILURES = re.compile(r"Traceback|Error handling request|WORKER TIMEOUT|Worker \(pid|"
                             r"(mcp|http|stdio)\.internal_error|thread\.failed|http\.stream_failed")

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[
    HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large])


def modern_meta(**extra):
    return {VERSION_KEY: MODERN, CAPS_KEY: {}, **extra}


# -- the live server -------------------------------------------------------------------------------

class Answer:
    """One HTTP exchange, read to its end (or to a deadline), with its JSON-RPC messages parsed."""

    def __init__(self, status, headers, content, elapsed, broken=None):
        self.status, self.headers, self.content, self.elapsed = status, headers, content, elapsed
        self.broken = broken  # why reading the body failed, if it did
        self.type = headers.get("Content-Type", "").split(";")[0].strip().lower()
        self.problem = None  # why the body is not well-formed, if it is not
        self.messages, self.body = [], None
        if broken is None and status not in (202, 204):
            self._parse()

    def _parse(self):
        try:
            text = self.content.decode("utf-8")  # strict: JSON-RPC is UTF-8
        except UnicodeDecodeError as exc:
            self.problem = f"body is not UTF-8: {exc}"
            return
        try:
            if self.type == SSE_TYPE:
                self.messages = [strict_json(data) for _, data, _ in parse_sse(text) if data.strip()]
            elif self.type == JSON_TYPE:
                self.body = strict_json(text)
                self.messages = self.body if isinstance(self.body, list) else [self.body]
            else:
                self.problem = f"unexpected Content-Type {self.headers.get('Content-Type')!r}"
        except ValueError as exc:
            self.problem = f"not strict JSON: {exc}"

    @property
    def responses(self):
        return [m for m in self.messages if isinstance(m, dict) and "method" not in m]

    def __repr__(self):
        head = self.content[:600].decode("utf-8", "backslashreplace")
        return (f"<HTTP {self.status} {self.headers.get('Content-Type')!r} in {self.elapsed:.2f}s"
                f"{' BROKEN: ' + self.broken if self.broken else ''} {head!r}>")


class Live:
    """The hosted server (2 gunicorn workers) with a keep-alive client and one session per legacy version."""

    def __init__(self, hosted):
        self.url, self.root = hosted.url, hosted.root
        self.server = hosted
        self.http = requests.Session()
        self.sessions = {version: self.initialize(version) for version in LEGACY}
        self.foreign_session = self.initialize(LEGACY[0], key=DEMO_KEY_B)  # valid, but for another key

    def post(self, body, headers=None, *, chunked=False, deadline=20.0):
        """POST ``body`` (bytes, or a JSON value) and read the answer to its end within ``deadline``.

        ``headers`` overrides the defaults; a ``None`` value leaves that header out entirely.
        """
        if not isinstance(body, bytes):
            body = json.dumps(body).encode()
        sent = {"Accept": ACCEPT_BOTH, "Content-Type": JSON_TYPE, "Authorization": f"Bearer {DEMO_KEY}",
                **(headers or {})}
        started = time.monotonic()
        data = iter([body[i:i + (1 << 20)] for i in range(0, len(body), 1 << 20)] or [b""]) if chunked else body
        try:
            with self.http.post(self.url, data=data, headers=sent, stream=True, timeout=(5, deadline)) as r:
                content = bytearray()
                for chunk in r.iter_content(1 << 16):
                    content += chunk
                    if time.monotonic() - started > deadline:
                        return Answer(r.status_code, r.headers, bytes(content), time.monotonic() - started,
                                      broken=f"the answer did not end within {deadline}s")
                return Answer(r.status_code, r.headers, bytes(content), time.monotonic() - started)
        except requests.RequestException as exc:
            self.http = requests.Session()  # the connection is in an unknown state
            return Answer(0, {}, b"", time.monotonic() - started, broken=f"{type(exc).__name__}: {exc}")

    def fork(self):
        """The same server and sessions, with a keep-alive client of its own (for another thread)."""
        copy = object.__new__(Live)
        copy.__dict__.update(self.__dict__, http=requests.Session())
        return copy

    def initialize(self, version, key=DEMO_KEY):
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "fuzz", "version": "1"}}}
        answer = self.post(init, {"Authorization": f"Bearer {key}"})
        assert answer.status == 200, answer
        session = answer.headers["Mcp-Session-Id"]
        done = self.post({"jsonrpc": "2.0", "method": "notifications/initialized"},
                         {"Authorization": f"Bearer {key}", "Mcp-Session-Id": session})
        assert done.status == 202, done
        return session

    def modern(self, method, params=None, id_=1, headers=None, **kw):
        params = {**(params or {}), "_meta": modern_meta(**(params or {}).get("_meta", {}))}
        sent = {"MCP-Protocol-Version": MODERN, "Mcp-Method": method, **(headers or {})}
        if method == "tools/call" and "Mcp-Name" not in sent:
            sent["Mcp-Name"] = mcp_name_header(params["name"])
        return self.post({"jsonrpc": "2.0", "id": id_, "method": method, "params": params}, sent, **kw)

    def legacy(self, method, params=None, id_=1, version=LEGACY[0], headers=None, **kw):
        body = {"jsonrpc": "2.0", "id": id_, "method": method, **({"params": params} if params is not None else {})}
        return self.post(body, {"Mcp-Session-Id": self.sessions[version], **(headers or {})}, **kw)

    def assert_still_serving(self, since):
        """A fresh connection gets a health check and a normal call in both eras; no unhandled exceptions."""
        assert requests.get(self.root + "/healthz", timeout=10).json() == {"status": "ok"}
        fresh = requests.post(self.url, data=json.dumps({"jsonrpc": "2.0", "id": "after", "method": "tools/list",
                                                         "params": {"_meta": modern_meta()}}),
                              headers={"Accept": ACCEPT_BOTH, "Content-Type": JSON_TYPE, "Mcp-Method": "tools/list",
                                       "MCP-Protocol-Version": MODERN, "Authorization": f"Bearer {DEMO_KEY}"},
                              timeout=20)
        assert fresh.status_code == 200 and "echo" in {t["name"] for t in fresh.json()["result"]["tools"]}
        ping = self.legacy("ping", id_="after")
        assert ping.status == 200 and ping.responses == [{"jsonrpc": "2.0", "id": "after", "result": {}}], ping
        if since is None:
            return
        time.sleep(0.05)  # a crash is logged before its answer goes out; let the log catch up
        failures = [line for line in self.server.stderr(since).splitlines() if SERVER_FAILURES.search(line)]
        assert not failures, "the server logged unhandled exceptions:\n" + "\n".join(failures[:20])


# -- parsing and checking answers --------------------------------------------------------------------

def strict_json(text):
    """JSON as RFC 8259 has it: no NaN or Infinity (Python's own json would accept them)."""
    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")
    return json.loads(text, parse_constant=refuse)


def parse_sse(text):
    """The events of an SSE body as (type, data, last event id), per the WHATWG parsing rules.

    A final event not ended by a blank line is never dispatched, as in a browser.
    """
    events, data, kind, last_id = [], None, "", None
    for line in re.split(r"\r\n|\r|\n", text.removeprefix("\ufeff")):
        if not line:
            if data is not None:
                events.append((kind or "message", "\n".join(data), last_id))
            data, kind = None, ""
            continue
        if line.startswith(":"):
            continue
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            data = (data or []) + [value]
        elif name == "event":
            kind = value
        elif name == "id" and "\0" not in value:
            last_id = value
    return events


def same_id(a, b):
    """JSON-equal ids: ``1`` is not ``1.0`` nor ``true``; a string's escaped surrogate pair is the
    character it encodes (``"\\ud800\\udc00"`` is U+10000 to any JSON reader)."""
    return type(a) is type(b) and (_code_points(a) == _code_points(b) if isinstance(a, str) else a == b)


def _code_points(text):
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "surrogatepass")


def valid_id(value):
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def check_message(message):
    """One well-formed JSON-RPC 2.0 message (what a strict client would accept)."""
    assert isinstance(message, dict) and message.get("jsonrpc") == "2.0", message
    if "method" in message:  # a notification (or a request of the server's own)
        assert isinstance(message["method"], str), message
        assert "id" not in message or valid_id(message["id"]), message
        return
    assert ("result" in message) != ("error" in message), message
    if "result" in message:
        assert valid_id(message.get("id")) and isinstance(message["result"], dict), message
    else:
        error = message["error"]
        assert type(error.get("code")) is int and isinstance(error.get("message"), str) and error["message"], message
        assert message.get("id") is None or valid_id(message["id"]), message


def kind_of(message):
    """What a client meant to send: a request (valid id or not), notification, response, batch or other."""
    if isinstance(message, list):
        return "batch"
    if not isinstance(message, dict):
        return "other"
    if "method" in message:
        if "id" not in message:
            return "notification"
        return "request" if valid_id(message["id"]) else "bad-id request"
    if "id" in message and ("result" in message or "error" in message):
        return "response"
    return "other"


def is_modern(message):
    params = message.get("params") if isinstance(message, dict) else None
    meta = params.get("_meta") if isinstance(params, dict) else None
    return message.get("method") != "initialize" and isinstance(meta, dict) and VERSION_KEY in meta


def check_answer(message, answer, accepts=None):
    """The properties every exchange must have; ``message`` is what was sent (``None``: not JSON),
    ``accepts`` the formats the client's Accept header allows, when the test knows them."""
    assert not answer.broken, answer
    assert 200 <= answer.status < 500, answer
    assert answer.problem is None, (answer.problem, answer)
    kind = kind_of(message) if message is not None else "not JSON"
    session = answer.headers.get("Mcp-Session-Id")
    if session is not None:
        assert isinstance(message, dict) and message.get("method") == "initialize", answer
        assert session and all(0x21 <= ord(c) <= 0x7E for c in session), session  # visible ASCII only
    for item in answer.messages:
        check_message(item)
        assert (item.get("error") or {}).get("message") != INTERNAL, ("an unexpected exception", answer)

    if answer.status == 202:
        assert answer.content == b"", answer
        assert kind in ("notification", "response", "batch"), f"a {kind} was only 'accepted': {answer}"
        return
    if answer.status >= 400:  # refused: a JSON-RPC error body, never a result
        assert answer.type == JSON_TYPE and isinstance(answer.body, dict) and "error" in answer.body, answer
        sent_id = message.get("id") if isinstance(message, dict) else None  # null when it was not usable
        assert answer.body.get("id") is None or valid_id(sent_id) and same_id(answer.body["id"], sent_id), answer
        return

    assert answer.status == 200, f"{answer.status} for a {kind}: {answer}"
    if accepts is not None:
        assert answer.type in accepts, f"answered {answer.type}, the client accepts {accepts}"
    if kind == "batch":  # only a 2025-03-26 session may batch; otherwise one error
        for item in answer.responses:
            assert item.get("id") is None or any(isinstance(m, dict) and same_id(m.get("id"), item["id"])
                                                 for m in message), answer
        return
    assert kind in ("request", "bad-id request"), f"a {kind} got a 200 answer: {answer}"
    assert answer.type == SSE_TYPE or isinstance(answer.body, dict), answer  # a JSON body is one object
    responses = answer.responses
    assert len(responses) == 1, f"{len(responses)} responses for one request: {answer}"
    response = responses[0]
    if answer.type == SSE_TYPE:
        assert answer.messages[-1] is response, f"the stream went on after the response: {answer}"
        assert all("method" in m for m in answer.messages[:-1]), answer
    if kind == "request":
        assert same_id(response.get("id"), message["id"]), f"sent id {message['id']!r}: {answer}"
        if is_modern(message) and "result" in response:
            assert "resultType" in response["result"], answer  # 2026: required on every result
    else:
        assert response.get("id") is None and response["error"]["code"] == -32600, answer


# -- strategies ---------------------------------------------------------------------------------------

def weighted(common, *others, one_in=8):
    """``common``, but one time in ``one_in`` something from ``others`` (shrinks towards ``common``)."""
    other = st.one_of(*others)
    return st.integers(0, one_in - 1).flatmap(lambda n: other if n == one_in - 1 else st.just(common))


# text with everything JSON can carry, the awkward characters often: controls, NUL, line and paragraph
# separators, astral characters, and lone surrogates (valid as JSON escapes, with no UTF-8 form)
text = st.lists(st.characters(exclude_categories=()) | st.sampled_from("\x00\n\u2028é𝄞\ud800\udfff"),
                max_size=12).map("".join)
request_ids = st.integers() | st.integers(min_value=2 ** 63, max_value=2 ** 90) | text.filter(
    lambda s: not s.startswith(CANCELLED_PREFIX))
plain_ids = st.integers() | st.text(max_size=12)  # for tests about something else than odd text
finite = st.floats(allow_nan=False, allow_infinity=False)  # JSON has no NaN or Infinity (a body with one is not JSON)
any_ids = request_ids | st.none() | st.booleans() | finite | st.lists(st.integers(), max_size=2) | \
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | finite | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3), max_leaves=12)
objects = st.dictionaries(text, json_values, max_size=3)

def header_safe(value):
    """Whether a value can travel in a header as it is (else a client base64-wraps it)."""
    return isinstance(value, str) and value != "" and value == value.strip(" \t") and \
        all(0x20 <= ord(c) <= 0x7E for c in value) and not value.startswith("=?base64?")


def wrapped(value):
    """The base64 wrapping; a lone surrogate (which no UTF-8 can carry) goes as the bytes Python would
    make of it, which the server must refuse like any other name that does not match."""
    return "=?base64?" + base64.b64encode(value.encode("utf-8", "surrogatepass")).decode() + "?="


def mcp_name_header(name):
    return name if header_safe(name) else wrapped(name)
