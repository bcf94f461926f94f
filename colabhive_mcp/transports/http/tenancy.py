"""Whose request it is: the key it carries (the configured one, in single-tenant mode) and that
key's tenant, held while the request is served, once the gateway has accepted the key."""

from __future__ import annotations

import contextlib
from typing import Iterator

from ...config import Config
from ...keys import ApiKey, KeyRejected
from ...instance import Instance
from ...limits import LimitReached
from ...pool import TenantPool
from ...protocol import jsonrpc, key_rejected
from ...store import MemoryStore, SqliteStore
from ...tenant import Tenant
from .incoming import Request
from .wire import INVALID_TOKEN, HttpError, busy


class Tenancy:
    def __init__(self, config: Config, store: MemoryStore | SqliteStore) -> None:
        """``store``: the instance's, where calls kept for a retry, rejected keys, the limits' counts
        and the last good manifests are shared."""
        self.instance = Instance.of(config, store)
        self.limits = self.instance.limits
        self.single_key = ApiKey.of(config.api_key or "")
        self.single = Tenant(config, self.single_key, self.instance) if config.single_tenant and config.api_key else None
        self.pool = None if config.single_tenant else TenantPool(
            config, factory=lambda c, key: Tenant(c, key, self.instance), store=store, limits=self.limits)

    def key(self, request: Request) -> ApiKey:
        """The request's key (made once, here), or the configured one in single-tenant mode; none is a 401."""
        if self.single is not None:
            return self.single_key
        auth = request.headers.get("Authorization", "")
        secret = auth[7:].strip() if auth[:7].lower() == "bearer " else request.headers.get("X-API-Key", "").strip()
        if not secret:
            raise HttpError(401, jsonrpc.INVALID_REQUEST, "Authentication required: send your ColabHive API key "
                            "as 'Authorization: Bearer <key>' or 'X-API-Key'", {"WWW-Authenticate": "Bearer"})
        return ApiKey.of(secret)

    @contextlib.contextmanager
    def tenant(self, key: ApiKey) -> Iterator[Tenant]:
        """The key's tenant, once the gateway has accepted the key: a rejected one is a 401 here."""
        try:
            if self.single is not None:
                self.single.verify()
                yield self.single
            else:
                assert self.pool is not None
                with self.pool.tenant(key) as tenant:
                    yield tenant
        except KeyRejected as exc:
            raise unauthorized(exc) from None
        except LimitReached as exc:
            raise busy(503, exc) from None

    def check(self, key: ApiKey) -> None:
        """Only a key the gateway accepts gets further (a stream, an operator endpoint)."""
        with self.tenant(key):
            pass


def unauthorized(exc: KeyRejected) -> HttpError:
    return HttpError(401, jsonrpc.KEY_REJECTED, key_rejected(exc).message, INVALID_TOKEN)
