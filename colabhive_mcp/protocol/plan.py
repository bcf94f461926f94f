"""What a transport must know of a message before it serves it, decided by the core in one call.

A transport reads bytes and writes answers; whether a message is a 2026 request, whether its answer
may come with notifications (or with a request of ours, a confirmation), whether it may hold its
thread for long, and whether it stays open for as long as its client likes are protocol facts.
:func:`plan` says them, so no transport reads a method name or a ``_meta`` key itself.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from .confirm import may_ask
from .eras import META_LOG_LEVEL, is_modern
from .jsonrpc import is_request, meta_of, method_of
from .request import Session

LONG_METHODS = frozenset({"tools/call", "tasks/result", "subscriptions/listen"})  # may hold a thread for long
HELD_METHODS = frozenset({"tasks/result", "subscriptions/listen"})  # open for as long as the client likes
LISTEN = "subscriptions/listen"


@dataclass(frozen=True)
class Plan:
    modern: bool = False  # a 2026-07-28 request: stateless, its routing headers checked against it
    request: bool = False  # it is answered (an id and a method)
    opens: bool = False  # the legacy handshake's initialize: it opens a session
    notifies: bool = False  # notifications may come before its answer (progress, log messages)
    asks: bool = False  # a request of ours may come before its answer (a confirmation, legacy era)
    calls: bool = False  # a tool call (a hang-up is watched for while it runs)
    listens: bool = False  # a subscription: always streamed, ended at ``stream_max_age``
    long: bool = False  # it may hold its thread for long
    held: bool = False  # it stays open for as long as its client likes
    light: bool = False  # a legacy notification, an answer to us or a ping: served without the gateway
    progress: bool = False  # its _meta asks for progress notifications
    logs: bool = False  # its _meta asks for log messages

    def within(self, session: Session, confirm_policy: str) -> Plan:
        """This plan within the legacy ``session`` it belongs to: its log level, its capabilities."""
        logs = self.logs or session.log_level is not None
        return replace(self, notifies=self.calls and (self.progress or logs),
                       asks=self.calls and not self.modern and may_ask(confirm_policy, session.capabilities))


def plan(message: Any, session: Session | None = None, confirm_policy: str = "off") -> Plan:
    """The plan for one decoded message (a dict, a batch, or anything a client sent) within the
    legacy ``session`` it belongs to, if any."""
    if isinstance(message, list):
        methods = {method_of(m) for m in message}
        return Plan(long=bool(methods & LONG_METHODS), held=bool(methods & HELD_METHODS))
    method, meta = method_of(message), meta_of(message)
    modern = is_modern(message)
    request = isinstance(message, dict) and is_request(message)
    calls, progress, logs = method == "tools/call", "progressToken" in meta, META_LOG_LEVEL in meta
    planned = Plan(
        modern=modern, request=request, opens=request and method == "initialize",
        notifies=calls and (progress or logs), calls=calls, listens=method == LISTEN, long=method in LONG_METHODS,
        held=method in HELD_METHODS, light=isinstance(message, dict) and not modern and (not request or method == "ping"),
        progress=progress, logs=logs)
    return planned.within(session, confirm_policy) if session is not None else planned
