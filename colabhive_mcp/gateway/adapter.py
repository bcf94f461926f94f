"""The gateway client's transport adapter: requests' own, with its connection pool looked up once.

A tenant's session talks to one origin, the Builder Gateway. requests works out which urllib3 pool
serves a request on every request (the proxy, the TLS settings, the pool key); this adapter does
it once per origin and settings, and again only if that pool was closed. Imported with ``requests``,
on the first gateway request.
"""

from __future__ import annotations

from typing import Any

from requests.adapters import HTTPAdapter


class OriginAdapter(HTTPAdapter):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pools: dict[tuple[str, str, str, str], Any] = {}

    def get_connection_with_tls_context(self, request: Any, verify: Any, proxies: Any = None, cert: Any = None) -> Any:
        scheme, _, origin = request.url.split("/", 3)[:3]
        key = (scheme + origin, repr(verify), repr(cert), repr(proxies))
        pool = self._pools.get(key)
        if pool is None or pool.pool is None:  # not looked up yet, or closed since
            pool = self._pools[key] = super().get_connection_with_tls_context(request, verify, proxies, cert)
        return pool
