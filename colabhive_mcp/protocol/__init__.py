"""The MCP protocol core, both eras: what a message means and how it is answered, whatever carried it."""

from ..revisions import LEGACY_VERSIONS, MODERN_VERSIONS, SUPPORTED_VERSIONS
from .request import Request, Session
from .server import Server

__all__ = ["LEGACY_VERSIONS", "MODERN_VERSIONS", "SUPPORTED_VERSIONS", "Request", "Server", "Session"]
