"""URLs as the OAuth routes take them from strangers (client ids, redirect URIs, resources,
origins): only those every parser reads alike, so that the host a page names is the host a
browser goes to, and no malformed one gets further than a refusal."""

from __future__ import annotations

import re
from urllib.parse import SplitResult, urlsplit

AMBIGUOUS = re.compile(r"[^!-~]|\\")  # anything but printable ASCII, and the backslash
HOST = re.compile(r"[a-z0-9._-]+|[0-9a-f:.]+")  # as urlsplit gives it: lowercased, an IPv6 literal unbracketed


def split(url: str) -> SplitResult | None:
    """The parts of a URL that every parser reads alike (printable ASCII, no backslash, a valid port
    if any), else ``None``."""
    if AMBIGUOUS.search(url):
        return None
    try:
        parts = urlsplit(url)
        parts.port  # (urlsplit checks a port only when it is asked for it)
    except ValueError:
        return None
    return parts


def plain_host(parts: SplitResult) -> bool:
    """Whether an http(s) URL names its host plainly: a DNS name or an IP literal, no user part."""
    return "@" not in parts.netloc and bool(parts.hostname) and bool(HOST.fullmatch(parts.hostname or ""))


def origin(url: str) -> tuple[str, str, int] | None:
    """A URL's origin (scheme, host, port, the default port spelled out), else ``None``."""
    parts = split(url.strip())
    if parts is None or not parts.hostname:
        return None
    return parts.scheme.lower(), parts.hostname, parts.port or {"https": 443, "http": 80}.get(parts.scheme.lower(), 0)
