"""Tokens a client carries back (session ids, task ids): JSON payloads signed with a server secret.

Any process holding the secret can read them, so no server-side store is needed; a token
that was altered, signed with another secret or is too old reads as ``None``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Any, Callable

from .encoding import b64url, from_b64url


class Signer:
    def __init__(self, secret: str | bytes, prefix: str, max_age: float,
                 clock: Callable[[], float] = time.time) -> None:
        self._secret = (secret.encode() if isinstance(secret, str) else secret) + prefix.encode()
        self.prefix = prefix
        self.max_age = max_age
        self.clock = clock

    def dumps(self, payload: dict[str, Any]) -> str:
        """A token for ``payload`` (visible ASCII only, safe in an HTTP header)."""
        body = b64url(json.dumps({**payload, "t": int(self.clock())}, separators=(",", ":")).encode())
        return self.prefix + body + "." + b64url(self._sign(body))

    def loads(self, token: Any) -> dict[str, Any] | None:
        """The payload of a genuine, unexpired token, else ``None``."""
        if not isinstance(token, str) or not token.startswith(self.prefix) or token.count(".") != 2:
            return None
        body, _, signature = token[len(self.prefix):].partition(".")
        try:
            if not hmac.compare_digest(signature.encode(), b64url(self._sign(body)).encode()):  # one spelling only
                return None
            payload = json.loads(from_b64url(body))
        except ValueError:
            return None
        if not isinstance(payload, dict) or self.clock() - payload.get("t", 0) > self.max_age:
            return None
        return payload

    def _sign(self, body: str) -> bytes:
        return hmac.new(self._secret, body.encode(), hashlib.sha256).digest()
