"""What a transport must know of a frame before it serves it, decided by the core in one call.

A transport reads bytes and writes answers; whether a message is a 2026 request, whether its answer
may come with notifications (or with a request of ours, a confirmation), whether it may hold its
thread for long, whether it stays open for as long as its client likes, and which request a
cancellation names are protocol facts. :func:`plan` says them, so no transport reads a method name
or a ``_meta`` key itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..calls.cancellation import TIMEOUT, USER, Reason
from ..revisions import revision
from . import methods
from .confirm import can_confirm
from .jsonrpc import (BatchFrame, Frame, JsonRpcError, NotificationFrame, RequestFrame, RequestId, awaits_answer,
                      is_valid_id)
from .request import Session

_TIMED_OUT = re.compile(r"time[sd]?[\s_-]?out|timed out|-32001", re.IGNORECASE)


@dataclass(frozen=True)
class Plan:
    """What a transport must know of one frame before serving it (see :func:`plan`)."""

    modern: bool = False  # a 2026-07-28 request: stateless, its routing headers checked against it
    request: bool = False  # it is answered (a request, or an invalid message that is not a notification)
    opens: bool = False  # the legacy handshake's initialize: it opens a session
    notifies: bool = False  # notifications may come before its answer (progress, log messages)
    asks: bool = False  # a request of ours may come before its answer (a confirmation, legacy era)
    calls: bool = False  # a tool call (a hang-up is watched for while it runs)
    listens: bool = False  # a subscription: always streamed, ended at ``stream_max_age``
    long: bool = False  # it may hold its thread for long
    held: bool = False  # it stays open for as long as its client likes
    light: bool = False  # a legacy notification, an answer to us, a ping or an invalid message: no gateway needed
    resumable: bool = False  # its session's revision lets a streamed answer be resumed (its events have ids)
    refusal: JsonRpcError | None = None  # a 2026 request's malformed envelope (answered before anything else)
    cancels: tuple[RequestId, Reason] | None = None  # the request a cancellation names, and why


def plan(frame: Frame, session: Session | None = None, confirms: bool = False) -> Plan:
    """The plan for one frame, within the legacy ``session`` it belongs to (its log level, its
    capabilities), if any; ``confirms``: a tool call may ask the user (a confirmation) before it runs."""
    if isinstance(frame, BatchFrame):
        rows = [methods.of(member.method or "") for member in frame.frames]
        return Plan(long=any(row.long for row in rows), held=any(row.held for row in rows))
    row = methods.of(frame.method or "")
    request = awaits_answer(frame)
    calls = row.name == methods.CALL
    logs = (frame.envelope is not None and frame.envelope.log_level is not None) or (
        session is not None and session.log_level is not None)
    capabilities = session.capabilities if session is not None else {}
    return Plan(
        modern=frame.modern, request=request, opens=request and row.opens,
        notifies=calls and ("progressToken" in frame.meta or logs), calls=calls,
        asks=calls and not frame.modern and confirms and can_confirm(capabilities),
        listens=row.name == methods.LISTEN, long=row.long, held=row.held,
        light=not frame.modern and (not isinstance(frame, RequestFrame) or row.light),
        resumable=session is not None and session.version is not None and revision(session.version).resumable,
        refusal=frame.envelope.refusal if frame.envelope is not None else None, cancels=cancelled_by(frame))


def cancelled_by(frame: Frame) -> tuple[RequestId, Reason] | None:
    """The request a ``notifications/cancelled`` names, and the kind of its reason."""
    if isinstance(frame, NotificationFrame) and frame.method == "notifications/cancelled":
        named = frame.params.get("requestId")
        if is_valid_id(named):
            return named, reason_of(frame.params.get("reason"))
    return None


def reason_of(text: object) -> Reason:
    """The kind of a ``notifications/cancelled`` reason: a timeout (TypeScript SDK: "McpError: MCP
    error -32001: Request timed out"; Python SDK: "timed out after 20s"), else a user's cancel."""
    return TIMEOUT if isinstance(text, str) and _TIMED_OUT.search(text) else USER
