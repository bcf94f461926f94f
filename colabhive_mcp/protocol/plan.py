"""What a transport must know of a message before it serves it, decided by the core in one call.

A transport reads bytes and writes answers; whether a message is a 2026 request, whether its answer
may come with notifications (or with a request of ours, a confirmation), whether it may hold its
thread for long, and whether it stays open for as long as its client likes are protocol facts.
:func:`plan` says them, so no transport reads a method name or a ``_meta`` key itself.
"""

from __future__ import annotations

from dataclasses import dataclass
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


def plan(message: Any, session: Session | None = None, confirm_policy: str = "off") -> Plan:
    """The plan for one decoded message (a dict, a batch, or anything a client sent) within the
    legacy ``session`` it belongs to, if any."""
    if isinstance(message, list):
        methods = {method_of(m) for m in message}
        return Plan(long=bool(methods & LONG_METHODS), held=bool(methods & HELD_METHODS))
    method = method_of(message)
    modern = is_modern(message)
    request = isinstance(message, dict) and is_request(message)
    meta = meta_of(message)
    calls = method == "tools/call"
    log_level = META_LOG_LEVEL in meta or (session is not None and session.log_level is not None)
    return Plan(
        modern=modern, request=request, opens=request and method == "initialize",
        notifies=calls and ("progressToken" in meta or log_level),
        asks=calls and not modern and session is not None and may_ask(confirm_policy, session.capabilities),
        calls=calls, listens=method == LISTEN, long=method in LONG_METHODS, held=method in HELD_METHODS,
        light=isinstance(message, dict) and not modern and (not request or method == "ping"))
