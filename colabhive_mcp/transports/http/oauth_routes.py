"""The OAuth routes, when ``public_url`` is set: the protected resource's and the authorization
server's metadata, ``/authorize`` (the consent page), ``/token`` and ``/register``.

This adapts :mod:`colabhive_mcp.oauth` to the HTTP edge: forms and JSON in, pages, redirects and
JSON out, and what only the edge knows: the client's address (consent attempts are rate-limited
per address), the gateway's word on a key (checked before any code is issued, and again on each
refresh), logs and metrics. The metadata, token and registration endpoints answer any origin
(they take no ambient credential); the consent page only its own.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any, Callable

from werkzeug.wrappers import Response

from ... import metrics
from ...errors import BUSY_RETRY_S, ColabHiveError
from ...keys import ApiKey, KeyRejected, well_formed
from ...logs import log
from ...oauth import OAuthError, urls
from ...oauth.assertions import Assertions, Proof
from ...oauth.clients import Clients
from ...oauth.consent import AuthorizationRequest, Consent, Redirected
from ...oauth.errors import refused
from ...oauth.grants import Grant
from ...oauth.metadata import (AUTHORIZATION_SERVER_METADATA_PATH, AUTHORIZE_PATH, REGISTER_PATH,
                               RESOURCE_METADATA_PATH, TOKEN_PATH)
from ...oauth.pages import Lifetimes, consent_page, error_page, security_headers
from ...settings.config import Config
from ...store.interface import per_minute_wait
from .incoming import HttpRequest, OAuthRequest, read_oauth_request
from .outgoing import JSON, Answer, not_allowed
from .tenancy import Tenancy

CONSENTS = "oauth-consent"  # store space: consent forms submitted per client address in the last minute
TOKEN_REQUESTS = "oauth-token"  # store space: token requests per client address in the last minute
REFRESHES = "oauth-refreshes"  # store space: refreshes per key in the last minute
FETCHES = "oauth-fetches"  # store space: documents fetched for requests of a client address in the last minute
NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}
ANY_ORIGIN = {"Access-Control-Allow-Origin": "*"}
FORM = "application/x-www-form-urlencoded"


class OAuthRoutes:
    def __init__(self, config: Config, tenancy: Tenancy) -> None:
        assert tenancy.grants is not None and tenancy.endpoints is not None and config.session_secret
        self.config, self.tenancy, self.store = config, tenancy, tenancy.instance.store
        self.endpoints, self.grants = tenancy.endpoints, tenancy.grants
        secret = config.session_secret
        self.clients = Clients(secret, config.oauth_redirect_schemes, loopback_documents=config.oauth_loopback_clients)
        self.consent = Consent(secret, self.clients, self.endpoints)
        self.assertions = Assertions(self.clients, self.endpoints, self.store)
        self.origin = urls.origin(self.endpoints.issuer)  # where the consent form may be posted from
        self.lifetimes = Lifetimes(config.oauth_access_token_ttl, config.oauth_refresh_token_ttl)
        resource_path = RESOURCE_METADATA_PATH + "/mcp"
        self.public: dict[str, dict[str, Callable[[OAuthRequest], Answer]]] = {
            RESOURCE_METADATA_PATH: {"GET": self.resource_metadata},
            resource_path: {"GET": self.resource_metadata},
            AUTHORIZATION_SERVER_METADATA_PATH: {"GET": self.server_metadata},
            TOKEN_PATH: {"POST": self.token},
            REGISTER_PATH: {"POST": self.register},
        }

    def route(self, request: HttpRequest, path: str) -> Answer | None:
        """The answer to an OAuth route, ``None`` for any other path."""
        if path == AUTHORIZE_PATH:
            page = {"GET": self.authorize, "POST": self.decide}.get(request.method)
            return page(read_oauth_request(request)) if page is not None else not_allowed("GET, POST")
        handlers = self.public.get(path)
        if handlers is None:
            return None
        if request.method == "OPTIONS":
            return Response(status=204, headers={**ANY_ORIGIN, "Access-Control-Allow-Methods": ", ".join(handlers),
                                                 "Access-Control-Allow-Headers": "Content-Type, MCP-Protocol-Version",
                                                 "Access-Control-Max-Age": "600"})
        handler = handlers.get(request.method)
        answer = handler(read_oauth_request(request)) if handler is not None else not_allowed(", ".join(handlers))
        answer.headers.update(ANY_ORIGIN)
        return answer

    def is_public(self, path: str) -> bool:
        """Whether a path answers any browser origin (no ambient credential is involved)."""
        return path in self.public

    # -- metadata ----------------------------------------------------------------------------------

    def resource_metadata(self, request: OAuthRequest) -> Answer:
        return _json(self.endpoints.protected_resource(), 200, {"Cache-Control": "public, max-age=3600"})

    def server_metadata(self, request: OAuthRequest) -> Answer:
        return _json(self.endpoints.authorization_server(), 200, {"Cache-Control": "public, max-age=3600"})

    # -- the consent page -----------------------------------------------------------------------------

    def authorize(self, request: OAuthRequest) -> Answer:
        """``GET /authorize``: the consent page, or the reason there is none."""
        try:
            wanted = self.consent.request(request.query, self._fetch_budget(request.address))
        except OAuthError as exc:
            refused(exc)
            return _refusal_page(exc)
        except Redirected as exc:
            refused(exc.error)
            return self._back(exc.redirect_uri, exc.state, error=exc.error.error,
                              error_description=exc.error.description)
        return self._consent_page(wanted, 200)

    def decide(self, request: OAuthRequest) -> Answer:
        """``POST /authorize``: the user's answer; a code only for a key the gateway accepts."""
        origin = request.origin  # (browsers send one with every POST; other clients need none)
        if origin is not None and urls.origin(origin) != self.origin:  # scheme, host and port: the edge checked the host
            refused(OAuthError("foreign_origin", "a consent form posted from another origin"))
            return _refusal_page(OAuthError("invalid_request", "The consent form was posted from another origin.",
                                            403, plain="This form was sent from another website, so it is refused: "
                                                       "start connecting again from the application."))
        address = request.address
        limited = self._rate_limit(CONSENTS, address, self.config.oauth_consents_per_minute,
                                   "attempts from your address")
        if limited is not None:
            return _refusal_page(limited)
        form = request.form
        try:
            wanted = self.consent.submitted(form.get("request"))
        except OAuthError as exc:
            refused(exc)
            return _refusal_page(exc)
        if form.get("action") == "deny":
            refused(OAuthError("access_denied", "the user denied access"))
            return self._back(wanted.redirect_uri, wanted.state, error="access_denied",
                              error_description="The user did not allow access.")
        key = (form.get("key") or "").strip()
        grant = Grant(key, wanted.client.client_id, wanted.resource, wanted.granted(form.get("grant")),
                      wanted.client.signed)
        problem = self._key_problem(grant, address)
        if problem is not None:
            refused(problem)
            return _retry_after(self._consent_page(wanted, problem.status, problem.description, grant.scope), problem)
        code = self.grants.code(grant, wanted.redirect_uri, wanted.challenge)
        metrics.OAUTH.labels("code_issued", "").inc()
        log.bind(client=wanted.client.name, tenant=ApiKey.of(key).log_id, scope=grant.scope).info("oauth.code.issued")
        return self._back(wanted.redirect_uri, wanted.state, code=code)

    def _rate_limit(self, space: str, who: str, limit: int, what: str) -> OAuthError | None:
        """The refusal (429, logged) for one more of ``what`` (say, "token requests from your address")
        by ``who`` past ``limit`` a minute, else ``None``."""
        wait = per_minute_wait(self.store, space, who, limit)
        if wait is None:
            return None
        refused(OAuthError("rate_limited", f"too many {what}"))
        sentence = f"More than {limit} {what} in a minute: wait a minute, then try again."
        return OAuthError("temporarily_unavailable", sentence, 429, max(1, round(wait)), plain=sentence)

    def _fetch_budget(self, address: str) -> Callable[[], OAuthError | None]:
        """What admits a document fetch for a request from ``address``: its refusal, past the budget."""
        return lambda: self._rate_limit(FETCHES, address, self.config.oauth_document_fetches_per_minute,
                                        "new application descriptions from your address")

    def _consent_page(self, wanted: AuthorizationRequest, status: int, error: str | None = None,
                      chosen: str | None = None) -> Response:
        """The consent page again (``error``: why the last answer was refused, ``chosen`` what it chose)."""
        text = consent_page(wanted.client, wanted.redirect_uri, self.consent.form_token(wanted), self.lifetimes, error,
                            chosen or wanted.scope)
        return _page(text, status, wanted.redirect_uri)

    def _key_problem(self, grant: Grant, address: str) -> OAuthError | None:
        """Why the key typed cannot be granted (its sentence is shown on the consent page), else ``None``."""
        if not well_formed(grant.key):
            return OAuthError("invalid_request", "That is not a ColabHive API key: paste the whole key, which starts "
                              "with hive_.")
        if not self.grants.fits(grant):
            return OAuthError("invalid_request", "This key is too long to travel inside a token; connect with the key "
                              "as a header instead (see the documentation).")
        try:
            self.tenancy.check(ApiKey.of(grant.key), address)
        except KeyRejected:
            return OAuthError("key_rejected", "ColabHive did not accept this key. Check it (or make a new one) and try "
                              "again.", 401)
        except ColabHiveError as exc:  # it cannot be checked just now
            return _unavailable(exc)
        return None

    def _back(self, redirect_uri: str, state: str | None, **params: str) -> Answer:
        return Response(status=303, headers={"Location": self.consent.redirect(redirect_uri, state, **params),
                                             **security_headers(None)})

    # -- token and registration ------------------------------------------------------------------

    def token(self, request: OAuthRequest) -> Answer:
        """``POST /token``: an authorization code or a refresh token for new tokens."""
        address = request.address
        limited = self._rate_limit(TOKEN_REQUESTS, address, self.config.oauth_token_requests_per_minute,
                                   "token requests from your address")
        if limited is not None:
            return _json_refusal(limited)
        form = request.form
        try:
            if request.content_type != FORM:
                raise OAuthError("invalid_request", f"The token request must be {FORM}.")
            grant_type = form.get("grant_type")
            if grant_type not in ("authorization_code", "refresh_token"):
                raise OAuthError("unsupported_grant_type", "grant_type must be authorization_code or refresh_token.")
            proof = self.assertions.verify(form, self._fetch_budget(address))
            if grant_type == "authorization_code":
                tokens = self.grants.redeem(form, proof)
            else:
                tokens = self._refresh(form, proof, address)
        except OAuthError as exc:
            refused(exc)
            return _json_refusal(exc)
        metrics.OAUTH.labels("token_issued", "").inc()
        log.bind(grant_type=grant_type).info("oauth.token.issued")
        return _json(tokens, 200, NO_STORE)

    def _refresh(self, form: dict[str, str], proof: Proof | None, address: str) -> dict[str, Any]:
        """New tokens for a refresh token, once the gateway says now that it still accepts the key (a
        warm tenant's word is not enough: the key may have been revoked since)."""
        refreshing = self.grants.refresh_grant(form, proof)
        key = ApiKey.of(refreshing.grant.key)
        limited = self._rate_limit(REFRESHES, key.digest, self.config.oauth_refreshes_per_minute,
                                   "refreshes of this key's grants")
        if limited is not None:
            raise limited
        asked = time.monotonic()
        try:
            with self.tenancy.tenant(key, address) as tenant:
                tenant.revalidate(since=asked)  # (a tenant made for this request has just asked)
        except KeyRejected:
            raise OAuthError("invalid_grant", "ColabHive no longer accepts the key of this grant: connect "
                             "again.") from None
        except ColabHiveError as exc:
            raise _unavailable(exc) from None
        return self.grants.rotate(refreshing, proof)

    def register(self, request: OAuthRequest) -> Answer:
        """``POST /register`` (RFC 7591): the client's registration, sealed into its ``client_id``."""
        try:
            try:
                metadata = json.loads(request.body)
            except (ValueError, RecursionError):  # (not JSON, not UTF-8, or nested past what the parser takes)
                raise OAuthError("invalid_client_metadata", "The registration must be a JSON object.") from None
            registered = self.clients.register(metadata)
        except OAuthError as exc:
            refused(exc)
            return _json_refusal(exc)
        log.bind(client=registered["client_name"]).info("oauth.client.registered")
        return _json(registered, 201, NO_STORE)




def _json(document: Any, status: int, headers: dict[str, str]) -> Response:
    return Response(json.dumps(document), status, headers=headers, mimetype=JSON)


def _unavailable(exc: ColabHiveError) -> OAuthError:
    """A key that cannot be checked just now: 429 for a limit of the client's, else 503, and when to try again."""
    return OAuthError("temporarily_unavailable", exc.message, 429 if exc.http_status == 429 else 503,
                      math.ceil(exc.retry_after or BUSY_RETRY_S))


def _json_refusal(exc: OAuthError) -> Response:
    """An OAuth endpoint's refusal as RFC 6749 words it."""
    return _retry_after(_json(exc.body(), exc.status, NO_STORE), exc)


def _refusal_page(exc: OAuthError) -> Response:
    """The page for a refusal with no client to send the user back to: 400, or the refusal's own
    status when trying again later may succeed, or for a form from another origin (403)."""
    return _retry_after(_page(error_page(exc), exc.status if exc.retry_after or exc.status == 403 else 400, None),
                        exc)


def _retry_after(answer: Response, exc: OAuthError) -> Response:
    """``answer``, with the refusal's ``Retry-After`` when it has one."""
    if exc.retry_after:
        answer.headers["Retry-After"] = str(exc.retry_after)
    return answer


def _page(text: str, status: int, redirect_uri: str | None) -> Response:
    return Response(text, status, headers=security_headers(redirect_uri), mimetype="text/html")

