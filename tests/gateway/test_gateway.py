"""The gateway client's edge cases, against `responses` (the sandbox covers the happy paths)."""

import gzip
import json
import threading
import time
import uuid

import pytest
import requests
import responses
from responses import matchers

from colabhive_mcp.encoding import too_deep
from colabhive_mcp.gateway.client import Gateway, GatewayError
from colabhive_mcp.invocation import Invocation
from colabhive_mcp.keys import ApiKey, KeyRejected
from colabhive_mcp.sandbox import DEMO_KEY

BASE = "https://gw.test/api/builder/v1"
KEY = "hive_unit_test_key"


@pytest.fixture
def gateway():
    return Gateway(BASE, ApiKey.of(KEY), account_id="acct_1", timeout=5, retries=2, backoff=0.001)


def invocation(status="succeeded", **extra):
    return {"invocation_id": "inv_1", "action_slug": "echo", "status": status, **extra}


@responses.activate
def test_requests_carry_auth_agent_and_account(gateway):
    responses.get(BASE + "/mcp/manifest", json={"tools": [], "nextCursor": None}, match=[
        matchers.header_matcher({"X-API-Key": KEY, "X-Account-ID": "acct_1", "Accept-Encoding": "gzip"})])
    gateway.fetch_manifest()
    assert responses.calls[0].request.headers["User-Agent"].startswith("colabhive-mcp/")


def named(entry):
    """A ``prepare`` for fetch_manifest, run on each entry while the next page is on its way: its key, and
    the entry to keep instead of the one read."""
    return entry["name"].upper(), {**entry, "kept": True}


PREPARE = pytest.mark.parametrize("prepare", [None, named])  # without per-entry work, and with it (done while the next page comes)


@PREPARE
@responses.activate
def test_manifest_reads_every_page_and_keeps_the_etag(gateway, prepare):
    responses.get(BASE + "/mcp/manifest", match=[matchers.query_param_matcher({})],
                  json={"tools": [{"name": "a"}], "nextCursor": "p2"}, headers={"ETag": '"v1"'})
    responses.get(BASE + "/mcp/manifest", match=[matchers.query_param_matcher({"cursor": "p2"})],
                  json={"tools": [{"name": "b"}, {"nameless": True}], "nextCursor": "p3"}, headers={"ETag": '"v1"'})
    responses.get(BASE + "/mcp/manifest", match=[matchers.query_param_matcher({"cursor": "p3"})],
                  json={"tools": [{"name": "c"}], "nextCursor": None}, headers={"ETag": '"v1"'})
    document = gateway.fetch_manifest(prepare=prepare)
    assert [e["name"] for e in document.entries] == ["a", "b", "c"]
    assert [key for key, _ in document.prepared] == (["A", "B", "C"] if prepare else [])
    assert all(e.get("kept") for e in document.entries) == bool(prepare)  # the entries prepare keeps
    assert document.etag == '"v1"' and document.size > 0


@pytest.mark.parametrize("status,error", [(401, KeyRejected), (500, GatewayError)])
@responses.activate
def test_a_page_read_ahead_that_fails_fails_the_fetch_as_it_would_have(gateway, status, error):
    responses.get(BASE + "/mcp/manifest", match=[matchers.query_param_matcher({})],
                  json={"tools": [{"name": "a"}], "nextCursor": "p2"}, headers={"ETag": '"v1"'})
    responses.get(BASE + "/mcp/manifest", match=[matchers.query_param_matcher({"cursor": "p2"})], status=status,
                  json={"detail": "no"})
    with pytest.raises(error, match="no"):
        gateway.fetch_manifest(prepare=named)
    assert (gateway.rejection is not None) == (status == 401)


@pytest.mark.parametrize("status", [400, 401, 403])
@responses.activate
def test_a_cursor_misread_from_a_page_body_is_dropped_and_the_pages_read_as_they_are(gateway, status):
    """The next page is asked for as soon as the body before shows a cursor: its last ``"nextCursor"``, which
    is an entry's when the page's own comes first. The parse tells; the wrong page is never read, and
    what the gateway said of it (even a refusal of the key) counts for nothing."""
    page = ('{"nextCursor": "p2", "tools": [{"name": "a", "inputSchema": {"examples": [{"nextCursor": "x"}]}}]}')
    responses.get(BASE + "/mcp/manifest", match=[matchers.query_param_matcher({})], body=page,
                  content_type="application/json")
    responses.get(BASE + "/mcp/manifest", match=[matchers.query_param_matcher({"cursor": "x"})], status=status,
                  json={"detail": "no such cursor"})
    responses.get(BASE + "/mcp/manifest", match=[matchers.query_param_matcher({"cursor": "p2"})],
                  json={"tools": [{"name": "b"}], "nextCursor": None})
    assert [e["name"] for e in gateway.fetch_manifest(prepare=named).entries] == ["a", "b"]
    assert gateway.rejection is None


@responses.activate
def test_a_cursor_that_is_not_text_is_sent_as_the_gateway_wrote_it(gateway):
    """No cursor is read ahead from the body when it is not a string: the page after is asked once parsed."""
    responses.get(BASE + "/mcp/manifest", match=[matchers.query_param_matcher({})],
                  json={"tools": [{"name": "a"}], "nextCursor": 2})
    responses.get(BASE + "/mcp/manifest", match=[matchers.query_param_matcher({"cursor": "2"})],
                  json={"tools": [{"name": "b"}], "nextCursor": None})
    assert [e["name"] for e in gateway.fetch_manifest(prepare=named).entries] == ["a", "b"]


@PREPARE
@responses.activate
def test_a_manifest_that_changes_once_between_pages_is_read_again_whole(gateway, prepare):
    """A new ETag on the second page: the pages are read again from the first, and the new manifest is
    all that is kept (no page of the old one with it)."""
    first = BASE + "/mcp/manifest"
    responses.get(first, match=[matchers.query_param_matcher({})],
                  json={"tools": [{"name": "old-a"}], "nextCursor": "p2"}, headers={"ETag": '"v1"'})
    responses.get(first, match=[matchers.query_param_matcher({})],
                  json={"tools": [{"name": "new-a"}], "nextCursor": "p2"}, headers={"ETag": '"v2"'})
    responses.get(first, match=[matchers.query_param_matcher({"cursor": "p2"})],
                  json={"tools": [{"name": "new-b"}], "nextCursor": None}, headers={"ETag": '"v2"'})
    document = gateway.fetch_manifest(prepare=prepare)
    assert [e["name"] for e in document.entries] == ["new-a", "new-b"] and document.etag == '"v2"'
    if prepare is not None:
        assert [kept["name"] for _, kept in document.prepared] == ["new-a", "new-b"]


@responses.activate
def test_manifest_304_means_unchanged_and_sends_if_none_match(gateway):
    responses.get(BASE + "/mcp/manifest", status=304, match=[matchers.header_matcher({"If-None-Match": '"v1"'})])
    assert gateway.fetch_manifest('"v1"') is None


@responses.activate
def test_work_to_do_meanwhile_is_done_while_the_first_answer_is_on_its_way(gateway):
    """(A stdio start prepares the manifest it saved while the gateway is asked whether it is current.)
    The work waits for the request to arrive, and the answer for the work: one after the other, either
    would wait in vain."""
    arrived, done, in_time = threading.Event(), threading.Event(), []

    def not_modified(request):
        arrived.set()
        in_time.append(done.wait(5))
        return 304, {}, ""

    def meanwhile():
        in_time.append(arrived.wait(5))
        done.set()

    responses.add_callback(responses.GET, BASE + "/mcp/manifest", callback=not_modified)
    assert gateway.fetch_manifest('"v1"', meanwhile=meanwhile) is None
    assert in_time == [True, True]


@responses.activate
def test_work_to_do_meanwhile_that_fails_leaves_the_answer_as_it_is(gateway):
    responses.get(BASE + "/mcp/manifest", status=401, json={"detail": "revoked"})

    def meanwhile():
        raise ValueError("a saved entry this version cannot make")

    with pytest.raises(KeyRejected):
        gateway.fetch_manifest('"v1"', meanwhile=meanwhile)
    assert gateway.rejection is not None  # the refusal is kept, as without the work


@responses.activate
def test_a_refusal_of_the_key_lasts_until_a_request_sent_after_it_is_answered(gateway):
    """The gateway refused the key, then accepts it again: a later answer clears the refusal, but not
    the answer to a request sent before the refusal came (a slow poll, a page asked ahead), which
    is older news."""
    sent, release = threading.Event(), threading.Event()

    def slow_poll(request):
        sent.set()
        release.wait(10)
        return 200, {}, json.dumps(invocation("running"))

    responses.add_callback(responses.GET, BASE + "/invocations/inv_1", callback=slow_poll)
    responses.post(BASE + "/actions/chat:invoke", status=401, json={"detail": "revoked"})
    older = threading.Thread(target=gateway.get_invocation, args=("inv_1",))
    older.start()
    assert sent.wait(5)
    with pytest.raises(KeyRejected):
        gateway.invoke("chat", {})
    release.set()
    older.join(10)
    assert gateway.rejection is not None  # the poll was sent before the refusal
    responses.get(BASE + "/invocations/inv_2", json=invocation("running"))
    gateway.get_invocation("inv_2")
    assert gateway.rejection is None  # asked after it: the key is accepted again


@responses.activate
def test_manifest_gzip_body_is_decoded(gateway):
    body = gzip.compress(json.dumps({"tools": [{"name": "z"}], "nextCursor": None}).encode())
    responses.get(BASE + "/mcp/manifest", body=body, headers={"Content-Encoding": "gzip", "ETag": '"g"'},
                  content_type="application/json")
    assert [e["name"] for e in gateway.fetch_manifest().entries] == ["z"]


@PREPARE
@responses.activate
def test_manifest_that_changes_between_pages_is_read_again(gateway, prepare):
    """Each time its first page is read, the manifest has changed again by its second page."""
    first = BASE + "/mcp/manifest"
    for version in (1, 2):
        responses.get(first, match=[matchers.query_param_matcher({})],
                      json={"tools": [{"name": "a"}], "nextCursor": "p2"}, headers={"ETag": f'"v{version}"'})
        responses.get(first, match=[matchers.query_param_matcher({"cursor": "p2"})],
                      json={"tools": [{"name": "b"}], "nextCursor": None}, headers={"ETag": f'"v{version + 1}"'})
    with pytest.raises(GatewayError, match="kept changing"):
        gateway.fetch_manifest(prepare=prepare)
    assert len([c for c in responses.calls if "cursor" not in c.request.url]) == 2


def etag_paged(etags):
    """A two-page manifest whose pages carry ``etags``, with a registry of the requests each page got."""
    return {cursor: responses.get(BASE + "/mcp/manifest", match=[matchers.query_param_matcher(query)],
                                  json={"tools": [{"name": name}], "nextCursor": following},
                                  headers={"ETag": etag})
            for (cursor, query, name, following), etag in zip(
                [(None, {}, "a", "p2"), ("p2", {"cursor": "p2"}, "b", None)], etags)}


@PREPARE
@responses.activate
def test_pages_each_with_an_etag_of_its_own_are_read_whole_every_time_without_revalidation(gateway, prepare):
    """The contract: a paginated manifest is revalidated by its first page only if the gateway gives
    one ETag for the whole manifest; otherwise all pages are fetched again."""
    pages = etag_paged(['"p1-v1"', '"p2-v1"'])
    document = gateway.fetch_manifest(prepare=prepare)
    assert [e["name"] for e in document.entries] == ["a", "b"] and document.etag is None  # nothing to revalidate
    assert pages[None].call_count == 2 and gateway.etag_per_page  # read again once: it had not changed
    again = gateway.fetch_manifest(prepare=prepare)
    assert [e["name"] for e in again.entries] == ["a", "b"] and again.etag is None
    assert pages[None].call_count == 3 and pages["p2"].call_count == 3  # from then on, once a fetch
    assert not any("If-None-Match" in c.request.headers for c in responses.calls)


@responses.activate
def test_pages_that_disagree_once_then_agree_are_one_manifest_and_keep_being_checked(gateway):
    """A second page a lagging cache answered: read again, the pages agree; the gateway is not taken
    for one with an ETag per page, so a later change mid-way is still caught."""
    first = BASE + "/mcp/manifest"
    for second_etag in ('"v0"', '"v1"'):
        responses.get(first, match=[matchers.query_param_matcher({})],
                      json={"tools": [{"name": "a"}], "nextCursor": "p2"}, headers={"ETag": '"v1"'})
        responses.get(first, match=[matchers.query_param_matcher({"cursor": "p2"})],
                      json={"tools": [{"name": "b"}], "nextCursor": None}, headers={"ETag": second_etag})
    document = gateway.fetch_manifest()
    assert document.etag == '"v1"' and [e["name"] for e in document.entries] == ["a", "b"]
    assert not gateway.etag_per_page


@responses.activate
def test_a_weak_and_a_strong_form_of_one_etag_are_one_version(gateway):
    """A proxy that gzips a page marks its ETag weak: the pages still share one version."""
    pages = etag_paged(['W/"v1"', '"v1"'])
    document = gateway.fetch_manifest()
    assert [e["name"] for e in document.entries] == ["a", "b"] and document.etag == 'W/"v1"'
    assert pages[None].call_count == 1 and not gateway.etag_per_page


@responses.activate
def test_manifest_with_a_looping_cursor_or_a_wrong_shape_fails_clearly(gateway):
    responses.get(BASE + "/mcp/manifest", json={"tools": [], "nextCursor": "same"})
    with pytest.raises(GatewayError, match="cursors loop"):
        gateway.fetch_manifest()
    responses.replace(responses.GET, BASE + "/mcp/manifest", json=["not", "an", "object"])
    with pytest.raises(GatewayError, match="'tools' list"):
        gateway.fetch_manifest()
    responses.replace(responses.GET, BASE + "/mcp/manifest", body="<html>oops</html>")
    with pytest.raises(GatewayError, match="not JSON"):
        gateway.fetch_manifest()


@pytest.mark.parametrize("body,expected", [
    ({"detail": "no such thing"}, "409 no such thing"),
    ({"detail": {"message": "bad thing", "code": "x1"}}, "409 bad thing"),
    ({"error": {"code": "auth", "message": "denied"}}, "409 denied"),
    ("plain text, not JSON", "409 Conflict"),
])
@responses.activate
def test_every_error_body_shape_becomes_one_message(gateway, body, expected):
    kwargs = {"json": body} if isinstance(body, dict) else {"body": body}
    responses.get(BASE + "/invocations/inv_1", status=409, **kwargs)
    with pytest.raises(GatewayError) as caught:
        gateway.get_invocation("inv_1")
    assert caught.value.message == expected and caught.value.status == 409


@pytest.mark.parametrize("route,status,rejected", [
    ("poll", 401, True), ("invoke", 401, True), ("manifest", 401, True), ("manifest", 403, True),
    ("invoke", 403, False), ("poll", 403, False)])
@responses.activate
def test_a_refused_key_is_key_rejected_not_a_gateway_error(gateway, route, status, rejected):
    """401 anywhere, or 403 on the manifest, is the key itself; a 403 on one action is that action's."""
    urls = {"poll": (responses.GET, "/invocations/inv_1"), "invoke": (responses.POST, "/actions/echo:invoke"),
            "manifest": (responses.GET, "/mcp/manifest")}
    method, path = urls[route]
    responses.add(method, BASE + path, status=status, json={"detail": "no such key"})
    call = {"poll": lambda: gateway.get_invocation("inv_1"), "invoke": lambda: gateway.invoke("echo", {}),
            "manifest": gateway.fetch_manifest}[route]
    with pytest.raises(KeyRejected if rejected else GatewayError) as caught:
        call()
    assert not isinstance(caught.value, GatewayError) if rejected else caught.value.status == status
    assert (gateway.rejection is caught.value) if rejected else gateway.rejection is None
    assert len(responses.calls) == 1  # never retried


@responses.activate
def test_retry_after_is_kept_in_seconds_or_http_date(gateway):
    responses.get(BASE + "/invocations/inv_1", status=429, json={"detail": "slow down"}, headers={"Retry-After": "7"})
    with pytest.raises(GatewayError) as caught:
        gateway.get_invocation("inv_1")
    assert caught.value.retry_after == 7.0 and caught.value.transient
    responses.replace(responses.GET, BASE + "/invocations/inv_1", status=429,
                      headers={"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"})
    with pytest.raises(GatewayError) as caught:
        gateway.get_invocation("inv_1")
    assert caught.value.retry_after == 0.0


@responses.activate
def test_a_503_is_retried_no_sooner_than_its_retry_after_and_a_long_one_is_the_callers(gateway):
    """The contract: 429 and 503 may carry Retry-After (seconds), and it is honoured."""
    url, sent = BASE + "/actions/echo:invoke", []

    def busy_then_done(request):
        sent.append(time.monotonic())
        return (503, {"Retry-After": "0.3"}, "{}") if len(sent) == 1 else (200, {}, json.dumps(invocation()))

    responses.add_callback(responses.POST, url, callback=busy_then_done)
    assert gateway.invoke("echo", {}).status == "succeeded"
    assert len(sent) == 2 and sent[1] - sent[0] >= 0.3  # the backoff alone would have waited 1 ms
    responses.replace(responses.POST, url, status=503, headers={"Retry-After": "60"}, json={"detail": "busy"})
    with pytest.raises(GatewayError) as caught:
        gateway.invoke("echo", {})
    assert caught.value.retry_after == 60.0 and len(responses.calls) == 3  # asked once: a minute is not a retry's


@responses.activate
def test_the_backoff_alone_is_never_cut_short_by_the_retry_after_bound(monkeypatch):
    """``retries`` up to 10: a backoff past 5 s still retries (the bound is on what a gateway asks)."""
    slept = []
    monkeypatch.setattr("colabhive_mcp.gateway.client.time.sleep", slept.append)
    patient = Gateway(BASE, ApiKey.of(KEY), retries=8, backoff=0.2)
    url = BASE + "/invocations/inv_1"
    for _ in range(8):
        responses.get(url, status=503)
    responses.get(url, json=invocation("running"))
    assert patient.get_invocation("inv_1")[0].status == "running"
    assert slept == [0.2 * 2 ** n for n in range(8)]  # 0.2 s to 25.6 s


@responses.activate
def test_a_poll_told_to_come_back_later_is_left_to_its_caller(gateway):
    """A poller waits out a Retry-After itself (and can be cancelled meanwhile): its request does not."""
    url = BASE + "/invocations/inv_1"
    responses.get(url, status=503, headers={"Retry-After": "0.5"}, json={"detail": "busy"})
    with pytest.raises(GatewayError) as caught:
        gateway.get_invocation("inv_1", polled=True)
    assert caught.value.retry_after == 0.5 and caught.value.throttled and len(responses.calls) == 1


@responses.activate
def test_gets_are_retried_on_503_and_connection_errors(gateway):
    url = BASE + "/invocations/inv_1"
    responses.get(url, status=503)
    responses.get(url, body=requests.ConnectionError("reset by peer"))
    responses.get(url, json=invocation("running"), headers={"Retry-After": "2"})
    inv, retry_after = gateway.get_invocation("inv_1")
    assert inv.status == "running" and retry_after == 2.0
    assert len(responses.calls) == 3


@responses.activate
def test_retries_give_up_after_the_configured_count(gateway):
    responses.get(BASE + "/invocations/inv_1", status=502)
    with pytest.raises(GatewayError) as caught:
        gateway.get_invocation("inv_1")
    assert caught.value.status == 502 and len(responses.calls) == 3


@responses.activate
def test_client_errors_are_not_retried(gateway):
    responses.post(BASE + "/actions/echo:invoke", status=422, json={"detail": {"message": "text is required"}})
    with pytest.raises(GatewayError, match="422 text is required"):
        gateway.invoke("echo", {})
    assert len(responses.calls) == 1


@responses.activate
def test_invoke_retry_reuses_the_idempotency_key(gateway):
    url = BASE + "/actions/echo:invoke"
    responses.post(url, body=requests.ConnectionError("dropped"))
    responses.post(url, json=invocation(result="hi"), match=[
        matchers.json_params_matcher({"input": {"text": "hi"}, "sync": True, "sync_timeout_s": 2})])
    result = gateway.invoke("echo", {"text": "hi"}, sync_timeout_s=2, idempotency_key="idem-1")
    assert result.result == "hi"
    keys = [c.request.headers["Idempotency-Key"] for c in responses.calls]
    assert keys == ["idem-1", "idem-1"]


@responses.activate
def test_invoke_without_a_key_generates_one(gateway):
    responses.post(BASE + "/actions/echo:invoke", json=invocation())
    gateway.invoke("echo", {})
    gateway.invoke("echo", {})
    first, second = (uuid.UUID(c.request.headers["Idempotency-Key"]) for c in responses.calls)
    assert first.version == second.version == 4 and first != second  # one key per call


@responses.activate
def test_slugs_and_ids_cannot_leave_their_path_segment(gateway):
    responses.post(BASE + "/actions/a%2F..%2F..%2Fadmin%3Fx%3D1:invoke", json=invocation())
    responses.get(BASE + "/invocations/..%2F..%2Fevil.example%2Fx", json=invocation())
    gateway.invoke("a/../../admin?x=1", {})
    gateway.get_invocation("../../evil.example/x")
    assert all(c.request.url.startswith(BASE + "/") for c in responses.calls)


@responses.activate
def test_a_poll_url_or_a_redirect_never_takes_the_key_to_another_host(gateway):
    responses.post(BASE + "/actions/echo:invoke", status=202,
                   json=invocation("queued", poll_url="https://evil.example/steal"))
    responses.get(BASE + "/invocations/inv_1", status=302, headers={"Location": "https://evil.example/steal"})
    responses.get("https://evil.example/steal", json=invocation())
    gateway.invoke("echo", {})
    with pytest.raises(GatewayError, match="302"):
        gateway.get_invocation("inv_1")
    assert [c.request.url for c in responses.calls] == [BASE + "/actions/echo:invoke", BASE + "/invocations/inv_1"]


@responses.activate
def test_cancel_without_a_route_is_none(gateway):
    responses.post(BASE + "/invocations/inv_1:cancel", status=405)
    assert gateway.cancel("inv_1") is None
    responses.replace(responses.POST, BASE + "/invocations/inv_1:cancel", json=invocation("cancelled"))
    assert gateway.cancel("inv_1").status == "cancelled"


@pytest.mark.parametrize("body,problem,named", [
    ({"hello": "world"}, "no 'status'", None),
    (["not", "an", "object"], "no 'status'", None),
    ({"status": "running", "invocation_id": 7}, "no 'invocation_id'", None),
])
@responses.activate
def test_an_answer_that_is_not_an_invocation_is_an_error(gateway, body, problem, named):
    responses.get(BASE + "/invocations/inv_1", json=body)
    with pytest.raises(GatewayError) as caught:
        gateway.get_invocation("inv_1")
    assert caught.value.message == f"the gateway's answer is not an invocation ({problem})"
    assert caught.value.garbled and caught.value.invocation_id == named


@responses.activate
def test_an_invocation_keeps_the_contract_s_fields_and_drops_what_it_cannot_read(gateway):
    responses.get(BASE + "/invocations/inv_1", json=invocation(
        "running", status_detail=3, model_state="cold", progress={"progress": 6, "total": 4, "message": "step 4 of 4"},
        error=["odd"], updated_at="2026-01-01T00:00:00Z", metrics={"ms": 1}, poll_url="/elsewhere", future="x"))
    assert gateway.get_invocation("inv_1")[0] == Invocation(
        "inv_1", "running", slug="echo", model_state="cold", fraction=1.0, step="step 4 of 4",
        updated_at="2026-01-01T00:00:00Z")


@responses.activate
def test_a_truncated_body_is_retried_then_reported(gateway):
    responses.get(BASE + "/invocations/inv_1", body=requests.exceptions.ChunkedEncodingError("truncated"))
    with pytest.raises(GatewayError, match="cut short or corrupt: truncated") as caught:
        gateway.get_invocation("inv_1")
    assert caught.value.status is None and len(responses.calls) == 3


@responses.activate
def test_a_timeout_is_reported_not_retried(gateway):
    responses.get(BASE + "/invocations/inv_1", body=requests.ReadTimeout("slow"))
    with pytest.raises(GatewayError, match="did not answer within 5 s"):
        gateway.get_invocation("inv_1")
    assert len(responses.calls) == 1


def test_only_the_configured_proxy_is_used_never_the_environments(gateway_sandbox, monkeypatch):
    """The key goes to the gateway, or through the proxy an operator named; never to whatever proxy
    the environment happens to name (the sandbox plays the proxy)."""
    from colabhive_mcp.sandbox import API_PREFIX, DEMO_KEY

    behind_proxy = "http://gateway.invalid" + API_PREFIX
    assert Gateway(behind_proxy, ApiKey.of(DEMO_KEY), retries=0, proxy=gateway_sandbox.root_url).fetch_manifest().entries
    monkeypatch.setenv("HTTP_PROXY", gateway_sandbox.root_url)
    monkeypatch.setenv("HTTPS_PROXY", gateway_sandbox.root_url)
    monkeypatch.delenv("NO_PROXY", raising=False)
    with pytest.raises(GatewayError, match="cannot reach"):
        Gateway(behind_proxy, ApiKey.of(DEMO_KEY), retries=0).fetch_manifest()


class Bomb:
    """A real HTTP server answering every GET with one gzip body that decodes to ``decoded`` bytes."""

    def __init__(self, decoded):
        import http.server
        import threading

        compressed = gzip.compress(b'{"tools": [], "pad": "' + b" " * decoded + b'"}', compresslevel=9)
        self.wire_bytes = len(compressed)

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Encoding", "gzip")
                self.send_header("Content-Length", str(len(compressed)))
                self.end_headers()
                self.wfile.write(compressed)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.mark.slow
def test_a_gzip_bomb_is_a_clear_error_not_gigabytes_in_memory():
    import tracemalloc

    bomb = Bomb(decoded=200 << 20)
    try:
        assert bomb.wire_bytes < 300_000
        gateway = Gateway(bomb.url, ApiKey.of(KEY), retries=2, max_manifest_bytes=4 << 20)
        tracemalloc.start()
        try:
            with pytest.raises(GatewayError, match=r"larger than 4194304 bytes once decoded") as raised:
                gateway.fetch_manifest()
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 24 << 20 and not raised.value.transient  # read up to the cap, then stopped; not retried
    finally:
        bomb.close()


def test_manifests_and_results_have_their_own_caps():
    bomb = Bomb(decoded=3 << 20)
    try:
        gateway = Gateway(bomb.url, ApiKey.of(KEY), retries=0, max_manifest_bytes=1 << 20, max_result_bytes=8 << 20)
        with pytest.raises(GatewayError, match="larger than"):
            gateway.fetch_manifest()
        with pytest.raises(GatewayError, match="not an invocation"):  # read whole (3 MB < 8 MB), then judged
            gateway.get_invocation("inv_1")
    finally:
        bomb.close()


@responses.activate
def test_an_answer_nested_past_what_a_parser_should_recurse_is_refused_unparsed(gateway):
    deep = b'{"invocation_id": "inv_1", "status": "succeeded", "output": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    responses.get(BASE + "/invocations/inv_1", body=deep, content_type="application/json")
    with pytest.raises(GatewayError, match="not JSON"):
        gateway.get_invocation("inv_1")


def test_depth_is_judged_on_the_text_with_strings_skipped():
    assert not too_deep("[" * 512 + "]" * 512) and too_deep("[" * 513 + "]" * 513)
    assert too_deep('{"a":' * 1000)  # unclosed counts too: the parser would recurse before failing
    assert not too_deep('["' + "[" * 1000 + '"]') and not too_deep('["\\"' + "{" * 1000 + '"]')
    assert too_deep('["\\\\"' + "[" * 1000 + "]" * 1001)  # the quote after an escaped backslash ends the string


def test_a_tenant_finds_its_connection_pool_once_and_still_works_after_its_session_closed(sandbox):
    gateway = Gateway(sandbox.url, ApiKey.of(DEMO_KEY))
    for _ in range(5):
        gateway.fetch_manifest()
    adapter = gateway.session.get_adapter(sandbox.url)
    (pool,) = adapter._pools.values()
    assert pool.num_connections == 1  # one pool, one kept-alive connection for every request
    gateway.session.close()  # its pools are dropped (and closed, by some urllib3 versions)
    assert gateway.fetch_manifest().entries
    (kept,) = adapter._pools.values()
    assert kept.pool is not None  # open: the same pool where urllib3 only dropped it, else a new one


@responses.activate
def test_a_page_read_for_one_key_is_not_parsed_again_for_another_while_it_is_held():
    import gc

    body = {"tools": [{"name": "shared"}], "nextCursor": None}
    responses.get(BASE + "/mcp/manifest", json=body, match=[matchers.header_matcher({"X-API-Key": "hive_page_one"})])
    responses.get(BASE + "/mcp/manifest", json=body, match=[matchers.header_matcher({"X-API-Key": "hive_page_two"})])
    responses.get(BASE + "/mcp/manifest", json={**body, "tools": [{"name": "own"}]},
                  match=[matchers.header_matcher({"X-API-Key": "hive_page_own"})])
    one, two, own = (Gateway(BASE, ApiKey.of(k), retries=0) for k in ("hive_page_one", "hive_page_two", "hive_page_own"))
    first = one.fetch_manifest(prepare=named)
    assert two.fetch_manifest(prepare=named).entries[0] is first.entries[0]  # the same bytes: read once
    assert [e["name"] for e in own.fetch_manifest(prepare=named).entries] == ["own"]  # other bytes: read anew
    entry = first.entries[0]
    del first
    gc.collect()
    assert two.fetch_manifest().entries[0] is not entry  # nothing held it: read again, nothing kept


def test_a_tenants_connection_pool_is_shared_only_once_it_is_whole(monkeypatch):
    """Many first requests of a new key at once: none may take the pool before its key header is
    set (a thread that found it half-made sent a request without X-API-Key: the gateway's 401)."""
    from colabhive_mcp.gateway import adapter

    building, finish = threading.Event(), threading.Event()

    class SlowAdapter(adapter.OriginAdapter):
        def __init__(self, *args, **kwargs):
            building.set()
            finish.wait(10)  # the first thread stays inside the pool's making
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(adapter, "OriginAdapter", SlowAdapter)
    gateway = Gateway("http://127.0.0.1:9", ApiKey.of("hive_pool_race_0001"))
    first = threading.Thread(target=lambda: gateway.session)
    first.start()
    assert building.wait(10)
    seen = []
    second = threading.Thread(target=lambda: seen.append(gateway.session.headers.get("X-API-Key")))
    second.start()
    second.join(0.5)  # it waits for the pool (it would have taken the half-made one at once)
    finish.set()
    first.join(10)
    second.join(10)
    assert seen == ["hive_pool_race_0001"]
