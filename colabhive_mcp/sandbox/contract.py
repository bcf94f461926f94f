"""Fixed facts of the sandbox gateway: its route prefix, its demo keys, how logs name a key."""

from __future__ import annotations

import hashlib

API_PREFIX = "/api/builder/v1"
DEMO_KEY = "hive_demo_alpha"
DEMO_KEY_B = "hive_demo_beta"
DEMO_KEYS: dict[str, str] = {DEMO_KEY: "alpha", DEMO_KEY_B: "beta"}


def fingerprint(key: str) -> str:
    """The first 12 hex digits of the key's SHA-256."""
    return hashlib.sha256(key.encode()).hexdigest()[:12]
