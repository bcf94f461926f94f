"""What the tenants of one instance share, kept in its store so that every worker knows it: calls
cut off by their hosts (a retry attaches to them), the limits' counts, what each key spent on
billable calls, and each key's last good manifest. stdio and a single process keep the same in memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from ..calls.detached import DetachedCalls
from ..settings.config import Config
from ..store.interface import InstanceStore
from ..store.memory import MemoryStore
from .limits import Limits, Quotas
from .spend import Budget, SpendGuard, kept_store


@dataclass(frozen=True)
class Instance:
    """What an instance's workers share: its store, the calls cut off by their hosts, per-key limits
    and budgets."""

    store: InstanceStore
    calls: DetachedCalls
    limits: Limits
    spend: SpendGuard

    @classmethod
    def local(cls, config: Config, environ: Mapping[str, str]) -> Instance:
        """A process on the user's own machine (the stdio server, a command): in memory, but for what
        its key spends when there is a budget, counted where its next start, and the user's other
        servers, count it too (:func:`.spend.kept_store`)."""
        return cls.of(config, spent=kept_store(environ) if Budget.of(config).windows else None)

    @classmethod
    def of(cls, config: Config, store: InstanceStore | None = None, spent: InstanceStore | None = None) -> Instance:
        """The instance over ``store`` (by default, this process's memory), counting what keys spend in
        ``spent`` (by default, ``store``)."""
        store = store if store is not None else MemoryStore()
        return cls(store, DetachedCalls(store, config.host_timeout_grace), Limits(Quotas.of(config), store),
                   SpendGuard(Budget.of(config), spent or store))
