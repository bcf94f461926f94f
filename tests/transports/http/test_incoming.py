"""The HTTP transport's request: what it reads of the WSGI environ agrees with Werkzeug's Request."""

import io

import pytest
from werkzeug.exceptions import RequestEntityTooLarge
from werkzeug.test import EnvironBuilder
from werkzeug.wrappers import Request as WerkzeugRequest

from colabhive_mcp.keys import ApiKey
from colabhive_mcp.protocol.jsonrpc import JsonRpcError
from colabhive_mcp.transports.http.incoming import (Credential, HttpRequest, body, client_address, read_oauth_request,
                                                    read_session_message, read_session_request)
from colabhive_mcp.transports.http.outgoing import HttpError

CASES = [
    {"path": "/mcp", "method": "POST", "headers": {"Content-Type": "application/json; charset=utf-8",
                                                    "Authorization": "Bearer hive_x", "Mcp-Session-Id": "s1",
                                                    "X-ColabHive-Tools": "a*,b"}, "data": b'{"a":1}'},
    {"path": "/messages", "query_string": "session_id=abc&session_id=def&tools=x%2Cy", "method": "POST",
     "headers": {"Host": "example.com:443", "Origin": "https://example.com"}, "data": b"x" * 10},
    {"path": "/caf%C3%A9//x", "method": "GET", "headers": {"Host": "[::1]:8080", "Accept": "text/event-stream"}},
    {"path": "/mcp/", "method": "delete", "headers": {"Host": "bad host name"}},
]


@pytest.mark.parametrize("case", CASES)
def test_what_the_transport_reads_agrees_with_werkzeug(case):
    ours, theirs = HttpRequest(EnvironBuilder(**case).get_environ()), WerkzeugRequest(EnvironBuilder(**case).get_environ())
    assert (ours.method, ours.path, ours.host, ours.remote_addr) == (theirs.method, theirs.path, theirs.host,
                                                                     theirs.remote_addr)
    assert (ours.mimetype, ours.content_length) == (theirs.mimetype, theirs.content_length)
    assert ours.args.to_dict(flat=False) == theirs.args.to_dict(flat=False)
    for name in ("Content-Type", "Authorization", "Mcp-Session-Id", "X-ColabHive-Tools", "Origin", "Accept",
                 "traceparent", "Content-Length", "Host"):
        assert ours.headers.get(name) == theirs.headers.get(name), name
        assert (name in ours.headers) == (name in theirs.headers), name
    assert ours.get_data() == theirs.get_data()


def test_a_body_longer_than_allowed_is_refused_whether_declared_or_chunked():
    declared = EnvironBuilder(method="POST", data=b"x" * 100)
    with pytest.raises(RequestEntityTooLarge):
        body(HttpRequest(declared.get_environ(), max_content_length=10))
    assert body(HttpRequest(declared.get_environ(), max_content_length=100)) == b"x" * 100
    chunked = EnvironBuilder(method="POST", headers={"Transfer-Encoding": "chunked"}).get_environ()
    chunked["wsgi.input"], chunked["wsgi.input_terminated"] = io.BytesIO(b"y" * 100), True
    with pytest.raises(RequestEntityTooLarge):  # Werkzeug stops reading at the limit; the edge says 413
        body(HttpRequest(chunked, max_content_length=10))


@pytest.mark.parametrize("peer, headers, client", [
    ("203.0.113.7", {}, "203.0.113.7"),
    ("203.0.113.7", {"X-Forwarded-For": "198.51.100.1"}, "203.0.113.7"),  # only a proxy on this machine is believed
    ("127.0.0.1", {"X-Forwarded-For": "198.51.100.1, 192.0.2.9"}, "192.0.2.9"),  # the entry nginx appended
    ("127.0.0.1", {"X-Real-IP": "192.0.2.9"}, "192.0.2.9"),
    ("127.0.0.1", {}, "127.0.0.1"),
    ("2001:db8:7:1:aaaa:bbbb:cccc:dddd", {}, "2001:db8:7:1::/64"),
    ("::1", {"X-Forwarded-For": "2001:db8:7:1::10%eth0"}, "2001:db8:7:1::/64"),  # a zone names a link
    ("::ffff:192.0.2.9", {}, "192.0.2.9"),
])
def test_a_client_is_counted_by_its_address_or_its_ipv6_64(peer, headers, client):
    environ = EnvironBuilder(headers=headers, environ_base={"REMOTE_ADDR": peer}).get_environ()
    assert client_address(HttpRequest(environ)) == client


def request(**case):
    return HttpRequest(EnvironBuilder(environ_base={"REMOTE_ADDR": "192.0.2.7"}, **case).get_environ())


def keyed(request):
    """The key a request carries, or the 401 one without it gets."""
    if "X-API-Key" not in request.headers:
        raise HttpError(401, -31401, "no key")
    return ApiKey.of(request.headers["X-API-Key"])


def credentialed(request):
    """:func:`keyed`, as the key itself (all its rights), not a grant."""
    return Credential(keyed(request))


TRACE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_a_request_about_a_session_is_read_once_and_refused_in_order():
    """A stream's Accept is judged before its key; the value holds what the handlers use, and nothing else."""
    with pytest.raises(HttpError) as refused:
        read_session_request(request(method="GET", headers={"Accept": "application/json"}), keyed, stream=True)
    assert refused.value.http_status == 406
    with pytest.raises(HttpError) as refused:
        read_session_request(request(method="GET", headers={"Accept": "text/event-stream"}), keyed, stream=True)
    assert refused.value.http_status == 401
    got = read_session_request(request(method="GET", headers={"Accept": "text/event-stream", "X-API-Key": "hive_a1",
                                                              "Mcp-Session-Id": "s1", "Last-Event-ID": "e7"}),
                               keyed, stream=True)
    assert (got.key, got.session_token, got.last_event_id) == (ApiKey.of("hive_a1"), "s1", "e7")
    assert got.address == "192.0.2.7"
    ended = read_session_request(request(method="DELETE", headers={"X-API-Key": "hive_a1"}), keyed)
    assert (ended.session_token, ended.last_event_id) == (None, None)


def test_a_message_of_the_2024_transport_is_read_once():
    """Its key, then its session id (400 without one); a body that is not JSON is kept as its error."""
    with pytest.raises(HttpError) as refused:
        read_session_message(request(path="/messages", method="POST", headers={"X-API-Key": "hive_a1"}), credentialed)
    assert refused.value.http_status == 400
    message = read_session_message(request(path="/messages", query_string="session_id=abc", method="POST",
                                           headers={"X-API-Key": "hive_a1", "traceparent": TRACE},
                                           data=b'{"jsonrpc":"2.0","id":1,"method":"ping"}'), credentialed)
    assert (message.session_id, message.frame.method, message.trace) == ("abc", "ping", {"traceparent": TRACE})
    assert message.narrow is None  # the key itself: nothing hidden
    garbled = read_session_message(request(path="/messages", query_string="session_id=abc", method="POST",
                                           headers={"X-API-Key": "hive_a1"}, data=b"{not json"), credentialed)
    assert isinstance(garbled.frame, JsonRpcError) and garbled.frame.code == -32700


def test_an_oauth_request_is_read_once():
    """The first of each parameter, the form's fields whatever the content type says (the token route
    refuses a wrong one itself), and no body for a GET."""
    page = read_oauth_request(request(path="/authorize", query_string="client_id=a&client_id=b&state=s",
                                      headers={"Origin": "https://app.example"}))
    assert (page.method, page.query, page.origin, page.body, page.form) == ("GET", {"client_id": "a", "state": "s"},
                                                                            "https://app.example", b"", {})
    token = read_oauth_request(request(path="/token", method="POST", data=b"grant_type=x&code=1&code=2",
                                       content_type="application/x-www-form-urlencoded"))
    assert token.form == {"grant_type": "x", "code": "1"} and token.content_type == "application/x-www-form-urlencoded"
    registration = read_oauth_request(request(path="/register", method="POST", data=b'{"a": 1}',
                                              content_type="application/json"))
    assert registration.body == b'{"a": 1}' and registration.content_type == "application/json"
