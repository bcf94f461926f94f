"""The ColabHive Builder Gateway over one ``requests.Session``.

Knows the REST contract (manifest pages, invoke, poll, cancel) and nothing of MCP. Every failure
surfaces as a :class:`GatewayError`; what an answer says is read in :mod:`.gateway_answers`.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import os
import random
import re
import threading
import time
import uuid
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable
from urllib.parse import quote, urlencode, urlsplit

from . import __version__, metrics, tracing
from .encoding import to_json
from .gateway_answers import (GatewayError, Invocation, error_of, invocation_of, json_body, read_body, reason_of,
                              retry_after_of, valid_entries)
from .keys import ApiKey, KeyRejected
from .logs import log

RETRY_STATUSES = frozenset({502, 503, 504})
MAX_MANIFEST_PAGES = 1000
NEXT_CURSOR = re.compile(rb'"nextCursor"\s*:\s*("(?:[^"\\]|\\.)*")')  # a page's cursor, read from its body unparsed
SENDING_S = 0.002  # about what a request takes of the interpreter lock to go out (a millisecond or two here)

if TYPE_CHECKING:
    import requests


Prepare = Callable[[dict[str, Any]], "tuple[Any, dict[str, Any]]"]  # an entry -> its key and the entry to keep


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
        self.rejection: KeyRejected | None = None  # set once the gateway refuses the key

    @property
    def session(self) -> requests.Session:
        """The tenant's connection pool, made on first use (``requests`` is not imported at start-up)."""
        if self._session is None:
            with self._session_lock:
                if self._session is None:
                    from .origin_adapter import OriginAdapter

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
                       meanwhile: Callable[[], None] | None = None) -> ManifestDocument | None:
        """Fetch every page of the manifest; ``None`` when ``etag`` is still current (304).

        ``prepare`` turns each entry into a pair, its key and the entry to keep (e.g. one copy shared
        with other tenants), while the next page is on its way (the work of a page costs no time of its
        own): the pairs are ``prepared``, the entries kept are ``entries``. ``meanwhile`` is done while
        the first answer is on its way (e.g. preparing the copy ``etag`` names, which a 304 makes
        current). Restarts once if the ETag changes between pages (the manifest changed mid-way).
        """
        for _attempt in range(2):
            try:
                return self._fetch_pages(etag, prepare, meanwhile)
            except _ChangedMidway:
                meanwhile = None  # done the first time
        raise GatewayError("the manifest kept changing while its pages were read", status=None)

    def invoke(self, slug: str, arguments: dict[str, Any], *, sync: bool = True, sync_timeout_s: int = 5,
               idempotency_key: str | None = None) -> Invocation:
        """Start an action; returns the Invocation (terminal, or queued/running).

        The ``Idempotency-Key`` (a new one unless given) makes the POST safe to retry after a
        dropped connection.
        """
        body = {"input": arguments, "sync": sync, "sync_timeout_s": sync_timeout_s}
        # a random UUID from the process's generator (no system call): it names a call, it guards nothing
        headers = {"Idempotency-Key": idempotency_key or str(uuid.UUID(int=random.getrandbits(128), version=4))}
        timeout = self.timeout + (sync_timeout_s if sync else 0)
        response = self._request("POST", f"/actions/{_segment(slug)}:invoke", payload=body, headers=headers,
                                 timeout=timeout)
        return invocation_of(response)

    def get_invocation(self, invocation_id: str, *, timeout: float | None = None) -> tuple[Invocation, float | None]:
        """The Invocation as it stands, and the gateway's ``Retry-After`` hint for the next poll.
        ``timeout`` may shorten the wait for the answer (never lengthen it)."""
        response = self._request("GET", f"/invocations/{_segment(invocation_id)}",
                                 timeout=min(timeout, self.timeout) if timeout else None)
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

    def _fetch_pages(self, etag: str | None, prepare: Prepare | None,
                     meanwhile: Callable[[], None] | None) -> ManifestDocument | None:
        """The pages in turn, each asked for as soon as its cursor is seen in the page before, while that
        page is parsed and prepared (the parse confirms the cursor: a guess it does not is dropped)."""
        entries: list[dict[str, Any]] = []
        prepared: list[tuple[Any, dict[str, Any]]] = []
        pages: list[_ManifestPage] = []
        size, first_etag, seen = 0, None, set[str | None]()
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
            if response.status_code == 304:
                return None
            guess = _cursor_seen(response.content)
            following = self._manifest_page(guess, {}, ahead=True) if guess else None
            page = _ManifestPage.of(response)
            pages.append(page)
            page_etag = response.headers.get("ETag") or page.etag
            if not seen:
                first_etag = page_etag
            elif page_etag and first_etag and page_etag != first_etag:
                raise _ChangedMidway
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
                return ManifestDocument(tuple(entries), first_etag, size, tuple(prepared), tuple(pages))
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
        asked = _Ahead(ask)
        asked.wait(SENDING_S)  # the request goes out before the caller's work takes the interpreter lock
        return asked.result

    def _request(self, method: str, path: str, *, timeout: float | None = None, headers: dict[str, str] | None = None,
                 payload: Any = None, params: dict[str, str] | None = None) -> requests.Response:
        """Send one request, retrying connection failures and 502/503/504 with backoff. A refusal of the
        key is raised as :class:`KeyRejected`, and kept in :attr:`rejection` (a manifest page's by the
        fetch that wanted the page).

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
                    return response
                error = error_of(response)
                if error.status == 401 or (error.status == 403 and route == "manifest"):
                    rejection = KeyRejected(error.status, error.message.split(" ", 1)[-1])
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
            if last or not (error.status is None or error.status in RETRY_STATUSES):
                raise error
            delay = self.backoff * (2 ** attempt)
            log.bind(method=method, path=path.split("?")[0], status=error.status, attempt=attempt + 1,
                     delay_s=round(delay, 3)).warning("gateway.retry")
            time.sleep(delay)
        raise AssertionError("unreachable")

    def _refused(self, rejection: KeyRejected, route: str) -> None:
        """The gateway refused the key on ``route``: kept (the pool then refuses it from memory), and said."""
        self.rejection = rejection
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


class _ManifestPage:
    """A page of a manifest as read: its valid entries, its cursor and ETag, and what a fetch's
    ``prepare`` made of its entries. Read once per process for each body (by its SHA-256) while a
    document read from it is held (:attr:`ManifestDocument.pages`): the keys of a service mostly see
    the same manifest, whose pages then cost a new key no parsing, and nothing more is kept."""

    _seen: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
    _lock = threading.Lock()

    def __init__(self, response: requests.Response) -> None:
        page = json_body(response)
        if not isinstance(page, dict) or not isinstance(page.get("tools"), list):
            raise GatewayError("the gateway's manifest is not an object with a 'tools' list",
                               status=response.status_code)
        self.entries = valid_entries(page["tools"])
        self.cursor, self.etag = page.get("nextCursor"), page.get("etag")
        self._prepared: dict[Prepare, list[tuple[Any, dict[str, Any]]]] = {}

    @classmethod
    def of(cls, response: requests.Response) -> _ManifestPage:
        body = hashlib.sha256(response.content).digest()
        with cls._lock:
            page = cls._seen.get(body)
        if page is None:
            page = cls(response)
            with cls._lock:
                page = cls._seen.setdefault(body, page)
        return page

    def prepared(self, prepare: Prepare) -> list[tuple[Any, dict[str, Any]]]:
        """What ``prepare`` makes of the entries (made once; a racing thread makes the same). From then
        on the page keeps the entries ``prepare`` keeps (one copy shared with other tenants, not its own)."""
        made = self._prepared.get(prepare)
        if made is None:
            made = [prepare(entry) for entry in self.entries]
            self.entries = [kept for _, kept in made]
            self._prepared[prepare] = made
        return made


class _ChangedMidway(Exception):
    """The manifest's ETag changed between two pages."""


class _Ahead:
    """A call made on a thread of its own (in the caller's context: its trace, its log fields),
    whose result, or exception, the caller takes when it needs it."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self._done = threading.Event()
        self._value: Any = None
        self._error: BaseException | None = None
        context = contextvars.copy_context()
        threading.Thread(target=context.run, args=(self._run, call), name="gateway-ahead", daemon=True).start()

    def _run(self, call: Callable[[], Any]) -> None:
        try:
            self._value = call()
        except BaseException as exc:  # handed to the caller, which raises it
            self._error = exc
        finally:
            self._done.set()

    def wait(self, seconds: float) -> None:
        """Wait ``seconds`` at most (less when the call ends sooner)."""
        self._done.wait(seconds)

    def result(self) -> Any:
        self._done.wait()
        if self._error is not None:
            raise self._error
        return self._value


def _cursor_seen(body: bytes) -> str | None:
    """The ``nextCursor`` of a manifest page as its body's last one reads, before the body is parsed."""
    found = NEXT_CURSOR.match(body, max(body.rfind(b'"nextCursor"'), 0))
    try:
        cursor = json.loads(found.group(1)) if found else None
    except ValueError:
        return None
    return cursor if isinstance(cursor, str) and cursor else None


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
