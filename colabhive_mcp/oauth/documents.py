"""Client ID Metadata Documents (and the key sets they name) fetched without becoming a proxy into
private networks.

The ``client_id`` of such a client is an https URL; the server fetches it to learn the client's
name and redirect URIs, and, for a client that signs its token requests, its ``jwks_uri``. The URL's host is resolved once, every address it resolves to must be
public (no loopback, private, link-local, shared or reserved range), and the connection goes to
that checked address (so a second lookup cannot rebind it), with TLS verified for the host name.
No redirects; at most :data:`MAX_BYTES`, all of it, the lookup included, within :data:`TIMEOUT_S`; a
good document is kept :data:`CACHE_S` seconds. A process fetches at most :data:`FETCHES_AT_ONCE`
documents at once (anyone may name a slow one, or a host name whose lookup takes half a minute), so
those fetches never hold more threads; past it, the answer is ``temporarily_unavailable`` at once,
and documents kept are still served. A test setting allows this machine's addresses, over plain http
too.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import ipaddress
import json
import socket
import threading
from typing import Any
from urllib.parse import SplitResult, urlsplit

import urllib3
import urllib3.connection
from cachetools import TTLCache
from urllib3.util.ssl_match_hostname import CertificateError

from .errors import OAuthError
from ..ahead import Ahead
from ..limits import BUSY_RETRY_S
from ..loopback import is_loopback

MAX_BYTES = 16 * 1024
TIMEOUT_S = 5.0
CACHE_S = 300.0
FETCHES_AT_ONCE = 8
_cache: TTLCache = TTLCache(maxsize=256, ttl=CACHE_S)
_lock = threading.Lock()
_fetching = threading.BoundedSemaphore(FETCHES_AT_ONCE)


def is_document_url(client_id: str) -> bool:
    """Whether a ``client_id`` names a metadata document (an http(s) URL), rather than a registration."""
    return client_id.startswith(("https://", "http://"))


def fetch(url: str, *, loopback: bool = False, fresh: bool = False) -> dict[str, Any]:
    """The JSON object at ``url`` (cached briefly, unless ``fresh`` is asked for); raises
    :class:`OAuthError` ``invalid_client`` saying why it cannot be had. ``loopback``: this machine's
    addresses are allowed (tests)."""
    with _lock:
        found = None if fresh else _cache.get(url)
    if found is not None:
        return found
    parts, port = check_url(url, loopback)
    places = _fetching
    if not places.acquire(blocking=False):
        raise _busy()
    try:  # on a thread of its own, which holds the place until the fetch ends: a lookup cannot be cut short
        fetching = Ahead(functools.partial(_fetch_in_place, places, parts, port, loopback), "oauth-document")
    except RuntimeError:  # no thread to be had
        places.release()
        raise _busy() from None
    if not fetching.wait(TIMEOUT_S):
        raise _refused("was too slow to arrive")
    document = fetching.result()
    with _lock:
        _cache[url] = document
    return document


def _fetch_in_place(places: threading.BoundedSemaphore, parts: SplitResult, port: int,
                    loopback: bool) -> dict[str, Any]:
    """The document, fetched while this thread holds one of the ``places`` (given back when the fetch
    ends, however late a lookup answers)."""
    try:
        return _get(parts, _public_address(parts.hostname or "", port, loopback), port)
    finally:
        places.release()


def _busy() -> OAuthError:
    return OAuthError("temporarily_unavailable", "This server is fetching many client metadata documents right now; "
                      "try again shortly.", 503, int(BUSY_RETRY_S))


def _refused(why: str) -> OAuthError:
    return OAuthError("invalid_client", f"The client's metadata document {why}.",
                      plain="This server could not read the application's description, so it cannot connect.")


def check_url(url: str, loopback: bool) -> tuple[SplitResult, int]:
    """The URL's parts and its port, once it is one a document may be fetched from; raises
    ``invalid_client`` saying why not."""
    parts = urlsplit(url)
    if parts.scheme != "https" and not (loopback and parts.scheme == "http" and is_loopback(parts.hostname)):
        raise _refused("must be at an https URL")
    if not parts.hostname or parts.username or parts.password or parts.fragment or parts.path in ("", "/"):
        raise _refused("URL must name a host and a path, with no user or fragment")
    try:
        return parts, parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:  # urlsplit checks a port only when it is asked for it
        raise _refused("URL has an invalid port") from None


def _public_address(host: str, port: int, loopback: bool) -> str:
    """The address to connect to: every one the host resolves to must be allowed."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        raise _refused(f"host {host!r} does not resolve") from None
    addresses = [str(info[4][0]) for info in infos]
    for address in addresses:
        ip = ipaddress.ip_address(address.partition("%")[0])
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        if not (ip.is_global or (loopback and ip.is_loopback)):
            raise _refused(f"host {host!r} is at a private or reserved address")
    return addresses[0]


def _get(parts: SplitResult, address: str, port: int) -> dict[str, Any]:
    """The JSON object at the checked ``address``, all of it within :data:`TIMEOUT_S` however slowly
    the server sends: a timer cuts the connection at the deadline, wherever the exchange is."""
    connection = _connection(parts, address, port)
    expired = threading.Event()
    cutoff = threading.Timer(TIMEOUT_S, _cut, (connection, expired))
    cutoff.daemon = True
    cutoff.start()
    try:
        data = _body(connection, parts, expired)
    except (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError, CertificateError) as exc:
        # the socket's own timeout is the same limit as the timer's cut, and may come first on a busy machine
        slow = expired.is_set() or isinstance(exc, (TimeoutError, urllib3.exceptions.TimeoutError))
        raise _refused("was too slow to arrive" if slow else f"could not be fetched ({type(exc).__name__})") from None
    finally:
        cutoff.cancel()
        connection.close()
    if expired.is_set():
        raise _refused("was too slow to arrive")
    try:
        document = json.loads(data)
    except ValueError:
        raise _refused("is not JSON") from None
    if not isinstance(document, dict):
        raise _refused("is not a JSON object")
    return document


def _connection(parts: SplitResult, address: str, port: int) -> urllib3.connection.HTTPConnection:
    """A connection to ``address``, TLS verified for the URL's host name."""
    if parts.scheme == "https":
        return urllib3.connection.HTTPSConnection(address, port, timeout=TIMEOUT_S, cert_reqs="CERT_REQUIRED",
                                                  server_hostname=parts.hostname, assert_hostname=parts.hostname)
    return urllib3.connection.HTTPConnection(address, port, timeout=TIMEOUT_S)


def _body(connection: urllib3.connection.HTTPConnection, parts: SplitResult, expired: threading.Event) -> bytes:
    """The body of a 200 answer to GET, of at most :data:`MAX_BYTES`, until the connection is cut."""
    connection.connect()
    if expired.is_set():  # (the cut came while connecting, before there was a socket to cut: the caller says so)
        return b""
    connection.request("GET", parts.path + (f"?{parts.query}" if parts.query else ""), preload_content=False,
                       headers={"Host": parts.netloc.rpartition("@")[2], "Accept": "application/json"})
    response = connection.getresponse()
    if response.status != 200:
        raise _refused(f"could not be fetched (HTTP {response.status})")
    data = b""
    while len(data) <= MAX_BYTES:
        chunk = response.read1(4096)  # what has arrived, without waiting for more
        if not chunk:
            return data
        data += chunk
    raise _refused(f"is larger than {MAX_BYTES} bytes")


def _cut(connection: urllib3.connection.HTTPConnection, expired: threading.Event) -> None:
    """At the deadline: end the exchange (a read blocked on the socket returns at once)."""
    expired.set()
    if connection.sock is not None:
        with contextlib.suppress(OSError):
            connection.sock.shutdown(socket.SHUT_RDWR)
