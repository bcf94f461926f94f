"""Codes and tokens: each carries the ColabHive key sealed, with the client, the resource, the
scope (what the person chose on the consent page: :mod:`colabhive_mcp.scopes`) and the expiry. An authorization code is redeemed once, and a refresh token used once (it
hands out a new one), across every worker of the instance.

A redeemed code starts a *grant*, named by the code's digest; its refresh tokens carry that name
and their generation (1, 2, …). The instance store holds one mark per grant, the last generation
used, until the grant's last refresh token would have expired anyway: a code or a refresh token of
a generation already used is refused, however many other grants come and go. A store with no room
for another grant refuses new ones (the code is not redeemed); the grants it holds go on. Nothing
else is stored.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass, replace
from typing import Any, Mapping

from .. import scopes
from ..encoding import b64url
from ..keys import MAX_KEY_CHARS
from ..store.interface import InstanceStore
from . import urls
from .assertions import Proof
from .errors import OAuthError
from .marks import use_once
from .sealing import Sealer

CODE_TTL_S = 120.0
GRANTS = "oauth-grants"  # store marks: each grant's last generation used (0: its code)
OLD_USED = "oauth-used"  # store entries: refresh tokens of before grants had names that were used
VERIFIER = re.compile(r"[A-Za-z0-9._~-]{43,128}\Z")  # RFC 7636 §4.1
ACCESS_PREFIX = "hmcp_at_"
AFFINITY_CHARS = 11  # an access token's affinity: 64 bits of its key's keyed hash, base64url


@dataclass(frozen=True)
class Grant:
    """What a code or a token grants: this key's tools, to this client, at this resource."""

    key: str
    client_id: str
    resource: str
    scope: str = scopes.FULL  # as the token response says it (scopes.spelt)
    signed: bool = False  # the client proves itself with a signed assertion at the token endpoint


@dataclass(frozen=True)
class Refreshing:
    """A refresh token that passed every check, not yet spent: the grant it renews, the name of that
    grant and the token's generation (and the token's text, when it was sealed before grants had names)."""

    grant: Grant
    name: str
    generation: int
    unnamed: str | None = None
    scope: str | None = None  # what the new access token gets, when the client asked for less (RFC 6749 §6)


def digest(text: str) -> str:
    """A short digest that binds a token to a client or a resource without carrying it."""
    return b64url(hashlib.sha256(text.encode()).digest()[:8])


def same_resource(given: str, ours: str) -> bool:
    """RFC 8707 resource match: exact, but scheme and host in any case and a trailing slash allowed."""
    a, b = urls.split(given), urls.split(ours)
    if a is None or b is None:  # (not a URL every parser reads alike)
        return False
    return (a.scheme.lower(), (a.netloc or "").lower(), a.path.rstrip("/"), a.query) == \
        (b.scheme.lower(), b.netloc.lower(), b.path.rstrip("/"), b.query) and not a.fragment


def s256(verifier: str) -> str:
    return b64url(hashlib.sha256(verifier.encode("ascii")).digest())


class Grants:
    def __init__(self, secret: str, resource: str, store: InstanceStore, access_ttl: float, refresh_ttl: float) -> None:
        self.codes = Sealer(secret, "code", "hmcp_code_")
        self.access = Sealer(secret, "access token", "")  # (after the prefix and the key's affinity)
        self._affinity_key = hashlib.sha256(b"colabhive-mcp oauth affinity\n" + secret.encode()).digest()
        self.refresh = Sealer(secret, "refresh token", "hmcp_rt_")
        self.resource, self.store = resource, store
        self.resource_digest = digest(resource)  # what this server's tokens carry (read on every request)
        self.access_ttl, self.refresh_ttl = access_ttl, refresh_ttl

    # -- the authorization code ------------------------------------------------------------------

    def code(self, grant: Grant, redirect_uri: str, challenge: str) -> str:
        return self.codes.seal({"k": grant.key, "c": grant.client_id, "r": grant.resource, **_scoped(grant),
                                "u": redirect_uri, "p": challenge, **_signed(grant)}, CODE_TTL_S)

    def redeem(self, form: Mapping[str, str], proof: Proof | None) -> dict[str, Any]:
        """``grant_type=authorization_code``: tokens for a genuine, unused code, presented by its
        client (proven by its assertion, for a signed client) with its redirect URI and the PKCE
        verifier of its challenge. The proof is spent only once everything else holds."""
        code = self.codes.open(form.get("code"))
        if code is None:
            raise OAuthError("invalid_grant", "The authorization code is invalid or expired.")
        if (proof.client_id if proof else form.get("client_id")) != code["c"]:
            raise OAuthError("invalid_grant", "The authorization code was issued to another client.")
        _check_proof(bool(code.get("a")), proof)
        if form.get("redirect_uri") != code["u"]:
            raise OAuthError("invalid_grant", "redirect_uri differs from the authorization request's.")
        verifier = form.get("code_verifier") or ""
        if not VERIFIER.match(verifier) or not secrets.compare_digest(s256(verifier), code["p"]):
            raise OAuthError("invalid_grant", "The PKCE code_verifier does not match the code_challenge.")
        if not same_resource(code["r"], self.resource):  # (another deployment that shares the secret)
            raise OAuthError("invalid_grant", "The authorization code was issued for another resource.")
        self._check_resource(form.get("resource"), code["r"])
        name = digest(form["code"])
        _spend(proof)
        self._use(name, 0, "The authorization code was already used.")
        return self.tokens(Grant(code["k"], code["c"], code["r"], _scope(code), bool(code.get("a"))), name, 1)

    # -- tokens ------------------------------------------------------------------------------------

    def tokens(self, grant: Grant, name: str, generation: int, scope: str | None = None) -> dict[str, Any]:
        """The token response (RFC 6749 §5.1): an access token (for ``scope``, when less than the grant's)
        and the refresh token of ``generation`` of the grant ``name`` (for the grant's scope, always)."""
        access = grant if scope is None else replace(grant, scope=scope)
        refresh = {**_bound(grant), "f": name, "g": generation, **_signed(grant)}
        return {"access_token": self._access_token(access), "token_type": "Bearer",
                "expires_in": int(self.access_ttl), "scope": access.scope,
                "refresh_token": self.refresh.seal(refresh, self.refresh_ttl)}

    def refresh_grant(self, form: Mapping[str, str], proof: Proof | None) -> Refreshing:
        """``grant_type=refresh_token``: a genuine refresh token of this client (proven by its
        assertion, for a signed client), not yet spent (the caller checks its key with the gateway
        first, then :meth:`rotate`)."""
        text = form.get("refresh_token")
        token = self.refresh.open(text)
        if token is None:
            raise OAuthError("invalid_grant", "The refresh token is invalid or expired.")
        client_id = proof.client_id if proof else form.get("client_id") or ""
        if not secrets.compare_digest(digest(client_id), token["c"]):
            raise OAuthError("invalid_grant", "The refresh token was issued to another client.")
        _check_proof(bool(token.get("a")), proof)
        if token["r"] != self.resource_digest:
            raise OAuthError("invalid_target", "The refresh token is for another resource.")
        self._check_resource(form.get("resource"), self.resource)
        granted = _scope(token)
        held = scopes.parse(granted)
        if held is None:  # (a later release's scope: nothing it does not know is renewed)
            raise OAuthError("invalid_grant", "The refresh token grants a scope this server does not know.")
        asked = scopes.asked(form.get("scope"), otherwise=held)
        if not scopes.covers(held, asked):
            raise OAuthError("invalid_scope", "A refresh cannot widen the scope.")
        narrower = scopes.spelt(asked) if asked != held else None  # for the access token; the refresh token keeps all
        grant = Grant(token["k"], client_id, self.resource, granted, bool(token.get("a")))
        assert isinstance(text, str)  # (it opened)
        if "f" not in token:  # sealed before grants had names: its own grant, of generation 0
            return Refreshing(grant, digest(text), 0, unnamed=text, scope=narrower)
        return Refreshing(grant, token["f"], int(token["g"]), scope=narrower)

    def rotate(self, refreshing: Refreshing, proof: Proof | None) -> dict[str, Any]:
        """Spend the refresh token :meth:`refresh_grant` checked (once, across the instance), and the
        proof, for new tokens of the next generation."""
        _spend(proof)
        if refreshing.unnamed is not None:  # (until the last such token expires, a use the old releases
            self._use_old(refreshing.unnamed)  # marked counts too)
        self._use(refreshing.name, refreshing.generation, "The refresh token was already used.")
        return self.tokens(refreshing.grant, refreshing.name, refreshing.generation + 1, refreshing.scope)

    def fits(self, grant: Grant) -> bool:
        """Whether an access token for ``grant`` has a key's shape (at most 255 characters, which
        nginx's site buckets): a key of up to about 90 characters does (80 with the affinity)."""
        return len(ACCESS_PREFIX + self.access.seal(_bound(grant), self.access_ttl)) <= MAX_KEY_CHARS

    def affinity(self, key: str) -> str:
        """What every access token of ``key`` begins with after its prefix (11 characters): the site
        balances a key's tokens by it, so that they reach one instance however often they are renewed.
        Nobody without the secret can tell a key from it."""
        return b64url(hmac.new(self._affinity_key, key.encode(), hashlib.sha256).digest()[:8])

    def _access_token(self, grant: Grant) -> str:
        """The access token of ``grant``: with its key's affinity, unless that would make it longer than
        a key may be (a grant for a long key, made before tokens had one, goes on without)."""
        sealed = self.access.seal(_bound(grant), self.access_ttl)
        token = ACCESS_PREFIX + self.affinity(grant.key) + sealed
        return token if len(token) <= MAX_KEY_CHARS else ACCESS_PREFIX + sealed

    def key_of(self, access_token: str) -> tuple[str, frozenset[str]]:
        """The key an access token carries, and the scopes it grants; raises ``invalid_token`` saying
        why it is not usable here."""
        body = access_token[len(ACCESS_PREFIX):] if access_token.startswith(ACCESS_PREFIX) else ""
        tag, sealed = body[:AFFINITY_CHARS], body[AFFINITY_CHARS:]
        payload = self.access.read(sealed)
        if payload is not None and not hmac.compare_digest(tag, self.affinity(str(payload.get("k")))):
            payload = None
        if payload is None:  # (sealed by the release before tokens had an affinity: they live an hour)
            payload = self.access.read(body)
        if payload is None:
            raise OAuthError("invalid_token", "The access token is not one this server issued.", 401)
        if self.access.expired(payload):
            raise OAuthError("invalid_token", "The access token has expired.", 401)
        if payload.get("r") != self.resource_digest:
            raise OAuthError("invalid_token", "The access token was issued for another resource.", 401)
        granted = scopes.parse(_scope(payload))
        if granted is None:  # (a later release's scope: nothing it does not know is granted)
            raise OAuthError("invalid_token", "The access token grants a scope this server does not know.", 401)
        return payload["k"], granted

    def _check_resource(self, given: str | None, bound: str) -> None:
        if given and not same_resource(given, bound):
            raise OAuthError("invalid_target", "The resource differs from the one the grant is for.")

    def _use_old(self, refresh_token: str) -> None:
        """Mark a refresh token of before grants had names used, where the old releases looked."""
        if not self.store.add(OLD_USED, hashlib.sha256(refresh_token.encode()).hexdigest(), True,
                              self.refresh_ttl + 1):
            raise OAuthError("invalid_grant", "The refresh token was already used.")

    def _use(self, name: str, generation: int, refusal: str) -> None:
        """Mark ``generation`` of the grant ``name`` used across the instance, for as long as the
        refresh token it hands out lasts; raises ``invalid_grant`` when it already was."""
        use_once(self.store, GRANTS, name, self.refresh_ttl + 1, OAuthError("invalid_grant", refusal), generation)


def _signed(grant: Grant) -> dict[str, Any]:
    """What a code or refresh token of a signed client carries, so that its use needs the client's proof."""
    return {"a": 1} if grant.signed else {}


def _spend(proof: Proof | None) -> None:
    if proof is not None:
        proof.spend()


def _check_proof(signed: bool, proof: Proof | None) -> None:
    """A signed client's code or refresh token is used with its assertion; a public one's without."""
    if signed and proof is None:
        raise OAuthError("invalid_client", "This application signs its token requests: a client_assertion "
                         "(private_key_jwt) is required.", 401)
    if proof is not None and not signed:
        raise OAuthError("invalid_client", "This grant is a public client's: it is used without a "
                         "client_assertion.", 401)


def _bound(grant: Grant) -> dict[str, Any]:
    """What a token of ``grant`` carries: the key, digests of the client and the resource, its scope."""
    return {"k": grant.key, "c": digest(grant.client_id), "r": digest(grant.resource), **_scoped(grant)}


LETTERS = {scopes.READ: "r", scopes.WRITE: "w", scopes.BILLING: "b"}  # a narrower scope, as a token carries it


def _scoped(grant: Grant) -> dict[str, Any]:
    """A narrower scope than everything, in a letter each (a token stays short: nginx buckets it up to
    255 characters); nothing for everything."""
    granted = scopes.parse(grant.scope) or frozenset()
    return {} if scopes.FULL in granted else {"s": "".join(LETTERS[s] for s in scopes.SUPPORTED if s in granted)}


def _scope(sealed: Mapping[str, Any]) -> str:
    """The scope a code or token carries (none: everything; a code of the release before: the scope's text)."""
    letters = sealed.get("s")
    if not letters or letters == scopes.FULL:
        return scopes.FULL
    named = [scope for scope, letter in LETTERS.items() if letter in letters]
    return " ".join(named) if len(named) == len(letters) else str(letters)  # an unknown letter stays unknown
