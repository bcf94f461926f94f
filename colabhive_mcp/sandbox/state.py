"""Everything one sandbox gateway holds in memory, and its settings."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from .actions import custom_action
from .catalogue import default_actions
from .contract import DEMO_KEYS
from .coldstart import ColdStarts
from .faults import Faults
from .invocations import Invocations
from .journal import Journal
from .registry import Registry


@dataclass(frozen=True)
class Settings:
    """Sandbox options (the keyword arguments of ``create_app`` and ``Sandbox``)."""

    cold_start_s: float = 4.0  # how long a cold model takes to answer its first call
    page_size: int = 8  # manifest entries per page
    poll_after_s: float = 1.0  # the Retry-After hint on unfinished invocations (at least 1 s)
    model_idle_s: float = 600.0  # a model unused this long is cold again
    sync_timeout_s: int = 60  # how long ``sync`` holds a request when the body gives no timeout
    sync_poll_s: float = 0.05  # how often a held request looks at its invocation
    conformance_tools: bool = False  # also publish the tools the MCP conformance suite calls (test_*)


class SandboxState:
    """The catalogue, invocations, model states, journal and faults of one sandbox."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.registry = Registry(lambda: default_actions(settings.conformance_tools))
        self.invocations = Invocations()
        self.cold_starts = ColdStarts(settings.cold_start_s, settings.model_idle_s)
        self.journal = Journal()
        self.faults = Faults()
        self.stopping = threading.Event()  # ends held requests and injected waits early
        self.keys: set[str] = set(DEMO_KEYS)  # the API keys the gateway accepts

    def add_key(self, key: str) -> None:
        """Accept one more API key: it sees every public action, and actions added for it."""
        if not isinstance(key, str) or not key.startswith("hive_") or not key.isprintable() or len(key) > 200:
            raise ValueError("a key is a printable string starting with 'hive_'")
        self.keys.add(key)

    def add_action(
        self, entry: dict[str, Any], keys: list[str] | None = None, result: Any = None, seconds: float = 0.0
    ) -> None:
        """Add or replace an action (see ``actions.custom_action``); the manifest ETag changes."""
        self.registry.add(custom_action(entry, keys, result, seconds, self.keys))

    def reset(self) -> None:
        """Forget journal, faults, invocations, model states and added keys; restore the catalogue."""
        self.keys = set(DEMO_KEYS)
        self.registry.restore()
        self.invocations.clear()
        self.cold_starts.clear()
        self.journal.clear()
        self.faults.clear()
