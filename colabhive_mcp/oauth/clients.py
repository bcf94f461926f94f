"""Who is asking: OAuth clients known from their metadata document (their ``client_id`` is its
URL) or from a registration (RFC 7591), whose ``client_id`` is the registration itself, sealed.
No client is stored anywhere.

Redirect URIs are matched exactly, except that a loopback ``http`` redirect may use any port
(RFC 8252 §7.3): so no code ever goes to an address the client did not register.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from . import documents
from .errors import OAuthError
from ..loopback import is_loopback
from .sealing import Sealer

MAX_REDIRECT_URIS = 10
MAX_URI_CHARS = 1000
MAX_NAME_CHARS = 100
GRANT_TYPES = frozenset({"authorization_code", "refresh_token"})


@dataclass(frozen=True)
class Client:
    client_id: str
    name: str
    redirect_uris: tuple[str, ...]

    def redirect(self, given: str | None) -> str:
        """The registered redirect URI ``given`` names (the only one, when not given); raises
        ``invalid_request`` otherwise: such a request gets an error page, never a redirect."""
        if given is None and len(self.redirect_uris) == 1:
            return self.redirect_uris[0]
        if given is not None and any(matches(uri, given) for uri in self.redirect_uris):
            return given
        raise OAuthError("invalid_request", "The redirect_uri is not one this application registered.")


def matches(registered: str, given: str) -> bool:
    """Exactly the same URI, or the same loopback http URI on another port (RFC 8252 §7.3)."""
    if registered == given:
        return True
    a, b = urlsplit(registered), urlsplit(given)
    return (a.scheme == b.scheme == "http" and is_loopback(a.hostname) and a.hostname == b.hostname
            and (a.path, a.query) == (b.path, b.query) and not b.fragment and not b.username)


def check_redirect_uri(uri: Any, schemes: tuple[str, ...]) -> str:
    """A redirect URI a client may register: an allowed scheme, http only to loopback, no fragment."""
    if not isinstance(uri, str) or not uri or len(uri) > MAX_URI_CHARS:
        raise OAuthError("invalid_redirect_uri", "Each redirect URI must be a string of at most "
                         f"{MAX_URI_CHARS} characters.")
    parts = urlsplit(uri)
    if parts.scheme not in schemes or parts.fragment or (parts.scheme in ("http", "https") and not parts.hostname):
        raise OAuthError("invalid_redirect_uri", f"Redirect URI {uri[:200]!r} must be absolute, without a fragment, "
                         f"with one of the schemes {', '.join(schemes)}.")
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
        if not isinstance(grants, list) or not set(grants) <= GRANT_TYPES:
            raise OAuthError("invalid_client_metadata", "grant_types may hold authorization_code and refresh_token.")
        if metadata.get("response_types", ["code"]) != ["code"]:
            raise OAuthError("invalid_client_metadata", "response_types may only be [\"code\"].")
        name = _name(metadata.get("client_name"), uris[0])
        client_id = self.sealer.seal({"n": name, "u": uris})
        return {"client_id": client_id, "client_id_issued_at": int(time.time()), "client_name": name,
                "redirect_uris": uris, "grant_types": sorted(set(grants) | {"authorization_code"}),
                "response_types": ["code"], "token_endpoint_auth_method": "none"}

    def find(self, client_id: Any) -> Client:
        """The client a ``client_id`` names; raises ``invalid_client``."""
        if not isinstance(client_id, str) or not client_id:
            raise OAuthError("invalid_request", "client_id is missing.")
        if documents.is_document_url(client_id):
            return self._from_document(client_id)
        record = self.sealer.open(client_id)
        if record is None:
            raise OAuthError("invalid_client", "This client_id was not issued here (register again).", 401)
        return Client(client_id, record["n"], tuple(record["u"]))

    def _from_document(self, url: str) -> Client:
        document = documents.fetch(url, loopback=self.loopback_documents)
        if document.get("client_id") != url:
            raise OAuthError("invalid_client", "The client's metadata document names another client_id.")
        uris = document.get("redirect_uris")
        if not isinstance(uris, list) or not 0 < len(uris) <= MAX_REDIRECT_URIS:
            raise OAuthError("invalid_client", "The client's metadata document lists no redirect_uris.")
        if document.get("token_endpoint_auth_method", "none") != "none":
            raise OAuthError("invalid_client", "This server takes public clients only (token_endpoint_auth_method "
                             "none).")
        try:
            checked = tuple(check_redirect_uri(uri, self.schemes) for uri in uris)
        except OAuthError as exc:
            raise OAuthError("invalid_client", exc.description) from None
        return Client(url, _name(document.get("client_name"), url), checked)


def _name(given: Any, fallback_uri: str) -> str:
    """What the consent page calls the client: its name, else its redirect's (or document's) host."""
    if isinstance(given, str) and given.strip():
        return given.strip()[:MAX_NAME_CHARS]
    return urlsplit(fallback_uri).hostname or fallback_uri[:MAX_NAME_CHARS]
