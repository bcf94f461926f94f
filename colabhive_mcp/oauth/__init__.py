"""OAuth 2.1 in front of ColabHive keys, holding nothing: a resource server's metadata and
challenge, and an authorization server whose codes and tokens carry the user's key sealed.

The user pastes the key once, on the consent page; the host then holds tokens that the server
opens back into that key on every request, so everything downstream (the tenant, its limits,
affinity, logs) is the key's. Nothing about a user is stored: the only state is which codes and
refresh tokens were used, in the instance store, until they expire. Nothing here knows HTTP
frameworks: :mod:`colabhive_mcp.transports.http.oauth_routes` adapts it.
"""

from .errors import OAuthError

__all__ = ["OAuthError"]
