"""The ``colabhive-mcp`` command: the servers, and the commands for humans."""

from .main import main

__all__ = ["main"]
