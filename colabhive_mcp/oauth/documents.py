"""Client ID Metadata Documents (and the key sets they name) fetched without becoming a proxy into
private networks.

The ``client_id`` of such a client is an https URL; the server fetches it to learn the client's
name and redirect URIs, and, for a client that signs its token requests, its ``jwks_uri``. The URL's host is resolved once, every address it resolves to must be
public (no loopback, private, link-local, shared or reserved range), and the connection goes to
that checked address (so a second lookup cannot rebind it), with TLS verified for the host name.
An address is public when ``ipaddress`` calls it global and it is in none of the IPv6 ranges that
carry or reach an IPv4 address (:data:`TUNNELS`: a global-looking address there may lead to a
private one). No redirects; a JSON content type; at most :data:`MAX_BYTES`, all of it, the lookup
included, within :data:`TIMEOUT_S`. A good document is kept as its ``Cache-Control`` says, within
:data:`MIN_CACHE_S` and :data:`CACHE_S` (``no-store``: the least); a failed fetch is remembered
:data:`FAILED_S` seconds, so naming the same broken URL again sends no request. A process fetches
at most :data:`FETCHES_AT_ONCE` documents at once (anyone may name a slow one, or a host name whose
lookup takes half a minute), so those fetches never hold more threads; past it, the answer is
``temporarily_unavailable`` at once, and documents kept are still served. The caller may also
``admit`` each fetch that would go out (the HTTP edge counts them per client address). A test
setting allows this machine's addresses, over plain http too.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import ipaddress
import json
import socket
import threading
import time
from typing import Any, Callable
from urllib.parse import SplitResult

import urllib3
import urllib3.connection
from cachetools import TLRUCache
from urllib3.util.ssl_match_hostname import CertificateError

from ..ahead import Ahead
from ..errors import BUSY_RETRY_S
from ..loopback import is_loopback
from . import urls
from .errors import OAuthError

MAX_BYTES = 16 * 1024
TIMEOUT_S = 5.0
CACHE_S = 300.0  # the longest a document is kept
MIN_CACHE_S = 10.0  # the shortest (a document marked no-store is not fetched again for every request)
FAILED_S = 30.0
FETCHES_AT_ONCE = 8
JSON_TYPES = ("application/json", "application/jwk-set+json")
TUNNELS = tuple(ipaddress.ip_network(net) for net in (
    "::/96",  # IPv4-compatible (deprecated), :: and ::1 among them
    "::ffff:0:0:0/96",  # IPv4-translated (SIIT)
    "64:ff9b::/96", "64:ff9b:1::/48",  # NAT64
    "2002::/16",  # 6to4
    "2001::/32",  # Teredo
    "fec0::/10",  # site-local (deprecated)
))


def _until(_url: str, kept: tuple[Any, float], now: float) -> float:
    return now + kept[1]


def new_cache(timer: Callable[[], float] = time.monotonic) -> TLRUCache:
    """What is kept, by URL: (a document, or the refusal of a failed fetch; seconds to keep it)."""
    return TLRUCache(maxsize=512, ttu=_until, timer=timer)


_cache = new_cache()
_lock = threading.Lock()
_fetching = threading.BoundedSemaphore(FETCHES_AT_ONCE)


def is_document_url(client_id: str) -> bool:
    """Whether a ``client_id`` names a metadata document (an http(s) URL), rather than a registration."""
    return client_id.startswith(("https://", "http://"))


def fetch(url: str, *, loopback: bool = False, fresh: bool = False,
          admit: Callable[[], OAuthError | None] | None = None) -> dict[str, Any]:
    """The JSON object at ``url`` (kept a while, unless ``fresh`` is asked for); raises
    :class:`OAuthError` ``invalid_client`` saying why it cannot be had. ``loopback``: this machine's
    addresses are allowed (tests); ``admit``: asked before a request goes out, its refusal is raised."""
    with _lock:
        kept = None if fresh else _cache.get(url)
    if kept is not None:
        if isinstance(kept[0], OAuthError):
            raise kept[0]
        return kept[0]
    parts, port = check_url(url, loopback)
    refusal = admit() if admit is not None else None
    if refusal is not None:
        raise refusal
    try:
        document, keep = _fetch(parts, port, loopback)
    except OAuthError as exc:
        if exc.error == "invalid_client":  # (not a refusal for being busy: that passes)
            with _lock:
                _cache[url] = (exc, FAILED_S)
        raise
    with _lock:
        _cache[url] = (document, keep)
    return document


def _fetch(parts: SplitResult, port: int, loopback: bool) -> tuple[dict[str, Any], float]:
    """The document, and how long to keep it, fetched on a thread of its own within :data:`TIMEOUT_S`."""
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
    found: tuple[dict[str, Any], float] = fetching.result()
    return found


def _fetch_in_place(places: threading.BoundedSemaphore, parts: SplitResult, port: int,
                    loopback: bool) -> tuple[dict[str, Any], float]:
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
    parts = urls.split(url)
    if parts is None:
        raise _refused("URL is not one that every URL parser reads alike")
    if parts.scheme != "https" and not (loopback and parts.scheme == "http" and is_loopback(parts.hostname)):
        raise _refused("must be at an https URL")
    if not parts.hostname or parts.username or parts.password or parts.fragment or parts.path in ("", "/"):
        raise _refused("URL must name a host and a path, with no user or fragment")
    return parts, parts.port or (443 if parts.scheme == "https" else 80)


def _public_address(host: str, port: int, loopback: bool) -> str:
    """The address to connect to: every one the host resolves to must be allowed."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        raise _refused(f"host {host!r} does not resolve") from None
    addresses = [str(info[4][0]) for info in infos]
    for address in addresses:
        if not public(ipaddress.ip_address(address.partition("%")[0]), loopback):
            raise _refused(f"host {host!r} is at a private or reserved address")
    return addresses[0]


def public(ip: ipaddress.IPv4Address | ipaddress.IPv6Address, loopback: bool = False) -> bool:
    """Whether a document may be fetched from ``ip``: a global address, outside every IPv6 range that
    carries or reaches an IPv4 one (an IPv4-mapped address is judged as its IPv4 address);
    ``loopback``: this machine's addresses too."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if loopback and ip.is_loopback:
        return True
    return ip.is_global and not (isinstance(ip, ipaddress.IPv6Address) and any(ip in net for net in TUNNELS))


def _get(parts: SplitResult, address: str, port: int) -> tuple[dict[str, Any], float]:
    """The JSON object at the checked ``address``, all of it within :data:`TIMEOUT_S` however slowly
    the server sends (a timer cuts the connection at the deadline, wherever the exchange is), and
    how long to keep it."""
    connection = _connection(parts, address, port)
    expired = threading.Event()
    cutoff = threading.Timer(TIMEOUT_S, _cut, (connection, expired))
    cutoff.daemon = True
    cutoff.start()
    try:
        data, headers = _body(connection, parts, expired)
    except (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError, CertificateError, ValueError) as exc:
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
    if headers.get("Content-Type", "").partition(";")[0].strip().lower() not in JSON_TYPES:
        raise _refused("is not served as JSON (Content-Type application/json)")
    return document, keep_for(headers.get("Cache-Control", ""))


def keep_for(cache_control: str) -> float:
    """Seconds to keep a document its ``Cache-Control`` allows, within :data:`MIN_CACHE_S` and :data:`CACHE_S`."""
    keep = CACHE_S
    for directive in cache_control.lower().split(","):
        name, _, value = directive.strip().partition("=")
        if name in ("no-store", "no-cache"):
            keep = 0.0
        elif name == "max-age" and value.strip().strip('"').isdigit():
            keep = min(keep, float(value.strip().strip('"')))
    return max(MIN_CACHE_S, min(CACHE_S, keep))


def _connection(parts: SplitResult, address: str, port: int) -> urllib3.connection.HTTPConnection:
    """A connection to ``address``, TLS verified for the URL's host name."""
    if parts.scheme == "https":
        return urllib3.connection.HTTPSConnection(address, port, timeout=TIMEOUT_S, cert_reqs="CERT_REQUIRED",
                                                  server_hostname=parts.hostname, assert_hostname=parts.hostname)
    return urllib3.connection.HTTPConnection(address, port, timeout=TIMEOUT_S)


def _body(connection: urllib3.connection.HTTPConnection, parts: SplitResult,
          expired: threading.Event) -> tuple[bytes, Any]:
    """The body of a 200 answer to GET, of at most :data:`MAX_BYTES`, until the connection is cut,
    and the answer's headers."""
    connection.connect()
    if expired.is_set():  # (the cut came while connecting, before there was a socket to cut: the caller says so)
        return b"", {}
    connection.request("GET", parts.path + (f"?{parts.query}" if parts.query else ""), preload_content=False,
                       headers={"Host": parts.netloc.rpartition("@")[2], "Accept": "application/json"})
    response = connection.getresponse()
    if response.status != 200:
        raise _refused(f"could not be fetched (HTTP {response.status})")
    data = b""
    while len(data) <= MAX_BYTES:
        chunk = response.read1(4096)  # what has arrived, without waiting for more
        if not chunk:
            return data, response.headers
        data += chunk
    raise _refused(f"is larger than {MAX_BYTES} bytes")


def _cut(connection: urllib3.connection.HTTPConnection, expired: threading.Event) -> None:
    """At the deadline: end the exchange (a read blocked on the socket returns at once)."""
    expired.set()
    if connection.sock is not None:
        with contextlib.suppress(OSError):
            connection.sock.shutdown(socket.SHUT_RDWR)
