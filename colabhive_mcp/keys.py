"""An API key as the server handles it, made once where the key arrives, and the gateway's refusal of one.

What is derived from a key is derived here, once, from one SHA-256: the id that logs and metrics may
show, the binding that signed tokens (sessions, tasks, confirmations) carry, and the digest the
tenant pool and the instance store are keyed by. The key itself is never printed, logged or stored.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass, field

from .errors import KEY_REJECTED, ColabHiveError

# What a key can look like: an RFC 6750 bearer token (token68) of bounded length. Anything else is
# refused before the gateway is asked; conf/nginx/colabhive-mcp.conf buckets exactly these tokens.
MIN_KEY_CHARS, MAX_KEY_CHARS = 8, 255
KEYS_URL = "https://console.colabhive.com/builder/settings/api-keys"  # where a user finds or makes one
_KEY_SHAPE = re.compile(r"(?=[A-Za-z0-9._~+/-]+=*\Z)[A-Za-z0-9._~+/=-]{%d,%d}\Z" % (MIN_KEY_CHARS, MAX_KEY_CHARS))


@dataclass(frozen=True)
class ApiKey:
    """An API key and the ids derived from it, made once (:func:`ApiKey.of`): only the gateway sees the secret."""

    secret: str = field(repr=False)  # what the gateway is sent, and nothing else ever sees
    log_id: str  # 48 bits of the hash: what logs and metrics show
    binding: str  # 128 bits: what a token bound to the key carries
    digest: str  # the whole hash: what the pool and the instance store are keyed by

    @classmethod
    def of(cls, secret: str) -> ApiKey:
        return _derived(secret)


def well_formed(secret: str) -> bool:
    """Whether ``secret`` has a key's shape: 8 to 255 characters of a bearer token's alphabet."""
    return _KEY_SHAPE.match(secret) is not None


def mistake(secret: str) -> str | None:
    """What is wrong with a "key" that is a known slip, said for a person: the snippets' placeholder,
    quotes kept around it, a client variable left unexpanded, spaces; else ``None``."""
    text = secret.strip()
    if text in ("hive_...", "hive_…") or text.endswith(("...", "…")):
        return f"the key is the placeholder from the snippet (hive_...): paste your own key, from {KEYS_URL}"
    if len(text) > 1 and text[0] == text[-1] and text[0] in "\"'":
        return "the key has quotes around it: they are part of the file's syntax, not of the key; remove them"
    if "${" in text or text.startswith("$"):
        return (f"the key is {text[:40]!r}, a variable your client did not fill in: set the variable it names (or "
                "paste the key itself)")
    if text != secret or any(c.isspace() for c in text):
        return "the key has spaces or line breaks in it: copy it again, exactly"
    return None


@functools.lru_cache(maxsize=1024)  # the keys of recent requests, as the tenant pool holds them
def _derived(secret: str) -> ApiKey:
    digest = hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()
    return ApiKey(secret, digest[:12], digest[:32], digest)


class KeyRejected(ColabHiveError):
    """The gateway refused the API key itself (401, or 403 on the manifest): nothing this key asks
    for can work until the key is fixed. Deliberately not a ``GatewayError``, so no handler of
    ordinary failures turns it into a retry, a stale copy or a tool error."""

    code = KEY_REJECTED
    http_status = 401

    def __init__(self, status: int, detail: str, slip: str | None = None) -> None:
        super().__init__(f"the ColabHive gateway rejected the API key ({status} {detail})")
        self.status = status  # the gateway's
        self.detail = detail
        self.slip = slip  # the known slip the key is (:func:`mistake`), if any

    @property
    def client_message(self) -> str:
        where = "COLABHIVE_API_KEY for a local server, the Authorization or X-API-Key header for a hosted one"
        said = f"{self.message[0].upper()}{self.message[1:]}."
        if self.slip:
            return f"{said} {self.slip[0].upper()}{self.slip[1:]} ({where})."
        return f"{said} Check the API key: {where}."
