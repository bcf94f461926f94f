"""Sealed values: what the authorization server hands out (codes, tokens, client ids, form tokens)
is its content encrypted and authenticated with AES-GCM, under a key derived (HKDF-SHA256) from the
service's secret and the value's purpose. Any worker of any instance with the same secret opens
them; nobody else can read or alter one; a value sealed for one purpose never opens as another.
Rotating the secret makes every sealed value worthless at once.
"""

from __future__ import annotations

import binascii
import json
import os
import time
from typing import Any, Callable

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from ..encoding import b64url, from_b64url

NONCE_BYTES = 12
EXPIRES = "e"  # the payload field holding when a sealed value stops opening (Unix time)


class Sealer:
    """Seals JSON payloads for one ``purpose``; each sealed value starts with ``prefix``."""

    def __init__(self, secret: str, purpose: str, prefix: str, clock: Callable[[], float] = time.time) -> None:
        key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
                   info=f"colabhive-mcp oauth {purpose}".encode()).derive(secret.encode())
        self._aead = AESGCM(key)
        self.prefix = prefix
        self.clock = clock

    def seal(self, payload: dict[str, Any], ttl: float | None = None) -> str:
        """``payload`` sealed (visible ASCII, URL- and header-safe); with ``ttl``, it opens for that many seconds."""
        if ttl is not None:
            payload = {**payload, EXPIRES: int(self.clock() + ttl)}
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._aead.encrypt(nonce, json.dumps(payload, separators=(",", ":")).encode(), None)
        return self.prefix + b64url(nonce + sealed)

    def open(self, value: Any) -> dict[str, Any] | None:
        """The payload of a genuine, unexpired value of this purpose, else ``None``."""
        payload = self.read(value)
        return None if payload is None or self.expired(payload) else payload

    def read(self, value: Any) -> dict[str, Any] | None:
        """The payload of a genuine value of this purpose, expired or not, else ``None``."""
        if not isinstance(value, str) or not value.startswith(self.prefix):
            return None
        text = value[len(self.prefix):]
        try:
            raw = from_b64url(text)
            if b64url(raw) != text:  # one spelling only: a value is named by its text (nginx, used marks)
                return None
            payload = json.loads(self._aead.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], None))
        except (binascii.Error, ValueError, InvalidTag):
            return None
        return payload if isinstance(payload, dict) else None

    def expired(self, payload: dict[str, Any]) -> bool:
        return payload.get(EXPIRES, float("inf")) <= self.clock()

    def remaining(self, payload: dict[str, Any]) -> float:
        """Seconds until an opened payload expires."""
        return max(0.0, payload.get(EXPIRES, 0) - self.clock())
