"""Which actions a server exposes: allow/deny globs, kinds, side effects (allowed or denied; ``*``
means every side effect in both lists), stability, read-only; and, for a request made with an OAuth
grant, the grant's scopes (:mod:`colabhive_mcp.scopes`).

The same :class:`Policy` filters ``tools/list`` and is checked again on ``tools/call``, so a
hidden action can never be reached by guessing its name.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from .. import scopes
from ..settings.config import STABILITIES, Config


@dataclass(frozen=True)
class Policy:
    """Which actions are tools here: allow and deny globs, kinds, side effects, stability, read-only."""

    allow: tuple[str, ...] = ("*",)
    deny: tuple[str, ...] = ()
    kinds: tuple[str, ...] = ()
    side_effects: tuple[str, ...] = ("*",)
    deny_side_effects: tuple[str, ...] = ()
    min_stability: str = "experimental"
    read_only: bool = False
    granted: frozenset[str] | None = None  # an OAuth grant's scopes (None: a key's full rights)
    billable: tuple[str, ...] = ()  # slug globs billable besides the billing side effect (what the scopes see)

    @classmethod
    def from_config(cls, config: Config) -> "Policy":
        return cls(allow=config.allow, deny=config.deny, kinds=config.kinds, side_effects=config.side_effects,
                   deny_side_effects=config.deny_side_effects, min_stability=config.min_stability,
                   read_only=config.read_only)

    def refusal(self, entry: dict[str, Any], builtin: bool = False) -> str | None:
        """Why this policy hides ``entry`` (a short sentence), or ``None`` when it is exposed.

        Built-in tools obey the allow and deny lists only: they are no action of any kind.
        """
        slug = entry["name"]
        if not any(fnmatchcase(slug, pattern) for pattern in self.allow):
            return "not matched by the allow list"
        denied = next((p for p in self.deny if fnmatchcase(slug, p)), None)
        if denied:
            return f"matched by the deny pattern {denied!r}"
        if builtin:
            return None
        if self.kinds and entry.get("kind") not in self.kinds:
            return f"its kind {entry.get('kind')!r} is not among the exposed kinds"
        effects = side_effects(entry)
        if (self.read_only or self.deny_side_effects or "*" not in self.side_effects) and effects is None:
            return "the gateway does not say what side effects it has"
        denied_effects = [e for e in effects or () if e in self.deny_side_effects or "*" in self.deny_side_effects]
        if denied_effects:
            return f"its side effects ({', '.join(denied_effects)}) are denied"
        if self.read_only and effects:
            return f"it has side effects ({', '.join(effects)}) and the server is read-only"
        if "*" not in self.side_effects:
            extra = [e for e in effects or () if e not in self.side_effects]
            if extra:
                return f"its side effects ({', '.join(extra)}) are not allowed"
        stability = entry.get("stability")
        if stability in STABILITIES and STABILITIES.index(stability) < STABILITIES.index(self.min_stability):
            return f"it is {stability} and the server shows {self.min_stability} or better"
        return None


    def wants(self, entry: dict[str, Any], builtin: bool = False) -> frozenset[str] | None:
        """The scopes ``entry`` needs that the grant lacks, with the granted ones (what a step-up asks
        for), or ``None`` when the grant covers it."""
        if self.granted is None or builtin:
            return None
        effects, paid = side_effects(entry), billable(entry, self.billable)
        return None if scopes.allows(self.granted, effects, paid) else self.granted | scopes.needed(effects, paid)

    def hides(self, entry: dict[str, Any], builtin: bool = False) -> bool:
        return self.refusal(entry, builtin) is not None or self.wants(entry, builtin) is not None


def billable(entry: dict[str, Any], globs: tuple[str, ...] = ()) -> bool:
    """Whether a call of ``entry`` is paid for: it declares the billing side effect, or the operator names it."""
    return "billing" in (side_effects(entry) or ()) or any(fnmatchcase(entry["name"], glob) for glob in globs)


def side_effects(entry: dict[str, Any]) -> list[str] | None:
    """The entry's declared side effects; ``None`` when the gateway gives none (unknown)."""
    effects = entry.get("sideEffects")
    return [e for e in effects if isinstance(e, str)] if isinstance(effects, list) else None
