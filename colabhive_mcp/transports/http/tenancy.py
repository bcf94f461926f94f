"""Whose request it is: the key it carries (the configured one, in single-tenant mode) and that
key's tenant, held while the request is served, once the gateway has accepted the key.

With OAuth on, a request may carry an access token instead: it is opened back into its key here,
first, so that everything after (tenant, limits, sessions, logs) is the key's. A request with no
credential then gets the challenge that starts a host's OAuth flow; one with a key never does."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from ... import scopes
from ...keys import MAX_KEY_CHARS, MIN_KEY_CHARS, ApiKey, KeyRejected, mistake, well_formed
from ...oauth import OAuthError
from ...oauth.errors import refused
from ...oauth.grants import ACCESS_PREFIX, Grants
from ...oauth.metadata import Endpoints
from ...protocol import jsonrpc
from ...settings.config import Config
from ...store.interface import InstanceStore
from ...tenants.pool import TenantPool
from ...tenants.shared import Instance
from ...tenants.tenant import Tenant
from .admission import Admission
from .incoming import Credential, Headers, HttpRequest
from .outgoing import INVALID_TOKEN, HttpError, JsonAnswer

KEY_SHAPE = f"{MIN_KEY_CHARS} to {MAX_KEY_CHARS} characters of A-Z a-z 0-9 . _ ~ + / - ="


class Tenancy:
    def __init__(self, config: Config, store: InstanceStore, spent: InstanceStore | None = None) -> None:
        """``store``: the instance's, where calls kept for a retry, rejected keys, the limits' counts
        and the last good manifests are shared; ``spent``: where what keys spend is counted, when that
        is to outlive the instance (by default, ``store``)."""
        self.instance = Instance.of(config, store, spent)
        self.limits = self.instance.limits
        self.single_key = ApiKey.of(config.api_key or "")
        self.single = Tenant(config, self.single_key, self.instance) if config.single_tenant and config.api_key else None
        self.admission = Admission(config, self.limits)  # who may hold a thread for long (a key's check too)
        self.pool = None if config.single_tenant else TenantPool(
            config, factory=lambda c, key: Tenant(c, key, self.instance), store=store, limits=self.limits,
            places=self.admission)
        oauth = config.oauth_on and not config.single_tenant
        self.endpoints = Endpoints.of(config.public_url) if oauth and config.public_url else None
        self.grants = Grants(config.session_secret or "", config.public_url or "", store, config.oauth_access_token_ttl,
                             config.oauth_refresh_token_ttl) if self.endpoints is not None else None

    def key(self, request: HttpRequest) -> ApiKey:
        """The request's key (see :meth:`credential`)."""
        return self.credential(request).key

    def credential(self, request: HttpRequest) -> Credential:
        """The request's key (made once, here), or the configured one in single-tenant mode, and the
        scopes of the OAuth grant it was sent with; none is a 401 (with OAuth on, the challenge that
        starts a host's OAuth flow)."""
        if self.single is not None:
            return Credential(self.single_key)
        secret = credential(request.headers)
        if secret is None:
            how = "connect with OAuth, or send" if self.endpoints is not None else "send"
            raise HttpError(401, jsonrpc.INVALID_REQUEST, f"Authentication required: {how} your ColabHive API key as "
                            "'Authorization: Bearer <key>' or 'X-API-Key'",
                            {"WWW-Authenticate": self.endpoints.challenge() if self.endpoints is not None else "Bearer"})
        if self.endpoints is not None and secret.startswith(ACCESS_PREFIX):
            return self._token_credential(secret)
        return Credential(ApiKey.of(secret))

    def _token_credential(self, token: str) -> Credential:
        """The key an access token carries, and what its grant gives of it; a 401 with the challenge
        when it is not usable here."""
        assert self.grants is not None and self.endpoints is not None
        try:
            key, granted = self.grants.key_of(token)
        except OAuthError as exc:
            refused(exc)
            raise HttpError(401, jsonrpc.INVALID_REQUEST, exc.description,
                            {"WWW-Authenticate": self.endpoints.challenge("invalid_token")}) from None
        return Credential(ApiKey.of(key), None if scopes.FULL in granted else granted)

    def step_up(self, response: JsonAnswer, answer: dict[str, Any]) -> JsonAnswer:
        """``response`` (of ``answer``), with the challenge that asks for more (RFC 6750
        ``insufficient_scope``, as the MCP authorization spec's step-up does) when it refuses a call its
        OAuth grant does not cover."""
        error = answer.get("error")
        if self.endpoints is not None and error is not None and error.get("code") == jsonrpc.INSUFFICIENT_SCOPE:
            response.headers["WWW-Authenticate"] = self.endpoints.challenge("insufficient_scope", error["data"]["scope"])
        return response

    @contextlib.contextmanager
    def tenant(self, key: ApiKey, address: str) -> Iterator[Tenant]:
        """The key's tenant, once the gateway has accepted the key (``address``: the client's, see
        :func:`.incoming.client_address`). Raises :class:`KeyRejected` for a rejected one, and
        :class:`LimitReached` for one that cannot be checked now (the edge: 401; 429 or 503)."""
        if self.single is not None:  # a check that waits for the gateway holds a place for long requests
            with self.admission.by_key(key.digest) if self.single.manifest.asks else contextlib.nullcontext():
                self.single.verify()
            yield self.single
        else:
            assert self.pool is not None
            with self.pool.tenant(key, address) as tenant:
                yield tenant

    def not_refused(self, key: ApiKey) -> None:
        """A 401 for a key the gateway rejected lately (asking nobody: for what needs no tenant)."""
        if self.pool is not None:
            refusal = self.pool.refusal(key)
        else:
            refusal = self.single.rejection if self.single is not None else None
        if refusal is not None:
            raise KeyRejected(refusal.status, refusal.detail)  # a new one: this thread's to raise

    def check(self, key: ApiKey, address: str) -> None:
        """Only a key the gateway accepts gets further (a stream, an operator endpoint)."""
        with self.tenant(key, address):
            pass


def credential(headers: Headers) -> str | None:
    """The request's key (or access token): a bearer token, or ``X-API-Key``, or both when they are the
    same; ``None`` when it carries neither. Every other form (another scheme, a token of another shape,
    two keys) is a 401: nginx's site buckets its limits by exactly these tokens, so no other spelling
    of a key gets past them."""
    authorization, api_key = headers.get("Authorization") or None, headers.get("X-API-Key") or None
    if authorization is None and api_key is None:
        return None
    if authorization is not None:
        scheme, _, token = authorization.partition(" ")
        token = token.lstrip(" ")
        if scheme.lower() != "bearer" or not well_formed(token):
            raise HttpError(401, jsonrpc.INVALID_REQUEST, "The Authorization header must be 'Bearer <key>', the "
                            f"key being your ColabHive API key ({KEY_SHAPE}){_slip(token)}", INVALID_TOKEN)
        if api_key is not None and api_key != token:
            raise HttpError(401, jsonrpc.INVALID_REQUEST, "Authorization and X-API-Key carry different keys: send "
                            "one", INVALID_TOKEN)
        return token
    assert api_key is not None
    if not well_formed(api_key):
        raise HttpError(401, jsonrpc.INVALID_REQUEST, f"X-API-Key must be your ColabHive API key ({KEY_SHAPE})"
                        f"{_slip(api_key)}", INVALID_TOKEN)
    return api_key


def _slip(text: str) -> str:
    """The known slip a malformed credential is, as a clause (the placeholder, quotes, a variable)."""
    slip = mistake(text)
    return f": {slip}" if slip else ""
