"""The pages a person sees: the consent page and the error page, in plain words.

The consent page says who asks as far as it is known: a client known by its metadata document is
named with the host its document lives on (that host vouches for the name); a registered client's
name is marked as the application's own word. It says where the answer goes (a website, or an
application on the person's own computer), what is granted, for how long, and how to end it. An
error page says what happened and what to do, in one sentence each; the RFC's error code, for the
application's makers, stands small beneath. No page loads anything but its own inline style.
"""

from __future__ import annotations

import base64
import hashlib
import html
from dataclasses import dataclass
from urllib.parse import urlsplit

from .. import scopes
from ..keys import KEYS_URL
from ..loopback import is_loopback
from .clients import Client
from .errors import OAuthError

STYLE = ("body{font:16px/1.5 system-ui,sans-serif;max-width:32em;margin:3em auto;padding:0 1em;color:#222}"
         "h1{font-size:1.4em}.who{background:#f4f4f6;border-radius:8px;padding:.8em 1em}"
         ".error{color:#a00;font-weight:600}label{display:block;margin:1.2em 0 .3em;font-weight:600}"
         ".vouched{color:#075;font-weight:600}.own{color:#8a5a00;font-weight:600}"
         "input[type=password]{width:100%;box-sizing:border-box;padding:.5em;font:inherit}"
         "button{margin:1em .5em 0 0;padding:.5em 1.2em;font:inherit}small{color:#555}"
         "fieldset{border:0;padding:0;margin:1.2em 0 0}legend{font-weight:600}"
         ".choice label{display:inline;margin:0 0 0 .4em;font-weight:400}.choice{margin:.3em 0}")
STYLE_HASH = base64.b64encode(hashlib.sha256(STYLE.encode()).digest()).decode()

# what an error page says, by the RFC's error, when the refusal has no sentence for people of its own
PLAIN = {
    "invalid_client": "This server could not confirm which application is asking, so it cannot connect.",
    "invalid_request": "The application's request is incomplete or was altered on the way, so it cannot connect.",
    "temporarily_unavailable": "This server is busy just now: wait a few seconds, then try again.",
}
UNKNOWN = "This application cannot connect just now."


@dataclass(frozen=True)
class Lifetimes:
    """How long what a grant gives lasts, in seconds (the settings ``oauth_access_token_ttl`` and
    ``oauth_refresh_token_ttl``)."""

    access: float
    refresh: float


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


def consent_page(client: Client, redirect_uri: str, form_token: str, lifetimes: Lifetimes,
                 error: str | None = None, scope: str = scopes.FULL) -> str:
    """The consent page: who asks, where the answer goes, what it gets (``scope``, what it asked for,
    chosen to begin with) and for how long, the key field."""
    e = html.escape
    notice = f'<p class="error" role="alert">{e(error)}</p>' if error else ""
    return _document("Connect to ColabHive", f"""<h1>Connect {e(client.name)} to ColabHive</h1>
<div class="who"><p>{_who(client)}</p>
<p>It asks to use the ColabHive tools of the API key you enter below, as you could yourself.
{_destination(redirect_uri)}</p></div>
{notice}<form method="post" action="/authorize">
<input type="hidden" name="request" value="{e(form_token)}">
<fieldset><legend>What it may use</legend>
{_choices(scope)}
</fieldset>
<label for="key">Your ColabHive API key</label>
<input type="password" id="key" name="key" autocomplete="off" required placeholder="hive_...">
<small>Find it, or make one, at <a href="{KEYS_URL}">{KEYS_URL}</a>.</small><br>
<button type="submit" name="action" value="allow">Allow</button>
<button type="submit" name="action" value="deny" formnovalidate>Deny</button>
</form>
<p><small>{_how_long(lifetimes)} The key travels sealed inside that access; this server keeps no copy.
To end the access, revoke the key in the ColabHive console (at once, for every application that
holds it) or remove the connection in the application.</small></p>""")


def _choices(asked: str) -> str:
    """The grants the person may choose, the narrowest that gives what was asked for chosen to begin with."""
    wanted = scopes.parse(asked) or frozenset({scopes.FULL})
    chosen = next(value for value, scope, _ in reversed(scopes.CHOICES)
                  if scopes.covers(scopes.parse(scope) or frozenset(), wanted))
    return "\n".join(f'<div class="choice"><input type="radio" id="grant-{value}" name="grant" value="{value}"'
                     f'{" checked" if value == chosen else ""}><label for="grant-{value}">{html.escape(words)}</label></div>'
                     for value, _, words in scopes.CHOICES)


def _who(client: Client) -> str:
    """Who asks: a name vouched for by the host its description lives on, or the application's own word."""
    name = html.escape(client.name)
    host = client.verified_host
    if host is not None:
        return (f'<b>{name}</b> <span class="vouched">· {html.escape(host)}, verified by its address</span><br>'
                f"Its description is published at {html.escape(host)}, so that site vouches for this name.")
    return (f'<b>“{name}”</b> <span class="own">· a name the application gave itself</span><br>'
            "ColabHive has not checked this name: allow only if you have just asked this application to connect.")


def _destination(redirect_uri: str) -> str:
    """Where the answer goes, as a person would recognise it."""
    parts = urlsplit(redirect_uri)
    if parts.scheme == "http" and is_loopback(parts.hostname):
        return ("When you allow it, the answer goes to an application on your own computer (not to a website), "
                f"at port {parts.port or 80}.")
    if parts.scheme not in ("http", "https"):
        return f"When you allow it, the answer goes to the application on your computer that opens {html.escape(parts.scheme)}: links."
    return f"When you allow it, you are sent back to <b>{html.escape(parts.hostname or '')}</b>."


def _how_long(lifetimes: Lifetimes) -> str:
    return (f"The application gets access for {duration(lifetimes.access)} at a time and renews it on its own; "
            f"the access ends after {duration(lifetimes.refresh)} without use.")


def duration(seconds: float) -> str:
    """``seconds`` in the largest whole unit: "30 days", "1 hour", "90 seconds"."""
    whole = int(seconds)
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if whole >= size and whole % size == 0:
            count = whole // size
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{whole} second{'s' if whole != 1 else ''}"


def error_page(error: OAuthError) -> str:
    """A request that cannot be answered at any redirect URI: said here, and nowhere else (a sentence
    for the person, what they can do, and the RFC's error code for the application's makers)."""
    sentence = error.plain or PLAIN.get(error.error, UNKNOWN)
    detail = f" ({html.escape(error.description)})" if error.description != sentence else ""
    return _document("Cannot connect", f"<h1>This application cannot connect</h1>\n<p class=\"error\">"
                                       f"{html.escape(sentence)}</p>\n<p>Go back to the application and "
                                       "try again; if it keeps failing, tell its makers.</p>\n"
                                       f"<p><small>Error code: <code>{html.escape(error.error)}</code>{detail}"
                                       "</small></p>")


def _document(title: str, body: str) -> str:
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width,initial-scale=1"><title>{title}</title>'
            f"<style>{STYLE}</style></head><body>\n{body}\n</body></html>\n")
