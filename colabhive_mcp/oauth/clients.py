"""Who is asking: OAuth clients known from their metadata document (their ``client_id`` is its
URL) or from a registration (RFC 7591), whose ``client_id`` is the registration itself, sealed.
No client is stored anywhere.

A registered client is public (``token_endpoint_auth_method: none``): a registration asking for
more is answered with what is honoured (RFC 7591 §3.2.1 lets a server). A document may declare a
public client, or one that signs its token requests (``private_key_jwt`` with its keys at
``jwks_uri`` or in ``jwks``, RFC 7523): its requests are then verified
(:mod:`colabhive_mcp.oauth.assertions`).

Redirect URIs are matched exactly, except that a loopback ``http`` redirect may use any port
(RFC 8252 §7.3): so no code ever goes to an address the client did not register.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable
from urllib.parse import urlsplit

from . import documents, urls
from .errors import OAuthError, printable
from ..loopback import is_loopback
from .sealing import Sealer

Admit = Callable[[], OAuthError | None] | None  # asked before a document is fetched: its refusal, or None

MAX_REDIRECT_URIS = 10
MAX_URI_CHARS = 1000
MAX_NAME_CHARS = 100
GRANT_TYPES = frozenset({"authorization_code", "refresh_token"})
PUBLIC, SIGNED = "none", "private_key_jwt"  # the token endpoint's authentication methods
# signature algorithms a signed client may use: asymmetric only (PyJWT with cryptography)
SIGNING_ALGS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")


@dataclass(frozen=True)
class Client:
    client_id: str
    name: str
    redirect_uris: tuple[str, ...]
    auth_method: str = PUBLIC
    signing_algs: tuple[str, ...] = ()  # a signed client's: the one its document names, else all supported
    jwks_uri: str | None = None
    jwks: dict[str, Any] | None = None  # a signed client's keys, when its document holds them

    @property
    def signed(self) -> bool:
        """Whether the client proves itself with a signed assertion at the token endpoint."""
        return self.auth_method == SIGNED

    @property
    def verified_host(self) -> str | None:
        """The host a metadata-document client's document lives on (what vouches for its name)."""
        return urlsplit(self.client_id).hostname if documents.is_document_url(self.client_id) else None

    def redirect(self, given: str | None) -> str:
        """The registered redirect URI ``given`` names (the only one, when not given); raises
        ``invalid_request`` otherwise: such a request gets an error page, never a redirect."""
        if given is None and len(self.redirect_uris) == 1:
            return self.redirect_uris[0]
        if given is not None and any(matches(uri, given) for uri in self.redirect_uris):
            return given
        raise OAuthError("invalid_request", "The redirect_uri is not one this application registered.",
                         plain="The application asked to send you to an address it did not register; for your "
                               "safety, you are not sent there.")


def matches(registered: str, given: str) -> bool:
    """Exactly the same URI, or the same loopback http URI on another port (RFC 8252 §7.3)."""
    if registered == given:
        return True
    a, b = urls.split(registered), urls.split(given)
    if a is None or b is None:
        return False
    return (a.scheme == b.scheme == "http" and is_loopback(a.hostname) and a.hostname == b.hostname
            and (a.path, a.query) == (b.path, b.query) and not b.fragment and not b.username)


def check_redirect_uri(uri: Any, schemes: tuple[str, ...]) -> str:
    """A redirect URI a client may register: an allowed scheme, http only to loopback, no fragment,
    and nothing URL parsers read differently (so the host the consent page names is the one a
    browser goes to): printable ASCII without backslashes, and for http(s) a plain host, no user part."""
    if not isinstance(uri, str) or not uri or len(uri) > MAX_URI_CHARS:
        raise OAuthError("invalid_redirect_uri", "Each redirect URI must be a string of at most "
                         f"{MAX_URI_CHARS} characters.")
    parts = urls.split(uri)
    if parts is None:
        raise OAuthError("invalid_redirect_uri", f"Redirect URI {uri[:200]!r} is one that browsers and URL parsers "
                         "read differently (spaces, backslashes, control or non-ASCII characters, a bad port or "
                         "IPv6 literal).")
    if parts.scheme not in schemes or parts.fragment or (parts.scheme in ("http", "https") and not urls.plain_host(parts)):
        raise OAuthError("invalid_redirect_uri", f"Redirect URI {uri[:200]!r} must be absolute, without a fragment, "
                         f"with one of the schemes {', '.join(schemes)}, and name a plain host (no user part).")
    if parts.scheme == "http" and not is_loopback(parts.hostname):
        raise OAuthError("invalid_redirect_uri", f"Redirect URI {uri[:200]!r}: plain http only to this machine "
                         "(localhost, 127.0.0.1 or [::1]); use https.")
    return uri


class Clients:
    def __init__(self, secret: str, schemes: tuple[str, ...], *, loopback_documents: bool = False) -> None:
        self.sealer = Sealer(secret, "client", "hmcp_client_")
        self.schemes = schemes
        self.loopback_documents = loopback_documents

    def register(self, metadata: Any) -> dict[str, Any]:
        """RFC 7591 registration of a public client: its answer, whose ``client_id`` is the record."""
        if not isinstance(metadata, dict):
            raise OAuthError("invalid_client_metadata", "The registration must be a JSON object.")
        uris = metadata.get("redirect_uris")
        if not isinstance(uris, list) or not 0 < len(uris) <= MAX_REDIRECT_URIS:
            raise OAuthError("invalid_redirect_uri", f"redirect_uris must list 1 to {MAX_REDIRECT_URIS} URIs.")
        uris = [check_redirect_uri(uri, self.schemes) for uri in uris]
        grants = metadata.get("grant_types", ["authorization_code"])
        if not isinstance(grants, list) or not all(isinstance(grant, str) for grant in grants):
            raise OAuthError("invalid_client_metadata", "grant_types must be a list of grant types.")
        responses = metadata.get("response_types", ["code"])
        if not isinstance(responses, list) or "code" not in responses:
            raise OAuthError("invalid_client_metadata", "response_types must include \"code\" (the only one served).")
        name = _name(metadata.get("client_name"), uris[0])
        client_id = self.sealer.seal({"n": name, "u": uris})
        return {"client_id": client_id, "client_id_issued_at": int(time.time()), "client_name": name,
                "redirect_uris": uris, "grant_types": sorted(set(grants) & GRANT_TYPES | {"authorization_code"}),
                "response_types": ["code"], "token_endpoint_auth_method": PUBLIC}

    def find(self, client_id: Any, admit: Admit = None) -> Client:
        """The client a ``client_id`` names; raises ``invalid_client``. ``admit``: asked before a
        document is fetched (:func:`colabhive_mcp.oauth.documents.fetch`)."""
        if not isinstance(client_id, str) or not client_id:
            raise OAuthError("invalid_request", "client_id is missing.",
                             plain="The application did not say which application it is, so it cannot connect.")
        if documents.is_document_url(client_id):
            return self._from_document(client_id, admit)
        record = self.sealer.open(client_id)
        if record is None:
            raise OAuthError("invalid_client", "This client_id was not issued here (register again).", 401,
                             plain="This server does not know this application (it may have been set up for another "
                                   "server): remove the connection in the application and add it again.")
        # (checked again: it may have been registered before the check was as strict as it is now)
        return Client(client_id, _name(record["n"], record["u"][0]), self._checked(record["u"]))

    def _checked(self, uris: list[Any]) -> tuple[str, ...]:
        """A client's redirect URIs, each one it may have; raises ``invalid_client`` for any other."""
        try:
            return tuple(check_redirect_uri(uri, self.schemes) for uri in uris)
        except OAuthError as exc:
            raise OAuthError("invalid_client", exc.description) from None

    def _from_document(self, url: str, admit: Admit) -> Client:
        document = documents.fetch(url, loopback=self.loopback_documents, admit=admit)
        if document.get("client_id") != url:
            raise OAuthError("invalid_client", "The client's metadata document names another client_id.")
        uris = document.get("redirect_uris")
        if not isinstance(uris, list) or not 0 < len(uris) <= MAX_REDIRECT_URIS:
            raise OAuthError("invalid_client", "The client's metadata document lists no redirect_uris.")
        checked = self._checked(uris)
        name = _name(document.get("client_name"), url)
        method = document.get("token_endpoint_auth_method", PUBLIC)
        if method == PUBLIC:
            return Client(url, name, checked)
        if method != SIGNED:
            raise OAuthError("invalid_client", "The application's metadata document asks for a way of signing in "
                             f"this server does not offer ({printable(str(method))[:40]}): it accepts public clients and signed "
                             "ones (private_key_jwt).")
        return Client(url, name, checked, SIGNED, _signing_algs(document), *_keys(document, self.loopback_documents))


def _signing_algs(document: dict[str, Any]) -> tuple[str, ...]:
    """The algorithms a signed client's assertions may use: the one its document names, else all supported."""
    named = document.get("token_endpoint_auth_signing_alg")
    if named is None:
        return SIGNING_ALGS
    if named not in SIGNING_ALGS:
        raise OAuthError("invalid_client", f"The application's metadata document names a signing algorithm this "
                         f"server does not accept ({printable(str(named))[:20]}); it accepts {', '.join(SIGNING_ALGS)}.")
    return (named,)


def _keys(document: dict[str, Any], loopback: bool) -> tuple[str | None, dict[str, Any] | None]:
    """Where a signed client's keys are: its ``jwks_uri`` (checked as a document's URL is), or its ``jwks``."""
    uri, keys = document.get("jwks_uri"), document.get("jwks")
    if isinstance(uri, str) and keys is None:
        documents.check_url(uri, loopback)
        return uri, None
    if isinstance(keys, dict) and isinstance(keys.get("keys"), list) and uri is None:
        return None, keys
    raise OAuthError("invalid_client", "The application's metadata document signs its requests but gives no keys "
                     "(one jwks_uri, or jwks).")


def _name(given: Any, fallback_uri: str) -> str:
    """What the consent page (and the log) calls the client: its name, without control, format or
    line-breaking characters (no forged log lines, no text turned around), else its redirect's (or
    document's) host."""
    name = " ".join(printable(given).split()) if isinstance(given, str) else ""
    return name[:MAX_NAME_CHARS] or urlsplit(fallback_uri).hostname or fallback_uri[:MAX_NAME_CHARS]
