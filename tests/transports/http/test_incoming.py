"""The HTTP transport's request: what it reads of the WSGI environ agrees with Werkzeug's Request."""

import io

import pytest
from werkzeug.exceptions import RequestEntityTooLarge
from werkzeug.test import EnvironBuilder
from werkzeug.wrappers import Request as WerkzeugRequest

from colabhive_mcp.transports.http.incoming import HttpRequest
from colabhive_mcp.transports.http.wire import body, client_address

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
