"""W3C trace context: from the client's ``_meta`` or HTTP header to the gateway and the logs, and
OpenTelemetry spans when enabled (the SDK's in-memory exporter; a real OTLP/HTTP export)."""

import gzip
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from colabhive_mcp import tracing
from colabhive_mcp.cli.demo import StdioPeer
from colabhive_mcp.sandbox import DEMO_KEY

from .support.http_client import initialize, modern, post, rpc
from .support.http_server import events
from .support.core_client import Client
from .support.environ import server_env
from .support.waiting import wait_until

pytestmark = pytest.mark.slow

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
STATE = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"


FUTURE = f"01-{TRACE_ID}-00f067aa0ba902b7-01"  # a later version, in version 00's shape
MALFORMED = [  # none of them may reach the gateway's request headers
    FUTURE + "-what-a-future-version-adds",  # only the exact shape is carried, whatever the version
    FUTURE + "-" + "x" * 100_000,
    FUTURE + "-\x01\x7f\x1b[2J",  # control bytes
    FUTURE + "-caf\xe9",  # latin-1
    PARENT + "\x00",
    PARENT + "\n",
    PARENT.upper(),  # lower-case hex only
    f"00-{'0' * 32}-00f067aa0ba902b7-01",  # an invalid trace id
    f"00-{TRACE_ID}-{'0' * 16}-01",  # an invalid parent id
    f"ff-{TRACE_ID}-00f067aa0ba902b7-01",  # version ff is forbidden
    PARENT + "-extra",
    "00-4bf9-00f0-01",
]


@pytest.mark.parametrize("parent, carried", [(PARENT, True), (FUTURE, True)] + [(p, False) for p in MALFORMED] + [
    (7, False), (None, False), ({"traceparent": PARENT}, False),
])
def test_only_a_well_formed_traceparent_is_carried(parent, carried):
    found = tracing.carried({"traceparent": parent, "tracestate": STATE})
    assert found == ({"traceparent": parent, "tracestate": STATE} if carried else {})


@pytest.mark.parametrize("state, carried", [
    (STATE, True),
    (" congo=t61rcWkgMzE , , rojo=00f067aa0ba902b7", True),  # optional spaces, an empty member
    ("tenant@vendor=a b c", True),  # a multi-tenant key; a value may hold spaces
    (",".join(f"k{i}=v" for i in range(32)), True),
    (",".join(f"k{i}=v" for i in range(33)), False),  # at most 32 members
    ("a=" + "v" * 255 + ",b=" + "v" * 255, False),  # at most 512 characters
    ("a=1\r\nX-Injected: 1", False),
    ("a=\x01", False), ("a=caf\xe9", False), ("a=1\t", False),  # printable ASCII only
    ("a" * 513, False), ("no-equals-sign", False), ("Upper=1", False), ("a=", False), ("a=1=2", False),
    ("", False), (",", False), (7, False),
])
def test_tracestate_is_carried_only_when_well_formed_and_bounded(state, carried):
    found = tracing.carried({"traceparent": PARENT, "tracestate": state})
    assert found == ({"traceparent": PARENT, "tracestate": state} if carried else {"traceparent": PARENT})
    assert tracing.carried({"tracestate": STATE}) == {}


def traced(entries):
    return [(e["route"], e["traceparent"], e["tracestate"]) for e in entries]


def test_a_traceparent_in_meta_reaches_the_gateway_on_invoke_and_poll_and_the_log(hosted, sandbox, journal):
    answer = modern(hosted.url, "tools/call", {"name": "cold-summarizer", "arguments": {"text": "a long text"},
                                                "_meta": {"traceparent": PARENT, "tracestate": STATE}})
    assert answer.status_code == 200 and not answer.json()["result"].get("isError"), answer.text
    calls = [e for e in journal() if e["route"] in ("invoke", "poll")]
    assert {e["route"] for e in calls} == {"invoke", "poll"}
    assert set(traced(calls)) == {("invoke", PARENT, STATE), ("poll", PARENT, STATE)}
    assert wait_until(lambda: [e for e in events(hosted, "mcp.tool.invoked") if e.get("trace_id") == TRACE_ID])


def test_untraced_and_malformed_requests_send_no_trace_context(hosted, sandbox, journal):
    modern(hosted.url, "tools/call", {"name": "echo", "arguments": {"text": "a"}, "_meta": {"traceparent": PARENT}})
    for _ in range(4):  # whichever worker thread served the traced one: nothing of it stays behind
        modern(hosted.url, "tools/call", {"name": "echo", "arguments": {"text": "b"}})
    modern(hosted.url, "tools/call", {"name": "echo", "arguments": {"text": "c"},
                                      "_meta": {"traceparent": "00-not-a-trace-01"}})
    assert [e["traceparent"] for e in journal("invoke")] == [PARENT] + [None] * 5


def test_no_malformed_trace_context_reaches_the_gateway(hosted, sandbox, journal):
    for parent in MALFORMED:
        answer = modern(hosted.url, "tools/call", {"name": "echo", "arguments": {"text": "a"},
                                                    "_meta": {"traceparent": parent, "tracestate": STATE}})
        assert answer.status_code == 200, answer.text
    headers = (FUTURE + "-caf\xe9", FUTURE + "-" + "x" * 4000, PARENT.upper(), f"ff-{TRACE_ID}-00f067aa0ba902b7-01")
    for parent in headers:  # (gunicorn itself refuses control bytes in a header)
        answer = modern(hosted.url, "tools/call", {"name": "echo", "arguments": {"text": "b"}},
                        traceparent=parent, tracestate=STATE)
        assert answer.status_code == 200, answer.text
    modern(hosted.url, "tools/call", {"name": "echo", "arguments": {"text": "c"}},
           traceparent=PARENT, tracestate="a=\xe9," + STATE)
    sent = traced(journal("invoke"))
    assert sent == [("invoke", None, None)] * (len(MALFORMED) + len(headers)) + [("invoke", PARENT, None)]


def test_the_http_header_is_carried_for_a_legacy_session_up_to_the_cancel(hosted, sandbox, journal):
    session = initialize(hosted.url)
    call = threading.Thread(target=lambda: rpc(hosted.url, "tools/call", {
        "name": "batch-report", "arguments": {"seconds": 60}}, session=session, id_=41,
        traceparent=PARENT, tracestate=STATE))
    call.start()
    assert wait_until(lambda: [e for e in journal("poll") if e["traceparent"] == PARENT], timeout=15)  # ours polls
    assert post(hosted.url, {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 41}},
                **{"Mcp-Session-Id": session}).status_code == 202
    assert wait_until(lambda: [e for e in journal("cancel") if e["traceparent"] == PARENT], timeout=10), \
        "the cancel never reached the gateway"
    call.join(15)
    assert set(traced(journal())) >= {("invoke", PARENT, STATE), ("poll", PARENT, STATE), ("cancel", PARENT, STATE)}


def test_meta_wins_over_the_http_header(hosted, sandbox, journal):
    other = f"00-{'a' * 32}-{'b' * 16}-00"
    modern(hosted.url, "tools/call", {"name": "echo", "arguments": {"text": "a"}, "_meta": {"traceparent": PARENT}},
           traceparent=other)
    assert [e["traceparent"] for e in journal("invoke")] == [PARENT]


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.enable(provider)
    yield exporter
    tracing.enable(None)


def test_calls_become_spans_children_of_the_callers_trace(spans, server, tenant, journal):
    client = Client(server, tenant)
    answer = client.call("cold-summarizer", {"text": "a long text"}, modern=True, traceparent=PARENT, tracestate=STATE)
    assert not answer["result"].get("isError"), answer
    finished = spans.get_finished_spans()
    (call,) = [s for s in finished if s.kind == SpanKind.SERVER]
    assert call.name == "tools/call cold-summarizer"
    assert format(call.context.trace_id, "032x") == TRACE_ID
    assert format(call.parent.span_id, "016x") == "00f067aa0ba902b7" and call.parent.is_remote
    assert call.attributes["mcp.method.name"] == "tools/call" and call.attributes["gen_ai.tool.name"] == "cold-summarizer"
    upstream = [s for s in finished if s.kind == SpanKind.CLIENT]
    assert {s.name for s in upstream} >= {"POST invoke", "GET poll"}
    assert all(s.parent.span_id == call.context.span_id and s.context.trace_id == call.context.trace_id
               for s in upstream)
    sent = {e["traceparent"].split("-")[2] for e in journal() if e["route"] in ("invoke", "poll")}
    assert sent == {format(s.context.span_id, "016x") for s in upstream  # the gateway's parent: our client span
                    if s.name in ("POST invoke", "GET poll")}
    assert all(e["tracestate"] == STATE for e in journal("invoke"))


def test_a_failed_request_is_a_span_with_an_error_status(spans, server, tenant):
    client = Client(server, tenant)
    client.modern("tools/call", {"name": "no-such-tool", "arguments": {}}, traceparent=PARENT)
    (span,) = [s for s in spans.get_finished_spans() if s.kind == SpanKind.SERVER]
    assert span.status.status_code == StatusCode.ERROR and span.attributes["error.type"]


class Collector(BaseHTTPRequestHandler):
    """An OTLP/HTTP receiver: keeps what is posted to /v1/traces."""

    received: list = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        self.received.append((self.path, self.headers.get("Content-Type"), body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_args):
        pass


def test_stdio_exports_spans_over_otlp_when_an_endpoint_is_set(sandbox):
    collector = ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=collector.serve_forever, daemon=True).start()
    try:
        peer = StdioPeer([sys.executable, "-m", "colabhive_mcp", "stdio", "--api-url", sandbox.url],
                         env=server_env(COLABHIVE_API_KEY=DEMO_KEY, OTEL_BSP_SCHEDULE_DELAY="50",
                                        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{collector.server_port}"))
        peer.initialize()
        answer = peer.request("tools/call", {"name": "echo", "arguments": {"text": "hi"},
                                             "_meta": {"traceparent": PARENT}})
        assert not answer["result"].get("isError"), answer
        assert peer.close() == 0
        exported = [body for path, kind, body in Collector.received
                    if path == "/v1/traces" and kind == "application/x-protobuf"]
        assert any(bytes.fromhex(TRACE_ID) in body and b"tools/call echo" in body for body in exported)
    finally:
        collector.shutdown()


def test_without_the_extra_or_an_endpoint_nothing_changes(monkeypatch):
    assert tracing.configure({}) is False
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)
    assert tracing.configure({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}) is False
    with tracing.span("tools/call x", {}, {"traceparent": PARENT}):
        assert tracing.headers() == {"traceparent": PARENT}  # forwarded as it came, no span of ours
    assert tracing.headers() == {}
