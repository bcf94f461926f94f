"""Where things are, derived from ``public_url``: the protected resource (RFC 9728), its
authorization server (RFC 8414) and the challenge a credential-less request gets.

The issuer is the public URL's origin; the endpoints sit at its root, beside ``/mcp``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from .. import scopes
from .clients import PUBLIC, SIGNED, SIGNING_ALGS

RESOURCE_METADATA_PATH = "/.well-known/oauth-protected-resource"
AUTHORIZATION_SERVER_METADATA_PATH = "/.well-known/oauth-authorization-server"
AUTHORIZE_PATH, TOKEN_PATH, REGISTER_PATH = "/authorize", "/token", "/register"
DOCUMENTATION = "https://docs.colabhive.com/mcp"


@dataclass(frozen=True)
class Endpoints:
    resource: str  # the public URL of /mcp, exactly as configured: what tokens are bound to
    issuer: str  # its origin

    @classmethod
    def of(cls, public_url: str) -> Endpoints:
        parts = urlsplit(public_url)
        return cls(public_url, f"{parts.scheme}://{parts.netloc}")

    @property
    def token_endpoint(self) -> str:
        return self.issuer + TOKEN_PATH

    @property
    def resource_metadata_url(self) -> str:
        """The metadata's address at the resource's own path (RFC 9728 §3.1), the one the challenge names."""
        return self.issuer + RESOURCE_METADATA_PATH + urlsplit(self.resource).path

    def challenge(self, error: str | None = None, scope: str = scopes.FULL) -> str:
        """``WWW-Authenticate`` for a request without a usable token (RFC 6750 §3, RFC 9728 §5.1), or
        with one whose grant does not cover it (``insufficient_scope``: ``scope`` is every scope the
        request needs, as the MCP authorization spec's step-up asks)."""
        fields = [f'error="{error}"'] if error else []
        fields += [f'resource_metadata="{self.resource_metadata_url}"', f'scope="{scope}"']
        return "Bearer " + ", ".join(fields)

    def protected_resource(self) -> dict[str, Any]:
        """RFC 9728 protected resource metadata."""
        return {"resource": self.resource, "authorization_servers": [self.issuer],
                "scopes_supported": list(scopes.SUPPORTED),
                "bearer_methods_supported": ["header"], "resource_name": "ColabHive MCP",
                "resource_documentation": DOCUMENTATION}

    def authorization_server(self) -> dict[str, Any]:
        """RFC 8414 authorization server metadata: code flow with PKCE S256, public clients and
        clients that sign their token requests (RFC 7523)."""
        return {"issuer": self.issuer,
                "authorization_endpoint": self.issuer + AUTHORIZE_PATH,
                "token_endpoint": self.token_endpoint,
                "registration_endpoint": self.issuer + REGISTER_PATH,
                "scopes_supported": list(scopes.SUPPORTED),
                "response_types_supported": ["code"],
                "response_modes_supported": ["query"],
                "grant_types_supported": ["authorization_code", "refresh_token"],
                "token_endpoint_auth_methods_supported": [PUBLIC, SIGNED],
                "token_endpoint_auth_signing_alg_values_supported": list(SIGNING_ALGS),
                "code_challenge_methods_supported": ["S256"],
                "authorization_response_iss_parameter_supported": True,
                "client_id_metadata_document_supported": True,
                "service_documentation": DOCUMENTATION}
