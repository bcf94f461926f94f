"""A tenant: one API key's gateway session, manifest cache, policy, and tool calls.

stdio has exactly one tenant; the hosted mode keeps a pool of them keyed by key hash.
Nothing in a tenant is shared with another tenant. The layers above ask the tenant, never its
gateway or its manifest: it starts, follows and stops work, revalidates and watches its manifest.
"""

from __future__ import annotations

import contextlib
import math
import threading
from functools import lru_cache
from typing import Any, Callable

from .. import __version__, metrics
from ..ahead import Ahead
from ..calls import results
from ..calls.call import CallOptions, Gate, Standing, ToolCall
from ..calls.detached import call_key
from ..calls.polling import Backoff, follow
from ..catalog.builtin_tools import ENTRIES as BUILTINS
from ..catalog.policy import Policy
from ..catalog.profiles import UNKNOWN, Profile, listing_shape
from ..catalog.tools import Catalog, Tool, prepared
from ..errors import BUSY_RETRY_S
from ..gateway.client import Gateway, GatewayError
from ..invocation import Invocation
from ..keys import ApiKey, KeyRejected
from ..logs import log
from ..manifest import interning
from ..manifest.cache import ManifestCache
from ..manifest.instance_copy import InstanceCopy
from ..manifest.saved import SavedManifest
from ..manifest.version import Manifest, ManifestError, load_snapshot
from ..revisions import revision
from ..settings import upgrade
from ..settings.config import Config
from .limits import LimitReached
from .refusals import OutOfScope, Prepared, Refused, UnknownTool, Unreachable
from .shared import Instance
from .spend import NOTHING, Charge

MIN_WATCH_S = 1.0  # how often, at most, a watched manifest is revalidated


class Tenant:
    """Everything one API key needs; safe to use from many threads at once."""

    def __init__(self, config: Config, api_key: ApiKey | str, instance: Instance | None = None,
                 saved: SavedManifest | None = None) -> None:
        """``instance``: what the tenants of the instance share (calls cut off by their hosts, the
        limits' counts, last good manifests); by default, this tenant's own, in memory. ``saved``: the
        manifest kept on disk between starts (stdio)."""
        key = api_key if isinstance(api_key, ApiKey) else ApiKey.of(api_key)
        instance = instance or Instance.of(config)
        self.config = config
        self.calls = instance.calls
        self.limits = instance.limits
        self.spend = instance.spend
        self.digest = key.digest
        self.key_id = key.log_id
        self.binding = key.binding  # what tokens bound to this key carry
        self.gateway = Gateway(config.api_url, key, account_id=config.account_id, proxy=config.gateway_proxy,
                               timeout=config.request_timeout, retries=config.retries,
                               max_manifest_bytes=config.manifest_max_bytes, max_result_bytes=config.result_max_bytes)
        snapshot = load_snapshot(config.manifest_snapshot) if config.manifest_snapshot else None
        self.manifest = ManifestCache(self.gateway, ttl=config.manifest_ttl, pin=config.manifest_pin,
                                      snapshot=snapshot, rejection_ttl=config.rejected_key_ttl,
                                      conditional=config.manifest_etag,
                                      stale_while_revalidate=config.manifest_stale_while_revalidate,
                                      instance=InstanceCopy(instance.store, key.digest)
                                      if instance.store.shared else None, saved=saved, prepare=prepared)
        self.policy = Policy.from_config(config)
        self.backoff = Backoff(initial=config.poll_initial, maximum=config.poll_max_interval)
        self._catalogs: dict[str, Catalog] = {}  # per client profile, for the current manifest
        self._making = threading.Lock()  # held by the thread making a list or catalogue behind the answers
        self._listed: set[tuple[str, str]] = set()  # (content, variant): the lists this tenant has made

    def close(self) -> None:
        self.gateway.close()

    @property
    def rejection(self) -> KeyRejected | None:
        """Why the gateway refused this key, while that is its last word on it (see :attr:`.Gateway.rejection`)."""
        return self.gateway.rejection

    def verify(self, vouched: bool = True) -> None:
        """Ask the gateway whether it accepts this key (by fetching the manifest, which is then cached:
        its first page is the gateway's yes, and the rest is read behind it): raises :class:`KeyRejected`
        if not, and :class:`LimitReached` when it cannot tell now (it fails, or limits the manifest's
        route). A last good copy of this key's manifest
        (the gateway's yes within the hour) is a yes; so is another worker's copy within its TTL,
        which is not even read until something needs it (:meth:`listing` may not), unless the caller
        knows there is none (not ``vouched``: no worker accepted the key yet)."""
        if vouched and self.manifest.vouched():
            return
        verdict, accepted = threading.Event(), threading.Event()  # the first set before the second

        def yes() -> None:
            accepted.set()
            verdict.set()

        def get() -> None:
            try:
                self.manifest.get(accepted=yes)
            finally:
                verdict.set()

        fetch = Ahead(get, "manifest-verify")  # once its first page is in, the manifest is read behind the answer
        verdict.wait()
        if accepted.is_set():
            return
        try:
            fetch.result()
        except ManifestError as exc:
            raise LimitReached(f"ColabHive cannot check this API key just now ({exc}); try again shortly.",
                               exc.retry_after or BUSY_RETRY_S) from exc

    def save(self) -> None:
        """Write what this tenant keeps between starts (its manifest, when new), if anything: never
        before an answer, which must not wait for it."""
        self.manifest.save()

    def revalidate(self, since: float = math.inf) -> Manifest:
        """The manifest, asked of the gateway now (e.g. after an action was published) unless the
        gateway answered a question asked after ``since`` (a :func:`time.monotonic` reading). Raises
        :class:`Unreachable` (and no copy to fall back on) or :class:`KeyRejected`."""
        try:
            return self.manifest.refresh(since)
        except ManifestError as exc:
            raise Unreachable(str(exc)) from exc

    def watch(self, stop: threading.Event, on_change: Callable[[], None]) -> None:
        """Until ``stop`` is set: revalidate the manifest as it expires, and call ``on_change``
        whenever a new version arrives (its filters are re-applied on the next list), or when the list
        answered before was made of another (by another worker or an earlier start)."""
        seen = self._shown()
        pause = 0.0 if not isinstance(seen, Manifest) else max(self.config.manifest_ttl, MIN_WATCH_S)  # (a list
        while not stop.wait(pause):  # made elsewhere was answered, or the first fetch is under way: asked at once)
            pause = max(self.config.manifest_ttl, MIN_WATCH_S)
            try:
                manifest = self.manifest.get(behind=False)  # (a watch waits for the news itself)
            except (ManifestError, KeyRejected):
                continue
            seen = seen or self._shown()  # (what was shown while that fetch was under way)
            if seen is not None and (manifest.etag != seen if isinstance(seen, str) else manifest is not seen):
                log.bind(etag=manifest.etag, tenant=self.key_id).info("mcp.tools.list_changed")
                on_change()
            seen = manifest

    def _shown(self) -> Manifest | str | None:
        """What this tenant's clients were shown last: the current manifest, once a list of it was made
        here; else the list made elsewhere that was answered (its ETag), if one was."""
        current = self.manifest.current
        if current is not None and any(content == current.content for content, _ in self._listed):
            return current
        return self.manifest.listed_etag or current

    # -- work the caller follows itself (tasks) ----------------------------------------------------

    def start(self, tool: Tool, arguments: dict[str, Any], lifetime: float, charge: Charge = NOTHING) -> Invocation:
        """Start the tool's work without waiting for it; the invocation. It counts against the key's
        limits as a call does (started this minute, and running until the work ends upstream, which
        a thread of this process follows for the task's ``lifetime`` at most, in seconds), and was
        ``charge``-d by :meth:`admit`, given back when the work does not start. Raises
        :class:`LimitReached` and :class:`Unreachable`."""
        place = contextlib.ExitStack()
        try:
            place.enter_context(self.limits.call(self.digest))
        except LimitReached:
            charge.refund()
            raise
        try:
            invocation = self.gateway.invoke(tool.slug, arguments, sync=False)
        except GatewayError as exc:
            place.close()
            raise Unreachable.of(exc, results.gateway_failure(tool.name, exc)) from exc
        except BaseException:
            place.close()
            raise
        threading.Thread(target=self._hold_while_running, args=(invocation, place, lifetime),
                         name="mcp-task-place", daemon=True).start()
        return invocation

    def _hold_while_running(self, invocation: Invocation, place: contextlib.ExitStack, lifetime: float) -> None:
        """Give the task's place back once its work ends upstream (or stops answering, or outlives
        its task's ``lifetime``)."""
        with place:
            try:
                follow(self.gateway, invocation, cancelled=threading.Event(), max_wait=lifetime, backoff=self.backoff)
            except (GatewayError, KeyRejected):
                pass

    def invocation(self, invocation_id: str) -> Invocation | None:
        """The invocation as it stands; ``None`` when this key cannot see it. Raises :class:`Unreachable`."""
        try:
            return self.gateway.get_invocation(invocation_id)[0]
        except GatewayError as exc:
            if exc.status == 404:
                return None
            raise Unreachable.of(exc, f"cannot reach ColabHive: {exc.message}") from exc

    def wait(self, invocation: Invocation, cancelled: threading.Event, max_wait: float) -> Invocation | None:
        """Follow the work until it is terminal (then the invocation), or ``None`` when the wait ends
        first: the work itself goes on. Raises :class:`Unreachable`."""
        try:
            outcome = follow(self.gateway, invocation, cancelled=cancelled, max_wait=max_wait, backoff=self.backoff)
        except GatewayError as exc:
            raise Unreachable.of(exc, exc.message) from exc
        return outcome.invocation if outcome.state == "done" else None

    def stop(self, invocation_id: str) -> Invocation | None:
        """Ask the gateway to stop the work: the invocation as it then stands (``None``: the gateway
        has no cancel route). Raises :class:`Unreachable`."""
        try:
            return self.gateway.cancel(invocation_id)
        except GatewayError as exc:
            raise Unreachable.of(exc, f"cannot reach ColabHive to stop it: {exc.message}") from exc

    def listing(self, profile: Profile, version: str) -> tuple[list[dict[str, Any]], str | None]:
        """What ``tools/list`` shows this client profile, spelled as ``version`` says, and the ETag of its
        manifest: from this worker's catalogue, made once per manifest version and given to the other
        workers; or, while this worker holds no copy of the manifest, the list one of them made of the
        copy they share (nothing is built). Raises :class:`ManifestError` and :class:`KeyRejected`."""
        variant = listing_variant(self.policy, profile, version)
        if profile.name not in self._catalogs:
            shared = self.manifest.shared_listing(variant)
            if shared is not None:
                return shared[1], shared[0]
        return self._made_listing(profile, version, variant, claimed=False)

    def list_ahead(self, profile: Profile, version: str) -> None:
        """Make the list a client is about to ask for (it has just said who it is) on a thread of its own,
        while its answer goes out and the next request comes in, perhaps to another worker of the
        instance, which waits for this one's list from now on rather than make its own."""
        if self.manifest.instance is None:  # no other worker: the list is made when it is asked for
            return
        variant = listing_variant(self.policy, profile, version)
        claimed = self.manifest.claim_listing(variant)
        if not self._behind(lambda: self._ahead(profile, version, variant, claimed)):
            self.manifest.made_listing(variant, None, claimed)  # (the list under way is this worker's own)

    def _ahead(self, profile: Profile, version: str, variant: str, claimed: bool) -> None:
        """The list made ahead, unless another worker or an earlier start made it already."""
        if profile.name in self._catalogs or self.manifest.shared_listing(variant, wait=False) is None:
            self._made_listing(profile, version, variant, claimed)
        else:
            self.manifest.made_listing(variant, None, claimed)

    def _made_listing(self, profile: Profile, version: str, variant: str,
                      claimed: bool) -> tuple[list[dict[str, Any]], str | None]:
        """The list this worker makes, given to the others the first time this tenant makes it when it is
        ``claimed`` (or claimed now: the others wait for it meanwhile, and no longer once it fails)."""
        made = None
        try:
            manifest = self.manifest.get()
            saved = None if profile.name in self._catalogs else self.manifest.listing_saved_of(manifest, variant)
            if saved is not None:
                return saved[1], saved[0]  # (an earlier start's list of the manifest the gateway confirmed now)
            new = (manifest.content, variant) not in self._listed
            if new:
                self._listed = {done for done in self._listed if done[0] == manifest.content} | {(manifest.content, variant)}
                claimed = claimed or self.manifest.claim_listing(variant, manifest)
            listing = self._catalog(manifest, profile).listing(version)
            made = (manifest, listing) if new else None
        finally:
            self.manifest.made_listing(variant, made, claimed)
        return listing, manifest.etag

    def _behind(self, make: Callable[[], object]) -> bool:
        """Do ``make`` on a thread of its own (in the request's context: its log fields, its trace), unless
        such a thread is at work already: whether it does. A manifest it cannot get is the next request's
        to hear of."""
        if not self._making.acquire(blocking=False):
            return False

        def run() -> None:
            try:
                make()
            except (ManifestError, KeyRejected):
                pass
            except Exception:  # a bug: logged, and the next request does it again
                log.bind(tenant=self.key_id).exception("tenant.background_failed")
            finally:
                self._making.release()

        try:
            Ahead(run, "tenant-behind")
        except BaseException:
            self._making.release()
            raise
        return True

    def catalog(self, profile: Profile = UNKNOWN) -> Catalog:
        """The tools of the current manifest for this client profile: built once per manifest content
        (its ETag and every entry), policy and profile, and shared with every tenant of this process
        whose manifest is the same (never with one whose manifest differs, whatever its ETag)."""
        return self._catalog(self.manifest.get(), profile)

    def _catalog(self, manifest: Manifest, profile: Profile) -> Catalog:
        catalog = self._catalogs.get(profile.name)
        if catalog is None or catalog.manifest.content != manifest.content or catalog.profile != profile:
            catalog = interning.held(("catalog", manifest.content, self.policy, profile),
                                     lambda: Catalog(manifest, self.policy, profile, BUILTINS))
            self._catalogs = {**{k: c for k, c in self._catalogs.items() if c.manifest.content == manifest.content},
                              profile.name: catalog}
        return catalog

    def max_wait(self, entry: dict[str, Any]) -> float:
        """How long a call of this action waits: by kind, else by latency class, else the default."""
        waits = dict(self.config.poll_max_wait_by)
        return waits.get(entry.get("kind") or "", waits.get(entry.get("latencyClass") or "", self.config.poll_max_wait))

    def prepare(self, name: str, arguments: dict[str, Any], profile: Profile = UNKNOWN,
                narrow: Policy | None = None) -> Prepared:
        """The tool to run and the arguments it gets: those given, less the keys the client's host is
        known to inject (e.g. n8n's ``toolCallId``) that the tool's schema does not ask for (the
        caller's own are left alone). Raises :class:`UnknownTool`, :class:`OutOfScope`, and :class:`Refused` for a call
        refused without the gateway (no tool list, a hidden tool, wrong arguments)."""
        try:
            catalog = self.catalog(profile)
        except ManifestError as exc:
            raise Refused(f"The ColabHive tool list is unavailable: {exc}") from exc
        tool = catalog.by_name.get(name)
        if tool is None:
            retired = upgrade.retired_tool(name)
            if retired is not None:
                raise Refused(retired)
            raise UnknownTool(name)
        refusal = tool.refusal or (narrow.refusal(tool.entry, tool.builtin) if narrow is not None else None)
        if refusal is not None:
            raise Refused(f"Tool {name!r} is not available on this server: {refusal}.")
        wanted = narrow.wants(tool.entry, tool.builtin) if narrow is not None else None
        if wanted is not None:
            refused = OutOfScope(name, wanted)
            metrics.GUARD_DECISIONS.labels("scope_refused").inc()
            log.bind(tenant=self.key_id, tool=name, slug=tool.slug, scope=refused.scope).warning("mcp.scope.refused")
            raise refused
        kept = arguments
        if profile.drop_arguments and not set(arguments).isdisjoint(profile.drop_arguments):
            declared = (tool.entry.get("inputSchema") or {}).get("properties") or {}
            kept = {k: v for k, v in arguments.items() if k not in profile.drop_arguments or k in declared}
        problem = tool.argument_errors(kept)
        if problem is not None:
            raise Refused(problem)
        return Prepared(catalog, tool, kept)

    def call_tool(self, name: str, arguments: dict[str, Any], options: CallOptions) -> dict[str, Any] | None:
        """Run one tool and return its ``CallToolResult`` (``None`` once cancelled): its result, or a
        continuation when it outlives ``options.deadline``.

        ``options.gate`` may stop the call before the gateway hears of it by returning the answer
        to give instead (e.g. the user declined). Raises :class:`UnknownTool` and
        :class:`KeyRejected`; every other failure is an ``isError`` result.
        """
        try:
            catalog, tool, arguments = self.prepare(name, arguments, options.profile, options.narrow)
        except Refused as refused:
            return refused.result
        stop, charge = self.admit(tool, arguments, options.gate)
        if stop is not None:
            return stop
        try:
            with self.limits.call(self.digest):
                call = ToolCall(self, catalog, tool, arguments, options)
                try:
                    return call.answer()
                finally:
                    if call.standing is Standing.ATTACHED:  # (its host's retry: the work was counted)
                        charge.refund()
        except LimitReached as exc:
            charge.refund()
            metrics.ERRORS.labels("tenant_limit").inc()
            return exc.result

    def admit(self, tool: Tool, arguments: dict[str, Any], gate: Gate | None,
              attaches: bool = True) -> tuple[dict[str, Any] | None, Charge]:
        """Count a call of ``tool`` against the key's budget, through ``gate`` (the confirmation
        step, told when the call is past the budget), unless it continues work counted already (its
        host's retry, which a call ``attaches`` to; a task always starts work of its own): the answer
        to give instead, or ``None`` and what the call was charged (see :meth:`.SpendGuard.admit`)."""
        ask = None if gate is None else lambda over: gate(tool, arguments, over)
        again = attaches and self.spend.counts(tool) and self.calls.continues(
            call_key(self.binding, tool.slug, arguments))
        return self.spend.admit(self.digest, self.key_id, tool, ask, again)


@lru_cache(maxsize=64)
def listing_variant(policy: Policy, profile: Profile, version: str) -> str:
    """How a tool list is made, named alike by every worker of an instance (and by none of another
    release): the policy, what of the client's profile shapes the list, the revision's fields."""
    return interning.digest(repr((__version__, policy, listing_shape(profile), revision(version).tool_fields)))
