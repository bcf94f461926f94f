"""Every JSON-RPC method the server knows, one row each: the eras that serve it, and what a transport
must know of it before serving it (whether it may hold its thread for long, stays open, opens a
session, needs neither a tenant nor the gateway, and which parameter its ``Mcp-Name`` header
mirrors).

Parsing (:mod:`.jsonrpc`), planning (:mod:`.plan`, which the transports' threads and admission
read) and dispatch (:mod:`.server`, which attaches the handlers) all read these rows, so a method
added here is handled the same way everywhere, and one missing here is not served at all. A leaf:
it imports nothing.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Method:
    name: str
    legacy: bool = False  # served in the handshake era, within an initialized session
    modern: bool = False  # served statelessly under 2026-07-28
    long: bool = False  # may hold its thread for long (a tool call, a wait): on the workers meant for that
    held: bool = False  # stays open for as long as its client likes (admission counts it as a stream)
    named: str | None = None  # the parameter its 2026 ``Mcp-Name`` header mirrors
    opens: bool = False  # the handshake: it opens a session, and never comes in a batch
    light: bool = False  # needs neither a tenant nor the gateway (answered at once)


INITIALIZE, PING, CALL, LISTEN = "initialize", "ping", "tools/call", "subscriptions/listen"
METHODS: dict[str, Method] = {method.name: method for method in (
    Method(INITIALIZE, legacy=True, opens=True),
    Method(PING, legacy=True, light=True),
    Method("logging/setLevel", legacy=True),
    Method("server/discover", modern=True),
    Method("tools/list", legacy=True, modern=True),
    Method(CALL, legacy=True, modern=True, long=True, named="name"),
    Method("tasks/get", legacy=True, modern=True, named="taskId"),
    Method("tasks/result", legacy=True, long=True, held=True),
    Method("tasks/cancel", legacy=True, modern=True, named="taskId"),
    Method("tasks/update", modern=True, named="taskId"),
    Method(LISTEN, modern=True, long=True, held=True),
)}
UNKNOWN = Method("")  # what an unknown method is, for the plan: quick, not held (its answer is an error)


def of(name: str) -> Method:
    """The row of method ``name`` (:data:`UNKNOWN` for a method the server does not know)."""
    return METHODS.get(name, UNKNOWN)
