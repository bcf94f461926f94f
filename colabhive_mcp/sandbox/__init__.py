"""A faithful, in-memory ColabHive Builder Gateway, to run and test colabhive-mcp offline.

It implements the gateway contract (manifest with pages, ETag and gzip; invoke, poll, cancel;
idempotency keys; queued/running jobs driven by elapsed time; cold starts), two demo keys that
see different private actions, fault injection, and a request journal. It imports nothing from
the rest of ``colabhive_mcp``.
"""

from .app import SandboxApp, create_app
from .contract import API_PREFIX, DEMO_KEY, DEMO_KEY_B, DEMO_KEYS
from .server import Sandbox, serve

__all__ = ["API_PREFIX", "DEMO_KEY", "DEMO_KEY_B", "DEMO_KEYS", "Sandbox", "SandboxApp", "create_app", "serve"]
