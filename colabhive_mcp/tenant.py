"""A tenant: one API key's gateway session, manifest cache, policy, and tool calls.

stdio has exactly one tenant; the hosted mode keeps a pool of them keyed by key hash.
Nothing in a tenant is shared with another tenant.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any, Callable

from . import content, metrics
from .config import Config
from .gateway import Gateway, GatewayError, KeyRejected
from .builtins import DEFAULT_MATCHES, DEFAULT_WAIT_S, ENTRIES as BUILTINS, SEARCH_TOOLS, follow_up_hint, search
from .invocation import Backoff, follow, run
from .logs import key_id, log
from .manifest import ManifestCache, ManifestError, load_snapshot
from .policy import Policy
from .profiles import UNKNOWN, Profile
from .signing import key_binding
from .tools import Catalog, Tool


class UnknownTool(LookupError):
    """No tool of that name exists for this tenant."""


class Tenant:
    """Everything one API key needs; safe to use from many threads at once."""

    def __init__(self, config: Config, api_key: str) -> None:
        self.config = config
        self.key_id = key_id(api_key)
        self.binding = key_binding(api_key)  # what tokens bound to this key carry
        self.gateway = Gateway(config.api_url, api_key, account_id=config.account_id,
                               timeout=config.request_timeout, retries=config.retries)
        snapshot = load_snapshot(config.manifest_snapshot) if config.manifest_snapshot else None
        self.manifest = ManifestCache(self.gateway, ttl=config.manifest_ttl, pin=config.manifest_pin,
                                      snapshot=snapshot, rejection_ttl=config.rejected_key_ttl,
                                      conditional=config.manifest_etag)
        self.policy = Policy.from_config(config)
        self.backoff = Backoff(initial=config.poll_initial, maximum=config.poll_max_interval)
        self._catalogs: dict[str, Catalog] = {}  # per client profile, for the current manifest
        self._running = 0
        self._started: deque[float] = deque()  # start times of the calls of the last minute
        self._limits = threading.Lock()

    def close(self) -> None:
        self.gateway.close()

    @property
    def rejection(self) -> KeyRejected | None:
        """Why the gateway refused this key, once it has."""
        return self.gateway.rejection

    def verify(self) -> None:
        """Ask the gateway whether it accepts this key (by fetching the manifest, which is then
        cached): raises :class:`KeyRejected` if not. A gateway that cannot be reached says nothing
        about the key, so that passes."""
        try:
            self.manifest.get()
        except ManifestError:
            pass

    def catalog(self, profile: Profile = UNKNOWN) -> Catalog:
        """The tools of the current manifest for this client profile (built once per manifest)."""
        manifest = self.manifest.get()
        catalog = self._catalogs.get(profile.name)
        if catalog is None or catalog.manifest is not manifest or catalog.profile != profile:
            catalog = Catalog(manifest, self.policy, profile, BUILTINS)
            self._catalogs = {**{k: c for k, c in self._catalogs.items() if c.manifest is manifest},
                              profile.name: catalog}
        return catalog

    def max_wait(self, entry: dict[str, Any]) -> float:
        """How long a call of this action waits: by kind, else by latency class, else the default."""
        waits = dict(self.config.poll_max_wait_by)
        return waits.get(entry.get("kind"), waits.get(entry.get("latencyClass"), self.config.poll_max_wait))

    def prepare(self, name: str, arguments: dict[str, Any], profile: Profile = UNKNOWN,
                narrow: Policy | None = None) -> tuple[Catalog, Tool] | dict[str, Any]:
        """The tool to run, or the ``isError`` result that refuses the call without the gateway.

        Keys the client's host is known to inject (e.g. n8n's ``toolCallId``) are dropped from
        ``arguments`` when the tool's schema does not ask for them. Raises :class:`UnknownTool`.
        """
        try:
            catalog = self.catalog(profile)
        except ManifestError as exc:
            return content.error_result(f"The ColabHive tool list is unavailable: {exc}")
        tool = catalog.by_name.get(name)
        if tool is None:
            raise UnknownTool(name)
        refusal = tool.refusal or (narrow.refusal(tool.entry, tool.builtin) if narrow is not None else None)
        if refusal is not None:
            return content.error_result(f"Tool {name!r} is not available on this server: {refusal}.")
        declared = (tool.entry.get("inputSchema") or {}).get("properties") or {}
        for key in profile.drop_arguments:
            if key in arguments and key not in declared:
                del arguments[key]
        problem = tool.argument_errors(arguments)
        return content.error_result(problem) if problem is not None else (catalog, tool)

    def call_tool(self, name: str, arguments: dict[str, Any], *, version: str, cancelled: threading.Event,
                  on_update: Callable[[dict[str, Any]], None] | None = None,
                  gate: Callable[[Tool, dict[str, Any]], dict[str, Any] | None] | None = None,
                  profile: Profile = UNKNOWN, narrow: Policy | None = None) -> dict[str, Any] | None:
        """Run one tool to the end and return its ``CallToolResult`` (``None`` once cancelled).

        ``gate`` may stop the call before the gateway hears of it by returning the answer to give
        instead (e.g. the user declined). Raises :class:`UnknownTool`; every other failure is an
        ``isError`` result.
        """
        prepared = self.prepare(name, arguments, profile, narrow)
        if isinstance(prepared, dict):
            return prepared
        catalog, tool = prepared
        stop = gate(tool, arguments) if gate is not None else None
        if stop is not None:
            return stop
        refused = self._admit()
        if refused is not None:
            metrics.ERRORS.labels("tenant_limit").inc()
            return content.error_result(refused)
        try:
            return self._run_tool(catalog, tool, name, arguments, version, cancelled, on_update, profile)
        finally:
            with self._limits:
                self._running -= 1

    def _admit(self) -> str | None:
        """Take a place for one more call, or say which of this key's limits it would break."""
        now = time.monotonic()
        with self._limits:
            while self._started and now - self._started[0] > 60:
                self._started.popleft()
            limit, per_minute = self.config.tenant_max_concurrent, self.config.tenant_calls_per_minute
            if limit and self._running >= limit:
                return (f"This API key already has {self._running} ColabHive calls running (the limit is {limit}); "
                        "try again when one finishes.")
            if per_minute and len(self._started) >= per_minute:
                wait = 60 - (now - self._started[0])
                return (f"This API key started {per_minute} ColabHive calls in the last minute (the limit); "
                        f"try again in {wait:.0f} s.")
            self._running += 1
            self._started.append(now)
        return None

    def _run_tool(self, catalog: Catalog, tool: Tool, name: str, arguments: dict[str, Any], version: str,
                  cancelled: threading.Event, on_update: Callable[[dict[str, Any]], None] | None,
                  profile: Profile) -> dict[str, Any] | None:
        """Run an admitted call: a built-in, or invoke and follow; log, count and fit its result."""
        if tool.name == SEARCH_TOOLS:
            found = search(catalog.exposed, arguments["query"], arguments.get("limit", DEFAULT_MATCHES))
            return {"content": [content.text(found)]}
        started = time.perf_counter()
        fields: dict[str, Any] = {"tool": name, "slug": tool.slug, "tenant": self.key_id}
        follow_options = {"cancelled": cancelled, "on_update": on_update, "backoff": self.backoff,
                          "heartbeat": self.config.progress_heartbeat}
        target, rejected = tool, None
        metrics.IN_FLIGHT.inc()
        try:
            if tool.builtin:
                invocation_id = arguments["invocation_id"]
                invocation, _ = self.gateway.get_invocation(invocation_id)
                target = catalog.by_slug.get(invocation.get("action_slug"), tool)
                outcome = follow(self.gateway, invocation, max_wait=arguments.get("wait_s", DEFAULT_WAIT_S),
                                 **follow_options)
            else:
                outcome = run(self.gateway, tool.slug, arguments, sync_timeout_s=self.config.sync_timeout,
                              max_wait=self.max_wait(tool.entry), **follow_options)
        except KeyRejected as exc:  # not a tool error: the caller is told its key is bad
            fields["status"], result, rejected = "key_rejected", None, exc
        except GatewayError as exc:
            if tool.builtin and exc.status == 404:
                result = content.error_result(f"No invocation {arguments['invocation_id']!r} is visible to this API key.")
            elif exc.invocation_id:
                result = content.unknown_result(name, exc.invocation_id, f"following it failed ({exc.message})",
                                                follow_up_hint(exc.invocation_id))
            else:
                result = content.error_result(gateway_failure(name, exc))
            fields.update(status="gateway_error", error=exc.message, http_status=exc.status,
                          invocation_id=exc.invocation_id)
            metrics.ERRORS.labels("gateway").inc()
        else:
            fields.update(status=outcome.state, polls=outcome.polls, mode="sync" if outcome.polls == 0 else "polled",
                          invocation_id=outcome.invocation_id)
            if outcome.state == "done":
                fields["status"] = outcome.invocation["status"]
                result = content.tool_result(outcome.invocation, target.name, version, target.output_check)
            elif outcome.state == "pending":
                result = content.pending_result(outcome.invocation, target.name, follow_up_hint(outcome.invocation_id))
            elif outcome.state == "unknown":
                result = content.unknown_result(target.name, outcome.invocation_id, "the gateway stopped answering "
                                                "while the call waited", follow_up_hint(outcome.invocation_id))
            else:
                result = None
        finally:
            metrics.IN_FLIGHT.dec()
        took = time.perf_counter() - started
        fields["latency_ms"] = round(took * 1000, 1)
        log.bind(**fields).info("mcp.tool.invoked")
        metrics.TOOL_CALLS.labels(metrics.tool_label(tool.slug), fields["status"]).inc()
        metrics.TOOL_LATENCY.observe(took)
        metrics.POLLS.observe(fields.get("polls", 0))
        if rejected is not None:
            raise rejected
        return content.fit(result, profile.max_text_chars, profile.max_image_bytes) if result else result


def gateway_failure(tool: str, exc: GatewayError) -> str:
    """What the model is told when the gateway refused or failed a call."""
    if exc.status == 404:
        return f"Tool {tool!r} no longer exists on ColabHive or is not visible to this API key."
    if exc.status == 422:
        return f"ColabHive rejected the input for {tool!r}: {exc.message.removeprefix('422 ')}"
    if exc.status == 429:
        wait = f" Retry after {exc.retry_after:g} s." if exc.retry_after is not None else ""
        return f"ColabHive is rate-limiting this API key (429).{wait}"
    return f"Tool {tool!r} could not be run: ColabHive gateway error: {exc.message}"
