"""The spend guard: how many billable calls each API key makes over a rolling hour and day.

An action is billable when it declares the ``billing`` side effect, or its slug matches
``billable_tools``; one call of it counts as its weight (``billable_weights``, else 1). Each
counted call is a lasting reservation in a store the instance's workers share (:meth:`.InstanceStore.reserve`;
the instance's state directory, else its store), so every worker counts against the same budget, a
worker that restarts forgets none of it, and no more calls get through than the budget allows,
however many come at once.

Within budget nothing changes. Past it, ``spend_guard = confirm`` lets the call through only with
the user's yes (asked the way a side-effecting tool is confirmed: :mod:`colabhive_mcp.protocol.confirm`),
and ``refuse`` refuses it. A call that then does not go to the gateway (declined, not askable, or
refused by another limit) gives its count back; one the gateway took or refused stays counted, and
a host's retry of it is not counted again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Callable, Mapping, NamedTuple

from .. import metrics
from ..catalog.policy import billable
from ..catalog.tools import Tool
from ..logs import log
from ..settings.config import Config
from ..store.interface import InstanceStore
from ..store.runtime_dir import private_dir_problems
from .limits import LimitReached

BEYOND = 1 << 62  # the "limit" of a call the user let through past its budget: it is counted all the same


class Window(NamedTuple):
    name: str  # as a figure names it
    adjective: str  # as a sentence names the budget
    seconds: float
    setting: str  # the setting that sets its budget


HOUR = Window("hour", "hourly", 3600.0, "billable_calls_per_hour")
DAY = Window("day", "daily", 86400.0, "billable_calls_per_day")


@dataclass(frozen=True)
class Budget:
    """What the guard holds a key to, from the settings."""

    per_hour: int = 0
    per_day: int = 0
    guard: str = "confirm"  # past a budget: ask the user (confirm) or refuse
    billable: tuple[str, ...] = ()  # slug globs counted besides the billing side effect
    weights: tuple[tuple[str, int], ...] = ()  # slug glob -> how many calls one counts as

    @classmethod
    def of(cls, config: Config) -> Budget:
        return cls(config.billable_calls_per_hour, config.billable_calls_per_day, config.spend_guard,
                   config.billable_tools, config.billable_weights)

    @cached_property
    def windows(self) -> tuple[tuple[Window, int], ...]:
        """The windows that have a budget, with it."""
        return tuple((window, limit) for window, limit in ((HOUR, self.per_hour), (DAY, self.per_day)) if limit)

    @property
    def asks(self) -> bool:
        """Whether a call past the budget may ask the user (a request of ours before its answer)."""
        return bool(self.windows) and self.guard == "confirm"

    def weight(self, tool: Tool) -> int:
        """How many billable calls one call of ``tool`` counts as (0: it is not billable)."""
        if tool.builtin or not billable(tool.entry, self.billable):
            return 0
        return next((weight for glob, weight in self.weights if fnmatchcase(tool.slug, glob)), 1)


class OverBudget(LimitReached):
    """A billable call past a budget: what was spent in the window, what this call costs, and when
    the window frees up."""

    def __init__(self, window: Window, allowed: int, used: int, retry_after: float, tool: Tool,
                 weight: int) -> None:
        cost = tool.entry.get("costHint")
        costs = f" and costs {cost}" if isinstance(cost, str) else ""
        self.tool = tool
        self.situation = (f"This API key's {window.adjective} budget of {allowed} billable ColabHive calls is used "
                          f"({used} in the last {window.name}); {tool.name!r} counts as {weight}{costs}. The budget "
                          f"frees up in {_duration(retry_after)}.")
        super().__init__(f"{self.situation} Ask the user whether to go on, or to raise {window.setting}.",
                         retry_after, 429, window.setting, allowed=allowed, used=used, window=window.name,
                         weight=weight, **({"cost": cost} if isinstance(cost, str) else {}))


class Charge:
    """The billable calls counted for one call, given back (:meth:`refund`) when it does not go to
    the gateway after all."""

    def __init__(self, store: InstanceStore | None = None, digest: str = "",
                 taken: tuple[tuple[str, str], ...] = ()) -> None:
        self._store, self._digest, self._taken = store, digest, list(taken)

    def refund(self) -> None:
        taken, self._taken = self._taken, []
        if self._store is not None:
            for space, reservation in taken:
                self._store.unreserve(space, self._digest, reservation)


NOTHING = Charge()  # the charge of a call that is not billable, or of a key with no budget

Ask = Callable[[OverBudget | None], dict[str, Any] | None]  # the protocol's confirmation step


class SpendGuard:
    """The budget of every key of an instance, counted in its store."""

    def __init__(self, budget: Budget, store: InstanceStore) -> None:
        self.budget, self.store = budget, store

    def counts(self, tool: Tool) -> bool:
        """Whether a call of ``tool`` is counted (it is billable, and there is a budget)."""
        return bool(self.budget.windows) and self.budget.weight(tool) > 0

    def admit(self, digest: str, key_id: str, tool: Tool, ask: Ask | None,
              again: bool = False) -> tuple[dict[str, Any] | None, Charge]:
        """Count a call of ``tool`` by the key with ``digest`` (``key_id`` in logs), asking ``ask``
        first: it confirms a side-effecting tool, and past the budget (then given the
        :class:`OverBudget`) it answers ``None`` only with the user's yes. A call that continues work
        counted already (``again``: a host's retry of a call it gave up on) is neither counted nor
        refused. Returns the answer to give instead of running the call, if any, and the call's
        :class:`Charge`."""
        weight = 0 if again or not self.budget.windows else self.budget.weight(tool)
        over = None
        try:
            charge = self._charge(digest, tool, weight)
        except OverBudget as exc:
            charge, over = NOTHING, exc
        if over is not None and (ask is None or self.budget.guard == "refuse"):
            _seen(over, key_id, "refused")
            return over.result, NOTHING
        try:
            stop = ask(over) if ask is not None else None
        except BaseException:  # (a client that cannot be asked, a shutdown): nothing ran
            charge.refund()
            raise
        if stop is not None:
            charge.refund()
            if over is not None and stop.get("resultType") != "input_required":  # (asked: the answer decides)
                _seen(over, key_id, "refused" if stop is over.result else "declined")
            return stop, NOTHING
        if over is not None:
            _seen(over, key_id, "confirmed")
            try:
                charge = self._charge(digest, tool, weight, beyond=True)
            except OverBudget:  # the store cannot count just now: the user's yes stands
                charge = NOTHING
        return None, charge

    def spent(self, digest: str) -> dict[str, int]:
        """What the key has spent in each window that has a budget."""
        return {window.name: self.store.held(_space(window), digest) for window, _ in self.budget.windows}

    def _charge(self, digest: str, tool: Tool, weight: int, beyond: bool = False) -> Charge:
        """Count ``weight`` calls in every window, or none: raises :class:`OverBudget` when one is full."""
        taken: list[tuple[str, str]] = []
        for window, allowed in self.budget.windows if weight else ():
            space = _space(window)
            for _ in range(weight):
                reservation = self.store.reserve(space, digest, BEYOND if beyond else allowed, window.seconds,
                                                 lasting=True)
                if reservation is None:
                    Charge(self.store, digest, tuple(taken)).refund()
                    used = self.store.held(space, digest)
                    fits = self.store.next_free(space, digest, used - allowed + weight)  # room for this call again
                    raise OverBudget(window, allowed, used, fits, tool, weight)
                taken.append((space, reservation))
        return Charge(self.store, digest, tuple(taken)) if taken else NOTHING


def kept_store(environ: Mapping[str, str]) -> InstanceStore | None:
    """Where a stdio server counts what its key spends, so that a restart forgets none of it and the
    servers one user runs in every host count against one budget: ``$XDG_STATE_HOME/colabhive-mcp/spend``
    (else ``~/.local/state/…``), a directory of this user's alone; ``None`` when there is none."""
    home = environ.get("XDG_STATE_HOME") or (f"{environ['HOME']}/.local/state" if environ.get("HOME") else None)
    if home is None:
        return None
    import sqlite3  # (a stdio server with no budget never loads SQLite)

    from ..store.sqlite import SqliteStore

    directory = Path(home) / "colabhive-mcp" / "spend"
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        problems = private_dir_problems(str(directory))
        if not problems:
            return SqliteStore(str(directory / "spend.db"), mapped=False)
    except (OSError, sqlite3.Error) as exc:
        problems = [str(exc)]
    log.bind(path=str(directory), problem=" and ".join(problems)).warning("spend.counted_in_memory")
    return None


def _space(window: Window) -> str:
    return f"billable-{window.name}"


def _seen(over: OverBudget, key_id: str, decision: str) -> None:
    """A decision past a budget, logged (never the arguments) and counted."""
    metrics.GUARD_DECISIONS.labels(f"budget_{decision}").inc()
    log.bind(tenant=key_id, tool=over.tool.name, slug=over.tool.slug, decision=decision, **over.data
             ).warning("mcp.spend.over_budget")


def _duration(seconds: float) -> str:
    """``12 minutes``, ``3 hours``, ``40 s``: how a person says a wait."""
    if seconds < 90:
        return f"{math.ceil(seconds)} s"
    if seconds < 5400:
        return f"{math.ceil(seconds / 60)} minutes"
    return f"{math.ceil(seconds / 3600)} hours"
