"""Legacy HTTP session ids that any worker of any instance can verify: no shared store.

A session id is a signed token carrying what the handshake settled (protocol version, client
capabilities and name) and the hash of the key that opened it. Another key, a forged or
expired token, or a token signed with another secret is simply "unknown" (HTTP 404).
"""

from __future__ import annotations

import secrets
import time
from typing import Callable

from ...keys import ApiKey
from ...protocol import Session
from ...signing import Signer


class SessionCodec:
    def __init__(self, secret: str | bytes, max_age: float = 86400.0,
                 clock: Callable[[], float] = time.time) -> None:
        self._signer = Signer(secret, "s1.", max_age, clock)

    def new_session(self, transport: str = "streamable-http") -> Session:
        return Session(id=secrets.token_urlsafe(16), transport=transport)

    def issue(self, session: Session, key: ApiKey) -> str:
        """The ``Mcp-Session-Id`` for a session that has just been initialized."""
        client = {k: session.client_info[k] for k in ("name", "version") if isinstance(session.client_info.get(k), str)}
        return self._signer.dumps({"n": session.id, "k": key.binding, "v": session.version,
                                   "c": session.capabilities, "i": client})

    def restore(self, token: str, key: ApiKey) -> Session | None:
        """The session a token stands for, or ``None`` when it is not valid for this key now."""
        payload = self._signer.loads(token)
        if payload is None or payload.get("k") != key.binding:
            return None
        return Session(id=payload["n"], transport="streamable-http", version=payload["v"],
                       capabilities=payload.get("c") or {},
                       client_info=payload.get("i") or {})
