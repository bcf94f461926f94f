"""An API key as the server handles it, made once where the key arrives, and the gateway's refusal of one.

What is derived from a key is derived here, once, from one SHA-256: the id that logs and metrics may
show, the binding that signed tokens (sessions, tasks, confirmations) carry, and the digest the
tenant pool and the instance store are keyed by. The key itself is never printed, logged or stored.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ApiKey:
    secret: str = field(repr=False)  # what the gateway is sent, and nothing else ever sees
    log_id: str  # 48 bits of the hash: what logs and metrics show
    binding: str  # 128 bits: what a token bound to the key carries
    digest: str  # the whole hash: what the pool and the instance store are keyed by

    @classmethod
    def of(cls, secret: str) -> ApiKey:
        return _derived(secret)


@functools.lru_cache(maxsize=1024)  # the keys of recent requests, as the tenant pool holds them
def _derived(secret: str) -> ApiKey:
    digest = hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()
    return ApiKey(secret, digest[:12], digest[:32], digest)


class KeyRejected(Exception):
    """The gateway refused the API key itself (401, or 403 on the manifest): nothing this key asks
    for can work until the key is fixed. Deliberately not a ``GatewayError``, so no handler of
    ordinary failures turns it into a retry, a stale copy or a tool error."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"the ColabHive gateway rejected the API key ({status} {detail})")
        self.status = status
        self.detail = detail
        self.message = str(self)
