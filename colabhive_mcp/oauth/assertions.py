"""Signed clients at the token endpoint: RFC 7523 client assertions (``private_key_jwt``).

A client whose metadata document declares ``private_key_jwt`` (ChatGPT's does) proves each token
request with a JWT it signed: issuer and subject its ``client_id``, audience this authorization
server (its token endpoint or its issuer), a short life, and an id (``jti``) used once. The id is
spent last, once the code or refresh token it comes with has passed every other check
(:class:`Proof`): an assertion alone leaves nothing in the store. The key is
one of its document's key set, fetched with the documents' protections and kept as briefly; a key
id the kept set does not hold has the set fetched again, once (at most every
:data:`REFETCH_EVERY_S` per set, so assertions cannot make the server fetch at will). Signatures are
PyJWT's; nothing here checks one by hand.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import jwt
from cachetools import TTLCache

from ..store.interface import InstanceStore
from . import documents
from .clients import Admit, Client, Clients
from .errors import OAuthError, printable
from .marks import use_once
from .metadata import Endpoints

JWT_BEARER = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
MAX_LIFETIME_S = 300.0  # how far ahead an assertion's exp may be
LEEWAY_S = 30.0  # clock skew allowed on exp, iat and nbf
MAX_CHARS = 8192  # an assertion longer than this is refused unread
REFETCH_EVERY_S = 30.0
USED = "oauth-assertions"  # store marks: assertions used, by client and jti
_refetched: TTLCache = TTLCache(maxsize=4096, ttl=REFETCH_EVERY_S)
_lock = threading.Lock()


def refused(why: str) -> OAuthError:
    return OAuthError("invalid_client", f"The client's signed assertion {why}.", 401)


@dataclass(frozen=True)
class Proof:
    """A verified assertion, not yet spent: the client it proves, and how to spend it (once)."""

    client_id: str
    jti: str
    lifetime: float
    store: InstanceStore

    def spend(self) -> None:
        """Mark the assertion used while it lives; raises ``invalid_client`` when it was used before."""
        use_once(self.store, USED, f"{self.client_id} {self.jti}", self.lifetime + LEEWAY_S,
                 refused("was used before (each is used once)"))


class Assertions:
    """Verifies the client assertions of signed clients, and spends each once across the instance."""

    def __init__(self, clients: Clients, endpoints: Endpoints, store: InstanceStore,
                 clock: Callable[[], float] = time.time) -> None:
        self.clients, self.store, self.clock = clients, store, clock
        self.audiences = [endpoints.token_endpoint, endpoints.issuer]

    def verify(self, form: Mapping[str, str], admit: Admit = None) -> Proof | None:
        """The proof a token request's assertion gives of its client (checked against its ``client_id``
        field, when it has one), not yet spent; ``None`` when it carries none. Raises
        ``invalid_client`` (401) for any assertion that does not prove its client. ``admit``: asked
        before a document or a key set is fetched."""
        assertion, kind = form.get("client_assertion"), form.get("client_assertion_type")
        if assertion is None and kind is None:
            return None
        if kind != JWT_BEARER:
            raise refused(f"must be of client_assertion_type {JWT_BEARER}")
        if not assertion or len(assertion) > MAX_CHARS:
            raise refused("is missing or too long")
        try:
            claimed = jwt.decode(assertion, options={"verify_signature": False})
            header = jwt.get_unverified_header(assertion)
        except jwt.PyJWTError:
            raise refused("is not a JWT") from None
        client = self._signed_client(claimed.get("iss"), form.get("client_id"), admit)
        claims = self._verified(assertion, header, client, admit)
        lifetime = claims["exp"] - self.clock()
        if lifetime > MAX_LIFETIME_S + LEEWAY_S:
            raise refused(f"lives too long (at most {int(MAX_LIFETIME_S)} s)")
        return Proof(client.client_id, claims["jti"], max(0.0, lifetime), self.store)

    def _signed_client(self, issuer: Any, client_id: str | None, admit: Admit) -> Client:
        """The signed client an assertion's issuer names, which the request's ``client_id`` (if any) names too."""
        if not isinstance(issuer, str) or (client_id and client_id != issuer):
            raise refused("is not issued by the client_id of the request")
        client = self.clients.find(issuer, admit)
        if not client.signed:
            raise refused("is from a client whose registration does not sign its requests")
        return client

    def _verified(self, assertion: str, header: dict[str, Any], client: Client, admit: Admit) -> dict[str, Any]:
        """The assertion's claims, once its signature, audience, issuer, subject and times hold."""
        algorithm = header.get("alg")
        if algorithm not in client.signing_algs:
            raise refused(f"is signed with {printable(str(algorithm))[:20]}, not {' or '.join(client.signing_algs)}")
        key = self._key(client, header.get("kid"), algorithm, admit)
        try:
            claims = jwt.decode(assertion, key, algorithms=[algorithm], audience=self.audiences,
                                issuer=client.client_id, leeway=LEEWAY_S,
                                options={"require": ["iss", "sub", "aud", "exp", "jti"]})
        except jwt.ExpiredSignatureError:
            raise refused("has expired") from None
        except jwt.InvalidAudienceError:
            raise refused(f"is not for this server (its audience must be {self.audiences[0]})") from None
        except jwt.PyJWTError as exc:
            raise refused(f"does not hold ({type(exc).__name__})") from None
        if claims["sub"] != client.client_id or not isinstance(claims["jti"], str) or not claims["jti"]:
            raise refused("must name the client as its subject and carry a jti")
        if not isinstance(claims["exp"], (int, float)) or isinstance(claims["exp"], bool):
            raise refused("must give exp as a number")
        return claims

    def _key(self, client: Client, kid: Any, algorithm: str, admit: Admit) -> Any:
        """The client's key for ``kid`` (the only one that fits the algorithm, when there is no kid);
        the key set is fetched again, once, when the kept one does not hold it."""
        found = _pick(self._key_set(client, False, admit), kid, algorithm)
        if found is None and client.jwks_uri is not None and _may_refetch(client.jwks_uri):
            found = _pick(self._key_set(client, True, admit), kid, algorithm)
        if found is None:
            raise refused("names a key its client does not publish" if kid else "names no key (kid) of its client")
        return found

    def _key_set(self, client: Client, fresh: bool, admit: Admit) -> dict[str, Any]:
        if client.jwks_uri is None:
            return client.jwks or {}
        return documents.fetch(client.jwks_uri, loopback=self.clients.loopback_documents, fresh=fresh, admit=admit)


def _pick(key_set: dict[str, Any], kid: Any, algorithm: str) -> Any:
    """The key of the set for ``kid`` and ``algorithm``; without a kid, the only key that fits."""
    fitting = []
    for entry in key_set.get("keys") or []:
        if not isinstance(entry, dict) or (kid is not None and entry.get("kid") != kid):
            continue
        if entry.get("use", "sig") != "sig" or entry.get("alg", algorithm) != algorithm:
            continue
        try:
            fitting.append(jwt.PyJWK(entry, algorithm).key)
        except (jwt.PyJWTError, ValueError, TypeError, KeyError):
            continue
    return fitting[0] if len(fitting) == 1 else None


def _may_refetch(url: str) -> bool:
    """Whether the key set at ``url`` may be fetched again now (at most once every :data:`REFETCH_EVERY_S`)."""
    with _lock:
        if url in _refetched:
            return False
        _refetched[url] = True
        return True
