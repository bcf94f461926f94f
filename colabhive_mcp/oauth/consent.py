"""The authorization request, and the consent form that answers it.

``GET /authorize`` is checked in two steps (RFC 6749 §4.1.2.1): a request whose client or
redirect URI is wrong gets an error page and never a redirect (no open redirect); any other
fault goes back to the client's redirect URI as an error, with ``state`` and ``iss``. A good
request gets the consent page (:mod:`colabhive_mcp.oauth.pages`), where the person also chooses
what the application gets (its scope: :mod:`colabhive_mcp.scopes`), the scope it asked for chosen
to begin with.

The page holds the request in a sealed, expiring form token, so the POST that answers it needs
no cookie and cannot be forged for another request; it works without JavaScript.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from .. import scopes
from .clients import Admit, Client, Clients
from .errors import OAuthError
from .grants import same_resource
from .metadata import Endpoints
from .sealing import Sealer

FORM_TTL_S = 900.0
CHALLENGE_CHARS = 43  # a base64url SHA-256, unpadded


@dataclass(frozen=True)
class AuthorizationRequest:
    client: Client
    redirect_uri: str
    state: str | None
    challenge: str
    resource: str
    scope: str = scopes.FULL  # what the application asks for (the person chooses on the page)

    def fields(self) -> dict[str, Any]:
        """What the form token carries, to rebuild the request on the POST."""
        return {"c": self.client.client_id, "u": self.redirect_uri, "t": self.state, "p": self.challenge,
                "r": self.resource, "s": self.scope}

    def granted(self, choice: str | None) -> str:
        """The scope the person chose on the page (:data:`colabhive_mcp.scopes.CHOICES`), else the one asked for."""
        return next((scope for value, scope, _ in scopes.CHOICES if value == choice), self.scope)


class Redirected(Exception):
    """A fault reported to the client at its (checked) redirect URI."""

    def __init__(self, error: OAuthError, redirect_uri: str, state: str | None) -> None:
        super().__init__(error.description)
        self.error, self.redirect_uri, self.state = error, redirect_uri, state


class Consent:
    def __init__(self, secret: str, clients: Clients, endpoints: Endpoints) -> None:
        self.forms = Sealer(secret, "consent form", "hmcp_form_")
        self.clients, self.endpoints = clients, endpoints

    def request(self, params: Mapping[str, str], admit: Admit = None) -> AuthorizationRequest:
        """The authorization request in ``params``; raises :class:`OAuthError` (an error page) for a
        bad client or redirect URI, :class:`Redirected` for the rest. ``admit``: asked before a
        client's document is fetched."""
        client = self.clients.find(params.get("client_id"), admit)
        redirect_uri = client.redirect(params.get("redirect_uri"))
        state = params.get("state")

        def refuse(error: str, description: str) -> Redirected:
            return Redirected(OAuthError(error, description), redirect_uri, state)

        if params.get("response_type") != "code":
            raise refuse("unsupported_response_type", "Only response_type=code is supported.")
        challenge = params.get("code_challenge") or ""
        if params.get("code_challenge_method") != "S256" or len(challenge) != CHALLENGE_CHARS:
            raise refuse("invalid_request", "PKCE is required: code_challenge with code_challenge_method=S256.")
        resource = params.get("resource") or self.endpoints.resource
        if not same_resource(resource, self.endpoints.resource):
            raise refuse("invalid_target", f"This server grants access to {self.endpoints.resource} only.")
        asked = scopes.spelt(scopes.asked(params.get("scope")))
        return AuthorizationRequest(client, redirect_uri, state, challenge, self.endpoints.resource, asked)

    def form_token(self, request: AuthorizationRequest) -> str:
        return self.forms.seal(request.fields(), FORM_TTL_S)

    def submitted(self, token: str | None) -> AuthorizationRequest:
        """The request a consent form carries; raises ``invalid_request`` when it expired or was altered."""
        fields = self.forms.open(token)
        if fields is None:
            raise OAuthError("invalid_request", "The consent form expired or was altered.",
                             plain="This page has expired: go back to the application and connect again.")
        client = self.clients.find(fields["c"])
        return AuthorizationRequest(client, fields["u"], fields["t"], fields["p"], fields["r"],
                                    fields.get("s") or scopes.FULL)

    def redirect(self, redirect_uri: str, state: str | None, **params: str) -> str:
        """``redirect_uri`` with ``params``, ``state`` and ``iss`` (RFC 9207) added to its query."""
        parts = urlsplit(redirect_uri)
        query = parse_qsl(parts.query, keep_blank_values=True) + list(params.items())
        query += ([("state", state)] if state is not None else []) + [("iss", self.endpoints.issuer)]
        return urlunsplit(parts._replace(query=urlencode(query)))
