"""The ColabHive Builder Gateway over one ``requests.Session``.

Knows the REST contract (manifest pages, invoke, poll, cancel) and nothing of MCP. Every failure
surfaces as a :class:`GatewayError`; what an answer says is read in :mod:`.answers`.
"""

from __future__ import annotations

import os
import random
import threading
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable
from urllib.parse import quote, urlencode, urlsplit

from .. import __version__, metrics, tracing
from ..ahead import Ahead
from ..encoding import to_json
from ..invocation import Invocation
from ..keys import ApiKey, KeyRejected, mistake
from ..logs import log
from .answers import GatewayError, error_of, invocation_of, read_body, reason_of, retry_after_of
from .pages import ManifestPage, Prepare, cursor_seen

RETRY_STATUSES = frozenset({502, 503, 504})
MAX_RETRY_WAIT_S = 5.0  # a Retry-After longer than this is the caller's to wait for, not a retry's
MAX_MANIFEST_PAGES = 1000
SENDING_S = 0.002  # about what a request takes of the interpreter lock to go out (a millisecond or two here)

if TYPE_CHECKING:
    import requests


@dataclass(frozen=True)
class ManifestDocument:
    """All pages of a manifest as fetched: the entries, the ETag and the bytes read; ``prepared``:
    what the fetch's ``prepare`` made of each entry, if it was given one."""

    entries: tuple[dict[str, Any], ...]
    etag: str | None
    size: int
    prepared: tuple[tuple[Any, dict[str, Any]], ...] = ()
    pages: tuple[Any, ...] = ()  # what it was read from: held with it, they are not read again for another key


class Gateway:
    """A client of one Builder Gateway for one API key."""

    def __init__(self, base_url: str, key: ApiKey, *, account_id: str | None = None,
                 timeout: float = 30.0, retries: int = 3, backoff: float = 0.2, proxy: str | None = None,
                 max_manifest_bytes: int = 32 << 20, max_result_bytes: int = 64 << 20,
                 session: requests.Session | None = None) -> None:
        """``proxy``: the only proxy ever used (the environment's ``HTTP(S)_PROXY`` are not: the key
        would travel to them). ``max_*_bytes``: the most a manifest page, or any other answer, may
        hold once decoded (a gzip bomb stops there)."""
        self.base_url = base_url.rstrip("/")
        self.host = urlsplit(self.base_url).hostname or ""
        self.max_manifest_bytes = max_manifest_bytes
        self.max_result_bytes = max_result_bytes
        self.proxy = proxy
        self.key_id = key.log_id
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.headers = {
            "X-API-Key": key.secret,
            "User-Agent": f"colabhive-mcp/{__version__}",
            "Accept": "application/json",
            "Accept-Encoding": "gzip",
            **({"X-Account-ID": account_id} if account_id else {}),
        }
        self._session = session
        if session is not None:
            session.headers.update(self.headers)
        self._session_lock = threading.Lock()
        self.rejection: KeyRejected | None = None  # the gateway's refusal of the key, while it is its last word
        self._refused_at = -float("inf")  # when (time.perf_counter()) it was kept
        self._refusal_lock = threading.Lock()
        self.etag_per_page = False  # whether the gateway gives each manifest page an ETag of its own

    @property
    def session(self) -> requests.Session:
        """The tenant's connection pool, made on first use (``requests`` is not imported at start-up)."""
        if self._session is None:
            with self._session_lock:
                if self._session is None:
                    from .adapter import OriginAdapter

                    session = _http().Session()
                    session.mount("https://", OriginAdapter())
                    session.mount("http://", OriginAdapter())
                    session.headers.update(self.headers)
                    _settle(session, self.proxy)
                    self._session = session  # only once whole: a thread that finds it uses it unlocked
        return self._session

    def close(self) -> None:
        if self._session is not None:
            self._session.close()

    # -- contract -------------------------------------------------------------------------

    def fetch_manifest(self, etag: str | None = None, prepare: Prepare | None = None,
                       meanwhile: Callable[[], object] | None = None,
                       accepted: Callable[[], None] | None = None) -> ManifestDocument | None:
        """Fetch every page of the manifest; ``None`` when ``etag`` is still current (304).
        ``accepted`` is called once the first page is answered (the gateway accepts the key).

        ``prepare`` turns each entry into a pair, its key and the entry to keep (e.g. one copy shared
        with other tenants), while the next page is on its way (the work of a page costs no time of its
        own): the pairs are ``prepared``, the entries kept are ``entries``. ``meanwhile`` is done while
        the first answer is on its way (e.g. preparing the copy ``etag`` names, which a 304 makes
        current).

        Revalidation needs one ETag for the whole manifest, on every page. A later page with another
        one: the pages are read again from the first, since the manifest changed mid-way, or the gateway
        gives each page an ETag of its own (then the first page's is the same the second time, and a
        later page's differs again). Such a manifest has no ETag: it is read whole every time, as the
        contract says, and this gateway's pages are read without the check from then on.
        """
        first_etag = None
        for _attempt in range(2):
            try:
                return self._fetch_pages(etag, prepare, meanwhile, first_etag, accepted)
            except _ChangedMidway as changed:
                first_etag, meanwhile, accepted = changed.first_etag, None, None  # (done the first time)
        raise GatewayError("the manifest kept changing while its pages were read", status=None)

    def invoke(self, slug: str, arguments: dict[str, Any], *, sync: bool = True, sync_timeout_s: int = 5,
               idempotency_key: str | None = None) -> Invocation:
        """Start an action; returns the Invocation (terminal, or queued/running).

        The ``Idempotency-Key`` (a new one unless given) makes the POST safe to retry after a
        dropped connection.
        """
        body = {"input": arguments, "sync": sync, "sync_timeout_s": sync_timeout_s}
        headers = {"Idempotency-Key": idempotency_key or new_idempotency_key()}
        timeout = self.timeout + (sync_timeout_s if sync else 0)
        response = self._request("POST", f"/actions/{_segment(slug)}:invoke", payload=body, headers=headers,
                                 timeout=timeout)
        return invocation_of(response)

    def get_invocation(self, invocation_id: str, *, timeout: float | None = None,
                       polled: bool = False) -> tuple[Invocation, float | None]:
        """The Invocation as it stands, and the gateway's ``Retry-After`` hint for the next poll.
        ``timeout`` may shorten the wait for the answer (never lengthen it). ``polled``: the caller
        asks again as ``Retry-After`` says, and can be cancelled meanwhile: a 429 or 503 with one is
        raised at once, not waited out here."""
        response = self._request("GET", f"/invocations/{_segment(invocation_id)}",
                                 timeout=min(timeout, self.timeout) if timeout else None, waits=not polled)
        return invocation_of(response), retry_after_of(response)

    def cancel(self, invocation_id: str) -> Invocation | None:
        """Ask the gateway to stop an invocation; ``None`` when it has no cancel route."""
        try:
            response = self._request("POST", f"/invocations/{_segment(invocation_id)}:cancel")
        except GatewayError as exc:
            if exc.status in (404, 405):
                return None
            raise
        return invocation_of(response)

    # -- plumbing -------------------------------------------------------------------------

    def _fetch_pages(self, etag: str | None, prepare: Prepare | None, meanwhile: Callable[[], object] | None,
                     earlier_first: str | None, accepted: Callable[[], None] | None) -> ManifestDocument | None:
        """The pages in turn, each asked for as soon as its cursor is seen in the page before, while that
        page is parsed and prepared (the parse confirms the cursor: a guess it does not is dropped).
        ``earlier_first``: the first page's ETag when the pages were read before, and a later page's
        differed (the same again now: each page has its own)."""
        entries: list[dict[str, Any]] = []
        prepared: list[tuple[Any, dict[str, Any]]] = []
        pages: list[ManifestPage] = []
        size, first_etag, seen, whole, first_again = 0, None, set[str | None](), True, False
        page_answer = self._manifest_page(None, {"If-None-Match": etag} if etag else {}, ahead=meanwhile is not None)
        if meanwhile is not None:
            try:
                meanwhile()
            except Exception:  # only ever a head start: the answer is taken all the same
                log.bind(tenant=self.key_id).exception("gateway.meanwhile_failed")
        for _page in range(MAX_MANIFEST_PAGES):
            try:
                response = page_answer()
            except KeyRejected as exc:  # a page asked ahead refuses the key only once it is the page wanted
                self._refused(exc, "manifest")
                raise
            if accepted is not None:
                accepted()
                accepted = None
            if response.status_code == 304:
                return None
            guess = cursor_seen(response.content)
            following = self._manifest_page(guess, {}, ahead=True) if guess else None
            page = ManifestPage.of(response)
            pages.append(page)
            page_etag = response.headers.get("ETag") or page.etag
            if not seen:
                first_etag = page_etag
                first_again = earlier_first is not None and bool(page_etag) and same_etag(page_etag, earlier_first)
            elif whole and not same_etag(page_etag, first_etag):
                if not (self.etag_per_page or first_again):
                    raise _ChangedMidway(first_etag)
                self.etag_per_page, whole = True, False  # the first page unchanged, a later one differs again
            size += len(response.content)  # decoded
            if page.cursor in seen:
                raise GatewayError("the gateway's manifest cursors loop", status=response.status_code)
            seen.add(page.cursor)
            if page.cursor:
                page_answer = following if following is not None and guess == page.cursor else self._manifest_page(
                    page.cursor, {}, ahead=True)
            if prepare is not None:
                prepared.extend(page.prepared(prepare))
            entries.extend(page.entries)
            if not page.cursor:
                return ManifestDocument(tuple(entries), first_etag if whole else None, size, tuple(prepared),
                                        tuple(pages))
        raise GatewayError(f"the gateway's manifest has more than {MAX_MANIFEST_PAGES} pages")

    def _manifest_page(self, cursor: str | None, headers: dict[str, str],
                       ahead: bool) -> Callable[[], requests.Response]:
        """What answers the request for a page of the manifest: asked when called, or (``ahead``)
        asked now on a thread of its own, while the caller works on the page before (a page asked ahead
        on a wrong guess is dropped, its refusal of the key with it: :meth:`_fetch_pages` keeps only the
        refusal of a page it wants)."""
        def ask() -> requests.Response:
            return self._request("GET", "/mcp/manifest", params={"cursor": cursor} if cursor else None,
                                 headers=headers)

        if not ahead:
            return ask
        _ = self.session  # made here if need be (requests imported): the request's thread would wait on the caller's work
        asked = Ahead(ask, "gateway-ahead")
        asked.wait(SENDING_S)  # the request goes out before the caller's work takes the interpreter lock
        return asked.result

    def _request(self, method: str, path: str, *, timeout: float | None = None, headers: dict[str, str] | None = None,
                 payload: Any = None, params: dict[str, str] | None = None, waits: bool = True) -> requests.Response:
        """Send one request, retrying connection failures and 502/503/504 with backoff, never sooner than
        a ``Retry-After`` says. An answer with one is not retried when it asks more than
        :data:`MAX_RETRY_WAIT_S`, or when the request does not ``wait`` (its caller waits, and can be
        cancelled meanwhile). A refusal of the key is raised as :class:`KeyRejected`, and kept in
        :attr:`rejection` (a manifest page's by the fetch that wanted the page) until an answer accepts
        the key again.

        Every route the client uses is safe to retry: GETs are idempotent, ``:invoke``
        carries an ``Idempotency-Key`` and ``:cancel`` is idempotent by nature. Redirects are
        never followed (the key would go with them to wherever they point): a 3xx is an error.
        """
        url, headers = self.base_url + path, headers or {}  # and the caller's trace context, if any
        body = None if payload is None else to_json(payload, allow_nan=False)  # NaN is not JSON: a ValueError
        route = metrics.upstream_route(method, path)
        cap = self.max_manifest_bytes if route == "manifest" else self.max_result_bytes
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            started = time.perf_counter()
            try:
                with tracing.span(f"{method} {route}", {"http.request.method": method, "server.address": self.host},
                                  client=True) as span:
                    response = self._send(method, url, {**headers, **tracing.headers()}, body, params,
                                          timeout or self.timeout)
                    span.set("http.response.status_code", response.status_code)
                    read_body(response, cap)  # the whole body now, so a broken stream is retried here
                metrics.UPSTREAM.labels(route, str(response.status_code)).inc()
                metrics.UPSTREAM_LATENCY.labels(route).observe(time.perf_counter() - started)
                if response.status_code < 300 or response.status_code == 304:
                    if self.rejection is not None:
                        self._accepted(started)
                    return response
                error = error_of(response)
                if error.status == 401 or (error.status == 403 and route == "manifest"):
                    rejection = KeyRejected(error.status, error.message.split(" ", 1)[-1],
                                            mistake(self.headers["X-API-Key"]))
                    if route != "manifest":
                        self._refused(rejection, route)
                    raise rejection
            except _http().Timeout:
                metrics.UPSTREAM.labels(route, "timeout").inc()
                raise GatewayError(f"the gateway did not answer within {timeout or self.timeout:g} s") from None
            except _http().ConnectionError as exc:
                metrics.UPSTREAM.labels(route, "connection_error").inc()
                error = GatewayError(f"cannot reach the gateway: {reason_of(exc)}")
            except (_http().exceptions.ChunkedEncodingError, _http().exceptions.ContentDecodingError) as exc:
                metrics.UPSTREAM.labels(route, "connection_error").inc()
                error = GatewayError(f"the gateway's answer was cut short or corrupt: {reason_of(exc)}")
            asked = error.retry_after
            if last or not (error.status is None or error.status in RETRY_STATUSES) or (
                    asked is not None and (not waits or asked > MAX_RETRY_WAIT_S)):
                raise error
            delay = max(self.backoff * (2 ** attempt), asked or 0.0)  # never sooner than asked
            log.bind(method=method, path=path.split("?")[0], status=error.status, attempt=attempt + 1,
                     delay_s=round(delay, 3)).warning("gateway.retry")
            time.sleep(delay)
        raise AssertionError("unreachable")

    def _accepted(self, asked: float) -> None:
        """An answer to a request sent at ``asked`` (a :func:`time.perf_counter` reading) accepted the key:
        a refusal kept before the request was sent is forgotten (one kept since is newer news)."""
        with self._refusal_lock:
            if asked > self._refused_at:
                self.rejection = None

    def _refused(self, rejection: KeyRejected, route: str) -> None:
        """The gateway refused the key on ``route``: kept (the pool then refuses it from memory), and said."""
        with self._refusal_lock:
            self.rejection, self._refused_at = rejection, time.perf_counter()
        log.bind(route=route, status=rejection.status, tenant=self.key_id).warning("gateway.key_rejected")

    def _send(self, method: str, url: str, headers: dict[str, str], body: bytes | None,
              params: dict[str, str] | None, timeout: float) -> requests.Response:
        """One request through the tenant's session's connection pool, prepared here: the gateway
        sets no cookies and redirects are not followed, so requests' per-request merging of session
        settings (cookies, hooks, the environment) has nothing to add, and is skipped."""
        http, session = _http(), self.session
        prepared = http.PreparedRequest()
        prepared.method = method
        prepared.url = url + ("?" + urlencode(params) if params else "")
        prepared.headers = http.structures.CaseInsensitiveDict({**session.headers, **headers})
        if body is not None:
            prepared.headers["Content-Type"] = "application/json"
        if body is not None or method not in ("GET", "HEAD"):
            prepared.headers["Content-Length"] = str(len(body or b""))
        prepared.body = body
        prepared.hooks = {"response": []}
        return session.get_adapter(url).send(prepared, stream=True, timeout=timeout, verify=session.verify,
                                             cert=session.cert, proxies=session.proxies)


def new_idempotency_key() -> str:
    """A fresh ``Idempotency-Key``: a random UUID from the process's generator (no system call): it
    names a call, it guards nothing."""
    return str(uuid.UUID(int=random.getrandbits(128), version=4))


class _ChangedMidway(Exception):
    """A later page of the manifest had another ETag than the first page's, ``first_etag``."""

    def __init__(self, first_etag: str | None) -> None:
        super().__init__(first_etag)
        self.first_etag = first_etag


def same_etag(one: str | None, other: str | None) -> bool:
    """Whether two ETags name the same version, compared weakly (RFC 9110 §8.8.3.2: a proxy that
    gzips an answer marks its ETag weak, ``W/"v1"``); a page without one names no other version."""
    if not one or not other:
        return True
    return one.removeprefix("W/") == other.removeprefix("W/")


def _http() -> Any:
    """The ``requests`` module: imported by the first gateway request, so stdio starts fast."""
    import requests

    return requests


def _settle(session: requests.Session, proxy: str | None) -> None:
    """The session's proxy (only the configured one) and CA bundle, decided once: by default requests
    reads all of ``os.environ`` (proxies included) and ``~/.netrc`` again on every request."""
    if proxy:
        session.proxies.update({"http": proxy, "https": proxy})
    bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
    if bundle:
        session.verify = bundle
    session.trust_env = False


def _segment(value: str) -> str:
    """One URL path segment: never lets an id or slug change the route or the host."""
    return quote(value, safe="")


def reachable(base_url: str, timeout: float) -> bool:
    """Whether the gateway answers at all: any HTTP answer counts (a 401 to a keyless request too)."""
    try:
        _http().get(base_url.rstrip("/") + "/mcp/manifest", timeout=timeout, allow_redirects=False)
    except _http().RequestException:
        return False
    return True
