"""The HTTP transports (Streamable HTTP in both eras, and 2024-11-05 HTTP+SSE) as one WSGI app."""

from .app import McpApp, create_app

__all__ = ["McpApp", "create_app"]
