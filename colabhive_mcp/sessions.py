"""Legacy HTTP session ids that any worker of any instance can verify: no shared store.

A session id is a signed token carrying what the handshake settled (protocol version, client
capabilities and name) and the hash of the key that opened it. Another key, a forged or
expired token, or a token signed with another secret is simply "unknown" (HTTP 404).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from typing import Any, Callable

from .protocol import Session

PREFIX = "s1."


def key_binding(api_key: str) -> str:
    """What a token stores about its key: 128 bits of its SHA-256, never the key."""
    return hashlib.sha256(api_key.encode("utf-8")).hexdigest()[:32]


class SessionCodec:
    def __init__(self, secret: str | bytes, max_age: float = 86400.0,
                 clock: Callable[[], float] = time.time) -> None:
        self._secret = secret.encode() if isinstance(secret, str) else secret
        self.max_age = max_age
        self.clock = clock

    def new_session(self) -> Session:
        return Session(id=secrets.token_urlsafe(16))

    def issue(self, session: Session, api_key: str) -> str:
        """The ``Mcp-Session-Id`` for a session that has just been initialized."""
        client = {k: session.client_info[k] for k in ("name", "version") if isinstance(session.client_info.get(k), str)}
        payload = {"n": session.id, "k": key_binding(api_key), "v": session.version, "c": session.capabilities,
                   "i": client, "t": int(self.clock())}
        body = _b64(json.dumps(payload, separators=(",", ":")).encode())
        return PREFIX + body + "." + _b64(self._sign(body))

    def restore(self, token: str, api_key: str) -> Session | None:
        """The session a token stands for, or ``None`` when it is not valid for this key now."""
        if not token.startswith(PREFIX) or token.count(".") != 2:
            return None
        body, _, signature = token[len(PREFIX):].partition(".")
        try:
            if not hmac.compare_digest(_unb64(signature), self._sign(body)):
                return None
            payload: dict[str, Any] = json.loads(_unb64(body))
        except ValueError:
            return None
        if payload.get("k") != key_binding(api_key) or self.clock() - payload.get("t", 0) > self.max_age:
            return None
        return Session(id=payload["n"], version=payload["v"], capabilities=payload.get("c") or {},
                       client_info=payload.get("i") or {}, initialized=True)

    def _sign(self, body: str) -> bytes:
        return hmac.new(self._secret, body.encode(), hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
