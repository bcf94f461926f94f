"""The authorization request and the consent page that answers it.

``GET /authorize`` is checked in two steps (RFC 6749 §4.1.2.1): a request whose client or
redirect URI is wrong gets an error page and never a redirect (no open redirect); any other
fault goes back to the client's redirect URI as an error, with ``state`` and ``iss``. A good
request gets a small page: which application asks, where it will be sent, one field for the key.

The page holds the request in a sealed, expiring form token, so the POST that answers it needs
no cookie and cannot be forged for another request; it works without JavaScript, and its headers
forbid framing, caching, referrers to other sites and any resource but its own inline style.
"""

from __future__ import annotations

import base64
import hashlib
import html
from dataclasses import dataclass
from typing import Any, Mapping
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..keys import KEYS_URL
from .clients import Client, Clients
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

    def fields(self) -> dict[str, Any]:
        """What the form token carries, to rebuild the request on the POST."""
        return {"c": self.client.client_id, "u": self.redirect_uri, "t": self.state, "p": self.challenge,
                "r": self.resource}


class Redirected(Exception):
    """A fault reported to the client at its (checked) redirect URI."""

    def __init__(self, error: OAuthError, redirect_uri: str, state: str | None) -> None:
        super().__init__(error.description)
        self.error, self.redirect_uri, self.state = error, redirect_uri, state


class Consent:
    def __init__(self, secret: str, clients: Clients, endpoints: Endpoints) -> None:
        self.forms = Sealer(secret, "consent form", "hmcp_form_")
        self.clients, self.endpoints = clients, endpoints

    def request(self, params: Mapping[str, str]) -> AuthorizationRequest:
        """The authorization request in ``params``; raises :class:`OAuthError` (an error page) for a
        bad client or redirect URI, :class:`Redirected` for the rest."""
        client = self.clients.find(params.get("client_id"))
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
        return AuthorizationRequest(client, redirect_uri, state, challenge, self.endpoints.resource)

    def form_token(self, request: AuthorizationRequest) -> str:
        return self.forms.seal(request.fields(), FORM_TTL_S)

    def submitted(self, token: str | None) -> AuthorizationRequest:
        """The request a consent form carries; raises ``invalid_request`` when it expired or was altered."""
        fields = self.forms.open(token)
        if fields is None:
            raise OAuthError("invalid_request", "This page has expired: go back to the application and connect "
                             "again.")
        client = self.clients.find(fields["c"])
        return AuthorizationRequest(client, fields["u"], fields["t"], fields["p"], fields["r"])

    def redirect(self, redirect_uri: str, state: str | None, **params: str) -> str:
        """``redirect_uri`` with ``params``, ``state`` and ``iss`` (RFC 9207) added to its query."""
        parts = urlsplit(redirect_uri)
        query = parse_qsl(parts.query, keep_blank_values=True) + list(params.items())
        query += ([("state", state)] if state is not None else []) + [("iss", self.endpoints.issuer)]
        return urlunsplit(parts._replace(query=urlencode(query)))


# -- the page ------------------------------------------------------------------------------------

STYLE = ("body{font:16px/1.5 system-ui,sans-serif;max-width:32em;margin:3em auto;padding:0 1em;color:#222}"
         "h1{font-size:1.4em}.who{background:#f4f4f6;border-radius:8px;padding:.8em 1em}"
         ".error{color:#a00;font-weight:600}label{display:block;margin:1.2em 0 .3em;font-weight:600}"
         "input[type=password]{width:100%;box-sizing:border-box;padding:.5em;font:inherit}"
         "button{margin:1em .5em 0 0;padding:.5em 1.2em;font:inherit}small{color:#555}")
STYLE_HASH = base64.b64encode(hashlib.sha256(STYLE.encode()).digest()).decode()


def security_headers(redirect_uri: str | None) -> dict[str, str]:
    """What a page that takes a secret sends: no framing, no caching, no referrer to other sites (with
    none at all, browsers post the form with ``Origin: null``, which the edge refuses), nothing loaded
    but its own style; a form may post here, and (Chromium checks redirects too) go on to the client."""
    targets = "'self'" + (f" {_source(redirect_uri)}" if redirect_uri else "")
    return {"Content-Security-Policy": f"default-src 'none'; style-src 'sha256-{STYLE_HASH}'; form-action {targets}; "
                                       "frame-ancestors 'none'; base-uri 'none'",
            "X-Frame-Options": "DENY", "Cache-Control": "no-store", "Pragma": "no-cache",
            "Referrer-Policy": "same-origin", "X-Content-Type-Options": "nosniff"}


def _source(uri: str) -> str:
    """The CSP source of a redirect URI: its origin, or its scheme for an app's own scheme."""
    parts = urlsplit(uri)
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme in ("http", "https") else f"{parts.scheme}:"


def page(request: AuthorizationRequest, form_token: str, error: str | None = None) -> str:
    """The consent page: who asks, what it gets, the key field."""
    e = html.escape
    host = urlsplit(request.redirect_uri).hostname or urlsplit(request.redirect_uri).scheme
    notice = f'<p class="error" role="alert">{e(error)}</p>' if error else ""
    return _document("Connect to ColabHive", f"""<h1>Connect {e(request.client.name)} to ColabHive</h1>
<div class="who"><p><b>{e(request.client.name)}</b> asks to use the ColabHive tools of the API key you enter
below, as you could yourself. When you allow it, you are sent back to <b>{e(host)}</b>.</p></div>
{notice}<form method="post" action="/authorize">
<input type="hidden" name="request" value="{e(form_token)}">
<label for="key">Your ColabHive API key</label>
<input type="password" id="key" name="key" autocomplete="off" required placeholder="hive_...">
<small>Find it, or make one, at <a href="{KEYS_URL}">{KEYS_URL}</a>. The key stays sealed
inside the access the application gets; revoke it there to end that access.</small><br>
<button type="submit" name="action" value="allow">Allow</button>
<button type="submit" name="action" value="deny" formnovalidate>Deny</button>
</form>""")


def error_page(error: OAuthError) -> str:
    """A request that cannot be answered at any redirect URI: said here, and nowhere else (the
    sentence for the user, the RFC's error code for the application's makers)."""
    return _document("Cannot connect", f"<h1>This application cannot connect</h1>\n<p class=\"error\">"
                                       f"{html.escape(error.description)}</p>\n<p>Go back to the application and "
                                       "try again; if it keeps failing, tell its makers.</p>\n"
                                       f"<p><small>Error code: <code>{html.escape(error.error)}</code></small></p>")


def _document(title: str, body: str) -> str:
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width,initial-scale=1"><title>{title}</title>'
            f"<style>{STYLE}</style></head><body>\n{body}\n</body></html>\n")
