"""One admitted tool call, from its start to its answer.

An action's call attaches to the work a cut-off call of the same key, tool and arguments left
running (:mod:`colabhive_mcp.calls.detached`), or invokes anew; the continuation tool follows a named
invocation. Either waits within the host's deadline. How the wait ended decides the rest:

- ``done``: the result, as content blocks; the call is forgotten;
- ``pending`` (the deadline is near, or the wait ran out): a continuation naming the exact call
  that gets the result; the work is kept for a retry or that call;
- ``unknown`` (the gateway stopped answering): an error naming the invocation; the work is kept;
- ``cancelled``: a host that gave up leaves the work running for a while, anyone else stops it.

Each call is logged (``mcp.tool.invoked``) and counted once.
"""

from __future__ import annotations

import contextvars
import enum
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from .. import metrics
from ..catalog.builtin_tools import DEFAULT_MATCHES, SEARCH_TOOLS, continuation, follow_up_hint, search
from ..catalog.policy import Policy
from ..catalog.profiles import UNKNOWN, Profile
from ..catalog.tools import Catalog, Tool
from ..gateway.client import Gateway, GatewayError, new_idempotency_key
from ..invocation import Invocation
from ..keys import KeyRejected
from ..logs import log
from ..revisions import revision
from ..settings.config import Config
from . import results
from .cancellation import keeps_work
from .detached import DetachedCalls, call_key
from .polling import Backoff, Outcome, Update, cancel_upstream, follow, run

RUNNING_SLACK_S = 60.0  # a polling call's note outlives its longest wait by this much


class Standing(enum.Enum):
    """What the instance knows of a call, which decides what the call's end writes to it."""

    UNKNOWN = "unknown"  # nothing: answered at once, or not yet polling (its end forgets nothing)
    RETRYING = "retrying"  # a retry of an invoke that got no answer: the instance holds its idempotency key
    POLLING = "polling"  # the invoke left the work running: the instance notes it, for a retry racing the host
    ATTACHED = "attached"  # following the work an earlier, cut-off call of the same key left running
    FOLLOWING = "following"  # the continuation tool, following work the instance keeps

    @property
    def recorded(self) -> bool:
        """The instance knows of the call: its end forgets it there."""
        return self is not Standing.UNKNOWN


MOVES = {  # how a call's standing may change as it starts and waits (it never goes back)
    Standing.UNKNOWN: {Standing.RETRYING, Standing.POLLING, Standing.ATTACHED, Standing.FOLLOWING},
    Standing.RETRYING: {Standing.POLLING},
    Standing.POLLING: set(),
    Standing.ATTACHED: set(),
    Standing.FOLLOWING: set(),
}


class Owner(Protocol):
    """What a call needs of the tenant it runs for."""

    config: Config
    gateway: Gateway
    calls: DetachedCalls
    backoff: Backoff
    binding: str
    key_id: str

    def max_wait(self, entry: dict[str, Any]) -> float: ...


# the answer instead of the call, or None to run it; its third argument is the budget the call is past
# (a :class:`colabhive_mcp.tenants.spend.OverBudget`), if any: then only the user's yes runs it
Gate = Callable[[Tool, dict[str, Any], Any], "dict[str, Any] | None"]


@dataclass(frozen=True)
class CallOptions:
    """How a request wants one tool call made."""

    version: str  # the protocol revision its result is spelled for
    cancelled: threading.Event  # set when the caller gives up (a Cancellation says why)
    on_update: Callable[[Update], None] | None = None  # hears each change of the work
    gate: Gate | None = None  # may stop the call before the gateway hears of it (a confirmation)
    profile: Profile = UNKNOWN  # the client's host
    narrow: Policy | None = None  # the request's own narrowing of the tool set
    deadline: float | None = None  # seconds the host lets the call wait (None: no host limit)
    heartbeat: float | None = None  # seconds between progress updates while nothing changes (None: the setting)
    closing: threading.Event | None = None  # set while the server shuts down: no continuation points at it


class Hidden(Exception):
    """The continuation tool named the work of a tool the request may not use (its narrowing, its grant)."""


class ToolCall:
    """A call that passed the checks and the per-key limits."""

    def __init__(self, tenant: Owner, catalog: Catalog, tool: Tool, arguments: dict[str, Any],
                 options: CallOptions) -> None:
        self.tenant, self.catalog, self.tool, self.arguments = tenant, catalog, tool, arguments
        self.options, self.profile, self.cancelled = options, options.profile, options.cancelled
        self.heartbeat = options.heartbeat or tenant.config.progress_heartbeat
        self.started = time.perf_counter()
        self.standing = Standing.UNKNOWN  # changes only by :meth:`_become`, as MOVES allows
        # set as the call starts, then read only:
        self.target = tool  # the tool whose result this is (for the continuation tool: the original one)
        self.key: str | None = None  # the call's identity, when the work may be kept for a retry
        self.idempotency_key: str | None = None  # its invoke's (a retry of an unanswered one sends it again)

    def answer(self) -> dict[str, Any] | None:
        """The ``CallToolResult`` (``None`` once cancelled). Raises :class:`KeyRejected`, and whatever
        unexpected went wrong (the call is recorded with status ``internal_error``)."""
        if self.tool.name == SEARCH_TOOLS:  # among the tools this request may call (its narrowing, its grant)
            narrow = self.options.narrow
            tools = [t for t in self.catalog.exposed if narrow is None or not narrow.hides(t.entry, t.builtin)]
            found = search(tools, self.arguments["query"], self.arguments.get("limit", DEFAULT_MATCHES))
            return {"content": [results.text(found)]}
        fields: dict[str, Any] = {"tool": self.tool.name, "slug": self.tool.slug, "tenant": self.tenant.key_id}
        metrics.IN_FLIGHT.inc()
        try:
            outcome = self._follow_up() if self.tool.builtin else self._start()
            fields.update(status=outcome.state, polls=outcome.polls, invocation_id=outcome.invocation_id,
                          mode="attached" if self.standing is Standing.ATTACHED
                          else "sync" if outcome.polls == 0 else "polled")
            if outcome.state == "done" and outcome.invocation is not None:
                fields["status"] = outcome.invocation.status
            result = self._settle(outcome)
        except KeyRejected:  # not a tool error: the caller is told its key is bad
            fields["status"] = "key_rejected"
            raise
        except Hidden as exc:
            fields["status"] = "refused"
            result = results.error_result(str(exc))
        except GatewayError as exc:
            fields.update(status="gateway_error", error=exc.message, http_status=exc.status,
                          invocation_id=exc.invocation_id)
            metrics.ERRORS.labels("gateway").inc()
            result = self._failed(exc)
        except BaseException:  # a bug, or the process stopping: recorded, and raised as itself for the caller
            fields["status"] = "internal_error"
            raise
        finally:
            metrics.IN_FLIGHT.dec()
            self._record(fields)
        return results.fit(result, self.profile.max_text_chars, self.profile.max_image_bytes) if result else result

    # -- how the wait starts --------------------------------------------------------------------

    def _start(self) -> Outcome:
        """Attach to the work a cut-off identical call left running, else invoke."""
        self.key = call_key(self.tenant.binding, self.tool.slug, self.arguments)
        max_wait = self._max_wait(self.tenant.max_wait(self.tool.entry))
        kept = self.tenant.calls.attach(self.key)
        if kept is not None:
            invocation = self._fetch(kept)
            if invocation is not None:
                self._become(Standing.ATTACHED)
                return self._follow(invocation, max_wait)
        unanswered = self.tenant.calls.idempotency_key(self.key)
        if unanswered is not None:
            self._become(Standing.RETRYING)
        self.idempotency_key = unanswered or new_idempotency_key()
        return run(self.tenant.gateway, self.tool.slug, self.arguments, sync_timeout_s=self.tenant.config.sync_timeout,
                   started=self._polling, cancelled=self.cancelled, on_update=self.options.on_update,
                   max_wait=max_wait, backoff=self.tenant.backoff, heartbeat=self.heartbeat,
                   idempotency_key=self.idempotency_key)

    def _follow_up(self) -> Outcome:
        """The continuation tool: follow the named invocation, as the original call would have."""
        invocation_id = self.arguments["invocation_id"]
        invocation, _ = self.tenant.gateway.get_invocation(invocation_id)
        self.target = self.catalog.by_slug.get(invocation.slug or "", self.tool)
        narrow = self.options.narrow
        if narrow is not None and self.target is not self.tool and narrow.hides(self.target.entry):
            raise Hidden(f"The invocation {invocation_id!r} is the work of {self.target.name!r}, a tool this "
                         "connection may not use: it cannot follow it.")
        self.key = self.tenant.calls.follow_up(self.tenant.binding, invocation_id)
        if self.key is not None:
            self._become(Standing.FOLLOWING)
        wanted = self.arguments.get("wait_s")
        max_wait = self._max_wait(self.tenant.config.poll_max_wait if wanted is None else wanted)
        return self._follow(invocation, max_wait)

    def _follow(self, invocation: Invocation, max_wait: float) -> Outcome:
        return follow(self.tenant.gateway, invocation, cancelled=self.cancelled, on_update=self.options.on_update,
                      max_wait=max_wait, backoff=self.tenant.backoff, heartbeat=self.heartbeat)

    def _fetch(self, invocation_id: str) -> Invocation | None:
        """A kept invocation as it stands now; ``None`` when the gateway no longer has it."""
        try:
            return self.tenant.gateway.get_invocation(invocation_id)[0]
        except GatewayError as exc:
            if exc.status != 404:
                raise exc.about(invocation_id) from exc
        self.tenant.calls.finish(self.key, invocation_id)
        return None

    def _polling(self, invocation: Invocation) -> None:
        """The invoke left the work running: a retry arriving now may be this call's host retrying."""
        assert self.key is not None
        self._become(Standing.POLLING)
        self.tenant.calls.running(self.key, invocation.id,
                                  self.tenant.max_wait(self.tool.entry) + RUNNING_SLACK_S)

    def _become(self, standing: Standing) -> None:
        if standing not in MOVES[self.standing]:
            raise RuntimeError(f"a call cannot go from {self.standing.value} to {standing.value}")
        self.standing = standing

    def _max_wait(self, wanted: float) -> float:
        deadline = self.options.deadline
        return wanted if deadline is None else max(0.0, min(wanted, deadline))

    # -- how it ends ----------------------------------------------------------------------------

    def _settle(self, outcome: Outcome) -> dict[str, Any] | None:
        invocation, invocation_id = outcome.invocation, outcome.invocation_id
        if outcome.state == "done" and invocation is not None:
            self._forget(invocation_id)
            return results.tool_result(invocation, self.target.name, self.options.version, self.target.output_check)
        if outcome.state == "cancelled":
            if invocation_id is not None:
                self._leave(invocation_id)
            return None
        if self.options.closing is not None and self.options.closing.is_set() and invocation_id is not None:
            cancel_upstream(self.tenant.gateway, invocation_id)  # (a continuation would name a server going away)
            self._forget(invocation_id)
            return results.stopped_result(self.target.name)
        self._keep(invocation_id)
        if outcome.state == "pending" and invocation is not None:
            return results.continuation_result(invocation, self.target.name, continuation(invocation_id),
                                               checked=self.tool.output_check is not None)
        return results.unknown_result(self.target.name, invocation_id, "the gateway stopped answering while the "
                                      "call waited", follow_up_hint(invocation_id))

    def _leave(self, invocation_id: str) -> None:
        """The caller is gone: a host that gave up leaves the work for a retry; anyone else stops it
        (:func:`colabhive_mcp.calls.cancellation.keeps_work`: a hang-up's meaning depends on the revision)."""
        if keeps_work(self.cancelled, revision(self.options.version).modern):
            self._keep(invocation_id)
        else:
            cancel_upstream(self.tenant.gateway, invocation_id)
            self._forget(invocation_id)

    def _forget(self, invocation_id: str | None) -> None:
        """The call ended for good: the instance forgets it (a call answered at once it never knew)."""
        if self.standing.recorded:
            self.tenant.calls.finish(self.key, invocation_id)

    def _keep(self, invocation_id: str | None) -> None:
        """The work goes on without this call: a retry of it, or the continuation tool, picks it up."""
        if self.key is not None and invocation_id is not None:
            gateway, context = self.tenant.gateway, contextvars.copy_context()  # its logs' fields, its trace
            self.tenant.calls.detach(self.tenant.binding, self.key, invocation_id,
                                     lambda kept: context.run(cancel_upstream, gateway, kept))

    def _failed(self, exc: GatewayError) -> dict[str, Any]:
        """The answer to a gateway failure: around existing work, the work is kept and named."""
        name = self.tool.name
        if self.tool.builtin and exc.status == 404:
            return results.error_result(f"No invocation {self.arguments['invocation_id']!r} is visible to this API key.")
        if exc.invocation_id:
            self._keep(exc.invocation_id)
            return results.unknown_result(name, exc.invocation_id, f"following it failed ({exc.message})",
                                          follow_up_hint(exc.invocation_id))
        if exc.status is None and self.key is not None and self.idempotency_key is not None:  # no answer
            self.tenant.calls.unanswered(self.key, self.idempotency_key)
            return results.error_result(results.gateway_failure(name, exc) + " It may have started: the same call "
                                        "again continues it, without running it twice.")
        return results.error_result(results.gateway_failure(name, exc))

    def _record(self, fields: dict[str, Any]) -> None:
        took = time.perf_counter() - self.started
        fields["latency_ms"] = round(took * 1000, 1)
        log.bind(**fields).info("mcp.tool.invoked")
        named = self.tool.builtin or bool(self.tenant.config.metrics_token)  # who may read /metrics: see metrics
        metrics.TOOL_CALLS.labels(metrics.tool_label(self.tool.slug, named), fields["status"]).inc()
        metrics.TOOL_LATENCY.observe(took)
        metrics.POLLS.observe(fields.get("polls", 0))
