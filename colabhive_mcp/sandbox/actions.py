"""What a sandbox action is: its manifest entry, what it computes and how long it takes."""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any, Callable, Collection

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from .contract import DEMO_KEYS


@dataclass(frozen=True)
class Timing:
    """An invocation's lifecycle: ``queued_s`` queued, then ``running_s`` running in ``steps`` steps."""

    queued_s: float = 0.0
    running_s: float = 0.0
    steps: int = 0
    queued_detail: str = "waiting for a GPU"
    model_state: str | None = None  # "cold": cold while queued, warm after; "warm"; None: not reported

    @property
    def total_s(self) -> float:
        return self.queued_s + self.running_s

    @classmethod
    def job(cls, seconds: float, steps: int | None = None) -> Timing:
        """A job of ``seconds``: queued for the first 20%, then running (one step per second by default)."""
        queued = 0.2 * seconds
        running = seconds - queued
        return cls(queued, running, steps or max(1, math.ceil(running)))


class ActionError(Exception):
    """Raised by an action's ``run``: the invocation ends ``failed`` with ``error``."""

    def __init__(self, error: str | dict[str, str]) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass(frozen=True)
class Action:
    """One gateway action: the ToolEntry served as is, plus its sandbox behaviour."""

    entry: dict[str, Any]
    run: Callable[[dict[str, Any]], Any]
    timing: Timing | Callable[[dict[str, Any]], Timing] = Timing()
    keys: frozenset[str] | None = None  # the demo keys that see it; None: all of them
    done_status: str = "succeeded"
    cold_start: bool = False  # timing comes from the key's cold/warm model state instead

    @property
    def slug(self) -> str:
        return str(self.entry["name"])

    def visible_to(self, key: str) -> bool:
        return self.keys is None or key in self.keys

    def timing_for(self, args: dict[str, Any]) -> Timing:
        return self.timing(args) if callable(self.timing) else self.timing

    def with_defaults(self, args: dict[str, Any]) -> dict[str, Any]:
        """``args`` completed with the top-level ``default`` values of the input schema."""
        properties = self.entry.get("inputSchema", {}).get("properties", {})
        defaults = {name: spec["default"] for name, spec in properties.items() if "default" in spec}
        return {**defaults, **args}


def custom_action(
    entry: dict[str, Any], keys: list[str] | None = None, result: Any = None, seconds: float = 0.0,
    known: Collection[str] = DEMO_KEYS,
) -> Action:
    """An action added at run time: answers ``result`` (None: echoes its arguments) after ``seconds``.

    Raises ValueError for an entry without a string ``name``, an invalid ``inputSchema`` or a key
    that is not a ``known`` key. Names may hold any character ("/" too): clients send them URL-quoted.
    """
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"]:
        raise ValueError("entry must be an object with a non-empty string 'name'")
    try:
        Draft202012Validator.check_schema(entry.get("inputSchema", {}))
    except SchemaError as exc:
        raise ValueError(f"invalid inputSchema: {exc.message}") from exc
    unknown = set(keys or ()) - set(known)
    if unknown:
        raise ValueError(f"unknown keys: {sorted(unknown)}")
    return Action(
        entry=copy.deepcopy(entry),
        run=(lambda args: args) if result is None else (lambda args: copy.deepcopy(result)),
        timing=Timing.job(seconds) if seconds > 0 else Timing(),
        keys=None if keys is None else frozenset(keys),
    )
