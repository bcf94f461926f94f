"""The MCP protocol core: both eras, no I/O.

:class:`Server.handle` takes one decoded JSON-RPC message with a small context (the tenant,
the legacy :class:`Session`, a ``notify`` callback, a cancel event) and returns the response
(or ``None``). Transports parse bytes and write answers; they never re-implement any of this.

Eras: a request whose ``params._meta`` carries ``io.modelcontextprotocol/protocolVersion``
is served statelessly under 2026-07-28; anything else (and every ``initialize``) follows
the legacy handshake of 2024-11-05 … 2025-11-25, scoped to the session.
"""

from __future__ import annotations

import base64
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable

from . import __version__, confirm, results, jsonrpc, metrics, profiles, tasks
from .cancellation import SHUTDOWN, USER, Cancellation, reason_of
from .config import Config
from .invocation import ProgressTracker, status_message
from .jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND, JsonRpcError
from .logs import log, logger
from .manifest import ManifestError
from .gateway import GatewayError, is_terminal
from .keys import KeyRejected
from .tenant import Tenant, UnknownTool
from .policy import Policy
from .profiles import UNKNOWN, Profile
from .tools import Tool

LEGACY_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
MODERN_VERSIONS = ("2026-07-28",)
SUPPORTED_VERSIONS = MODERN_VERSIONS + LEGACY_VERSIONS
BATCH_VERSION = "2025-03-26"
TASKS_VERSION = "2025-11-25"  # the one legacy revision with (experimental) core tasks

META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
META_LOG_LEVEL = "io.modelcontextprotocol/logLevel"
META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"
META_SUBSCRIPTION = "io.modelcontextprotocol/subscriptionId"
MIN_WATCH_S = 1.0  # how often, at most, a watched manifest is revalidated

# Implementation fields each older revision knows (later ones: all of them).
SERVER_INFO_FIELDS = {"2024-11-05": ("name", "version"), "2025-03-26": ("name", "version"),
                      "2025-06-18": ("name", "title", "version")}
LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
EARLY_CANCELS_KEPT = 256

INSTRUCTIONS = (
    "These tools run ColabHive actions: language models, specialist models, tools and the user's own "
    "trained models. Slow tools may take minutes on a cold start; they report progress while they wait. "
    "A tool with side effects says so in its description."
)


@dataclass
class Session:
    """Legacy handshake state: one per stdio process, one per HTTP session."""

    id: str = "stdio"
    transport: str = "stdio"
    version: str | None = None
    client_info: dict[str, Any] = field(default_factory=dict)
    capabilities: dict[str, Any] = field(default_factory=dict)
    log_level: str | None = None
    initialized: bool = False


@dataclass
class _Waiter:
    """A request of ours to the client, waiting for its answer."""

    answered: threading.Event = field(default_factory=threading.Event)
    response: dict[str, Any] = field(default_factory=dict)


@dataclass
class Request:
    """One request being served, with what its era says about the client."""

    id: Any
    method: str
    params: dict[str, Any]
    version: str
    modern: bool
    tenant: Tenant
    notify: Callable[[dict[str, Any]], None]
    cancelled: Cancellation
    log_level: str | None = None
    session: Session | None = None
    capabilities: dict[str, Any] = field(default_factory=dict)
    profile: Profile = UNKNOWN
    narrow: Policy | None = None
    meta: dict[str, Any] = field(default_factory=dict)  # params._meta when it is an object

    def send(self, method: str, params: dict[str, Any]) -> None:
        """Emit a notification for this request, unless it has been cancelled."""
        if not self.cancelled.is_set():
            self.notify({"jsonrpc": "2.0", "method": method, "params": params})

    @property
    def progress_token(self) -> str | int | None:
        """The client's progress token, when it sent a usable one."""
        token = self.meta.get("progressToken")
        return token if jsonrpc.is_valid_id(token) else None

    def wants_log(self, level: str) -> bool:
        return self.log_level is not None and LOG_LEVELS.index(level) >= LOG_LEVELS.index(self.log_level)


class Server:
    """The MCP method table over tenants; thread-safe, one instance per process."""

    def __init__(self, config: Config, list_changed: bool = False) -> None:
        """``list_changed``: the transport tells sessions when the tool list changes (stdio does)."""
        self.config = config
        self.list_changed = list_changed
        self.info = {"name": "colabhive-mcp", "title": "ColabHive", "version": __version__,
                     "description": "ColabHive actions as MCP tools", "websiteUrl": "https://colabhive.com"}
        secret = config.session_secret or secrets.token_hex(32)
        self.task_ids = tasks.TaskIds(secret)
        self.request_states = confirm.RequestStates(secret)
        self._pending: dict[tuple[str, str], _Waiter] = {}
        self.draining = False
        self._inflight: dict[tuple[str, Any], Cancellation] = {}
        self._early_cancels: OrderedDict[tuple[str, Any], str | None] = OrderedDict()  # key -> reason
        self._lock = threading.Lock()

    # -- entry points -----------------------------------------------------------------------

    def handle(self, message: Any, *, tenant: Tenant, session: Session,
               notify: Callable[[dict[str, Any]], None] = lambda _m: None,
               cancelled: Cancellation | None = None, narrow: Policy | None = None) -> dict[str, Any] | None:
        """Serve one decoded message; returns the response, or ``None`` when none is due.

        ``narrow`` is a per-request policy (hosted mode) that can only hide more tools.
        """
        try:
            jsonrpc.check_envelope(message)
        except JsonRpcError as exc:
            if isinstance(message, dict) and "method" in message and "id" not in message:
                return None  # a malformed notification: there is nobody to answer
            return jsonrpc.error(jsonrpc.request_id(message), exc)
        if "method" not in message:
            self._resolve(session, message)  # the client's answer to a request of ours
            return None
        if not jsonrpc.is_request(message):
            self._notification(message, session)
            return None
        cancelled = cancelled or Cancellation()
        key = (session.id, message["id"])
        self._track(key, cancelled)
        if self.config.log_frames:
            notify = self._logging_frames(notify)
            log.bind(direction="in", frame=_frame(message)).info("mcp.frame")
        try:  # every record of this request carries its id and the key's hash
            with logger.contextualize(request_id=secrets.token_hex(6), tenant=tenant.key_id):
                response = jsonrpc.result(message["id"], self._dispatch(message, tenant, session, notify, cancelled,
                                                                        narrow))
        except JsonRpcError as exc:
            metrics.ERRORS.labels(f"jsonrpc_{-exc.code}").inc()
            response = jsonrpc.error(message["id"], exc)
        except KeyRejected as exc:
            metrics.ERRORS.labels("key_rejected").inc()
            response = jsonrpc.error(message["id"], key_rejected(exc))
        except Exception:
            metrics.ERRORS.labels("internal").inc()
            log.bind(method=message["method"]).exception("mcp.internal_error")
            response = jsonrpc.internal_error(message)
        finally:
            self._untrack(key)
        answer = None if cancelled.is_set() and not self.draining else response
        if self.config.log_frames and answer is not None:
            log.bind(direction="out", frame=_frame(answer)).info("mcp.frame")
        return answer

    @staticmethod
    def _logging_frames(notify: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
        def logged(message: dict[str, Any]) -> None:
            log.bind(direction="out", frame=_frame(message)).info("mcp.frame")
            notify(message)

        return logged

    def handle_batch(self, messages: list[Any], session: Session, **context: Any) -> list[dict[str, Any]] | dict[str, Any] | None:
        """A JSON-RPC batch: only a 2025-03-26 session may send one."""
        if session.version != BATCH_VERSION:
            return jsonrpc.error(None, JsonRpcError(
                jsonrpc.INVALID_REQUEST, "Invalid Request: batches are only allowed under protocol 2025-03-26"))
        if not messages:
            return jsonrpc.error(None, JsonRpcError(jsonrpc.INVALID_REQUEST, "Invalid Request: empty batch"))
        if any(isinstance(m, dict) and m.get("method") == "initialize" for m in messages):
            return jsonrpc.error(None, JsonRpcError(
                jsonrpc.INVALID_REQUEST, "Invalid Request: initialize must not be part of a batch"))
        answers = [self.handle(m, session=session, **context) for m in messages]
        return [a for a in answers if a is not None] or None

    def cancel(self, session: Session, request_id: Any, reason: str | None = USER) -> None:
        """Cancel an in-flight request, saying why (a cancellation that arrives first is remembered)."""
        key = (session.id, request_id)
        with self._lock:
            event = self._inflight.get(key)
            if event is None:
                self._early_cancels[key] = reason
                while len(self._early_cancels) > EARLY_CANCELS_KEPT:
                    self._early_cancels.popitem(last=False)
        if event is not None:
            event.cancel(reason)

    def ask(self, request: Request, method: str, params: dict[str, Any],
            timeout: float = confirm.ASK_TIMEOUT_S) -> Any:
        """Send the client a request during ``request`` and wait for its result (``None``: no answer)."""
        key = ((request.session or Session()).id, f"colabhive-{secrets.token_hex(8)}")
        waiter = _Waiter()
        with self._lock:
            self._pending[key] = waiter
        try:
            request.notify({"jsonrpc": "2.0", "id": key[1], "method": method, "params": params})
            deadline = time.monotonic() + timeout
            while not waiter.answered.wait(0.2):
                if request.cancelled.is_set() or time.monotonic() > deadline:
                    return None
            return waiter.response.get("result")
        finally:
            with self._lock:
                self._pending.pop(key, None)

    def _resolve(self, session: Session, message: dict[str, Any]) -> None:
        with self._lock:
            waiter = self._pending.get((session.id, message.get("id")))
        if waiter is not None:
            waiter.response = message
            waiter.answered.set()

    def watch_tools(self, tenant: Tenant, stop: threading.Event, on_change: Callable[[], None]) -> None:
        """Until ``stop`` is set: revalidate the tenant's manifest as it expires, and call
        ``on_change`` whenever a new version arrives (its filters are re-applied on the next list)."""
        seen = tenant.manifest.current
        while not stop.wait(max(self.config.manifest_ttl, MIN_WATCH_S)):
            try:
                manifest = tenant.manifest.get()
            except (ManifestError, KeyRejected):
                continue
            if seen is not None and manifest is not seen:
                log.bind(etag=manifest.etag, tenant=tenant.key_id).info("mcp.tools.list_changed")
                on_change()
            seen = manifest

    def cancel_session(self, session: Session) -> None:
        """Cancel the requests in flight of one session (its connection is gone: no reason given)."""
        with self._lock:
            events = [event for (owner, _id), event in self._inflight.items() if owner == session.id]
        for event in events:
            event.cancel(None)

    def drain(self) -> None:
        """Shutting down: cancel everything in flight, but answer each tool call (with an error)."""
        self.draining = True
        self.cancel_all()

    def cancel_all(self) -> None:
        """Cancel every in-flight request, and stop its work upstream (process shutdown)."""
        with self._lock:
            events = list(self._inflight.values())
        for event in events:
            event.cancel(SHUTDOWN)

    # -- plumbing ---------------------------------------------------------------------------

    def _track(self, key: tuple[str, Any], event: Cancellation) -> None:
        with self._lock:
            self._inflight[key] = event
            if key in self._early_cancels:
                event.cancel(self._early_cancels.pop(key))

    def _untrack(self, key: tuple[str, Any]) -> None:
        with self._lock:
            self._inflight.pop(key, None)

    def _notification(self, message: dict[str, Any], session: Session) -> None:
        method, params = message["method"], message.get("params") or {}
        if method == "notifications/initialized":
            session.initialized = True
        elif method == "notifications/cancelled" and jsonrpc.is_valid_id(params.get("requestId")):
            self.cancel(session, params["requestId"], reason_of(params.get("reason")))

    def _dispatch(self, message: dict[str, Any], tenant: Tenant, session: Session,
                  notify: Callable[[dict[str, Any]], None], cancelled: Cancellation,
                  narrow: Policy | None) -> dict[str, Any]:
        method, params = message["method"], message.get("params") or {}
        meta = jsonrpc.meta_of(message)
        if method != "initialize" and META_VERSION in meta:
            request = self._modern_request(message["id"], method, params, meta, tenant, notify, cancelled)
            request.narrow, request.meta = narrow, meta
            handler = self._modern_methods.get(method)
            if handler is None:
                raise JsonRpcError(METHOD_NOT_FOUND, f"Method not found: {method}")
            result = handler(self, request)
            result["resultType"] = result.get("resultType", "complete")
            result.setdefault("_meta", {})[META_SERVER_INFO] = self._server_info(request.version)
            return result
        if method == "initialize":
            return self._initialize(params, session)
        if method == "ping":
            return {}
        handler = self._legacy_methods.get(method)
        if handler is None:
            raise JsonRpcError(METHOD_NOT_FOUND, f"Method not found: {method}")
        if session.version is None:
            raise JsonRpcError(INVALID_PARAMS, "Session not initialized: send initialize first "
                                               "(or use protocol 2026-07-28 with per-request _meta)")
        request = Request(message["id"], method, params, session.version, False, tenant, notify, cancelled,
                          session.log_level, session, session.capabilities,
                          profiles.for_client(session.client_info, self.config), narrow, meta)
        return handler(self, request)

    def _modern_request(self, id_: Any, method: str, params: dict[str, Any], meta: dict[str, Any],
                        tenant: Tenant, notify: Callable[[dict[str, Any]], None],
                        cancelled: Cancellation) -> Request:
        """Validate the 2026 per-request envelope."""
        if META_CAPABILITIES not in meta:
            raise JsonRpcError(INVALID_PARAMS, f"params._meta is missing the required key {META_CAPABILITIES!r}")
        version = meta[META_VERSION]
        if not isinstance(version, str):
            raise JsonRpcError(INVALID_PARAMS, f"params._meta[{META_VERSION!r}] must be a string")
        if version not in MODERN_VERSIONS:
            raise JsonRpcError(jsonrpc.UNSUPPORTED_PROTOCOL_VERSION, f"Unsupported protocol version: {version}",
                               {"supported": list(SUPPORTED_VERSIONS), "requested": version})
        if not isinstance(meta[META_CAPABILITIES], dict):
            raise JsonRpcError(INVALID_PARAMS, f"params._meta[{META_CAPABILITIES!r}] must be an object")
        level = meta.get(META_LOG_LEVEL)
        if level is not None and level not in LOG_LEVELS:
            raise JsonRpcError(INVALID_PARAMS, f"Invalid log level: {level!r}")
        return Request(id_, method, params, version, True, tenant, notify, cancelled, level,
                       capabilities=meta[META_CAPABILITIES],
                       profile=profiles.for_client(meta.get(META_CLIENT_INFO), self.config))

    def _server_info(self, version: str) -> dict[str, Any]:
        keys = SERVER_INFO_FIELDS.get(version, tuple(self.info))
        return {k: self.info[k] for k in keys}

    # -- lifecycle ----------------------------------------------------------------------------

    def _initialize(self, params: dict[str, Any], session: Session) -> dict[str, Any]:
        requested = params.get("protocolVersion")
        if not isinstance(requested, str):
            raise JsonRpcError(INVALID_PARAMS, "initialize needs params.protocolVersion (a string)")
        version = requested if requested in LEGACY_VERSIONS else LEGACY_VERSIONS[0]
        session.version = version
        session.client_info = params.get("clientInfo") if isinstance(params.get("clientInfo"), dict) else {}
        session.capabilities = params.get("capabilities") if isinstance(params.get("capabilities"), dict) else {}
        session.initialized = False
        log.bind(session=session.id, transport=session.transport, protocol_version=version, requested_version=requested,
                 client=session.client_info.get("name"), client_version=session.client_info.get("version"),
                 profile=profiles.for_client(session.client_info, self.config).name,
                 era="legacy").info("mcp.session.started")
        capabilities: dict[str, Any] = {"tools": {"listChanged": self.list_changed}, "logging": {}}
        if version == TASKS_VERSION:
            capabilities["tasks"] = {"cancel": {}, "requests": {"tools": {"call": {}}}}
        return {"protocolVersion": version, "capabilities": capabilities,
                "serverInfo": self._server_info(version), "instructions": INSTRUCTIONS}

    def _discover(self, request: Request) -> dict[str, Any]:
        return {"supportedVersions": list(SUPPORTED_VERSIONS),
                "capabilities": {"tools": {"listChanged": True}, "extensions": {tasks.EXTENSION: {}}},
                "instructions": INSTRUCTIONS, "ttlMs": 3_600_000, "cacheScope": "public"}

    def _set_level(self, request: Request) -> dict[str, Any]:
        level = request.params.get("level")
        if level not in LOG_LEVELS:
            raise JsonRpcError(INVALID_PARAMS, f"Invalid log level: {level!r}; use one of {', '.join(LOG_LEVELS)}")
        assert request.session is not None  # a legacy-only method
        request.session.log_level = level
        return {}

    # -- tools ---------------------------------------------------------------------------------

    def _tools_list(self, request: Request) -> dict[str, Any]:
        try:
            catalog = request.tenant.catalog(request.profile)
        except ManifestError as exc:
            raise JsonRpcError(INTERNAL_ERROR, f"Cannot load the ColabHive tool list: {exc}") from None
        listing = catalog.listing(request.version)
        if request.narrow is not None:
            listing = [t for t in listing if request.narrow.refusal(catalog.by_name[t["name"]].entry,
                                                                    catalog.by_name[t["name"]].builtin) is None]
        fingerprint = _fingerprint(catalog.manifest.etag, len(listing))
        start = _read_cursor(request.params.get("cursor"), fingerprint)
        end = start + self.config.tools_page_size
        whole = start == 0 and end >= len(listing)  # the common case: the cached, pre-encoded list as it is
        result: dict[str, Any] = {"tools": listing if whole else listing[start:end]}
        if end < len(listing):
            result["nextCursor"] = _make_cursor(end, fingerprint)
        if request.modern:
            result.update(ttlMs=int(self.config.manifest_ttl * 1000), cacheScope="private")
        return result

    def _tools_call(self, request: Request) -> dict[str, Any]:
        name, arguments = request.params.get("name"), request.params.get("arguments", {})
        if not isinstance(name, str) or not name:
            raise JsonRpcError(INVALID_PARAMS, "tools/call needs params.name (a string)")
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            raise JsonRpcError(INVALID_PARAMS, "tools/call params.arguments must be an object")
        try:
            if self._as_task(request):
                task = self._start_task(request, name, arguments)
                if task is not None:
                    return task
            progress = request.progress_token is not None  # a host that resets on progress hears it
            result = request.tenant.call_tool(
                name, arguments, version=request.version, cancelled=request.cancelled, on_update=_reporter(request),
                gate=self._gate(request), profile=request.profile, narrow=request.narrow,
                deadline=profiles.wait_budget(request.profile, progress),
                heartbeat=profiles.heartbeat(request.profile, progress, self.config.progress_heartbeat))
        except UnknownTool:
            raise JsonRpcError(INVALID_PARAMS, f"Unknown tool: {name}") from None
        if result is None and self.draining:
            return results.error_result(f"The ColabHive MCP server is restarting: {name!r} was stopped and "
                                        "cancelled on ColabHive before it finished. Please try again.")
        return result if result is not None else {"content": []}

    def _gate(self, request: Request) -> Callable[[Tool, dict[str, Any]], dict[str, Any] | None] | None:
        """The confirmation step for tools with side effects, if the policy asks for one."""
        policy = self.config.confirm_side_effects
        if policy == "off":
            return None

        def gate(tool: Tool, arguments: dict[str, Any]) -> dict[str, Any] | None:
            """``None`` to run the tool, else the result to answer instead."""
            if not confirm.needs_confirmation(policy, tool):
                return None
            if "elicitation" not in request.capabilities:
                if policy == "ask":
                    return None
                if request.modern:
                    raise JsonRpcError(jsonrpc.MISSING_REQUIRED_CLIENT_CAPABILITY,
                                       f"Tool {tool.name!r} needs the user's confirmation (elicitation)",
                                       {"requiredCapabilities": {"elicitation": {}}})
                return results.error_result(
                    f"Tool {tool.name!r} has side effects and this server runs it only with the user's "
                    "confirmation, which this client cannot ask for (no elicitation capability).")
            form = confirm.elicitation(tool, arguments, request.version)
            if not request.modern:
                return None if confirm.accepted(self.ask(request, "elicitation/create", form)) else confirm.declined(tool)
            answers = request.params.get("inputResponses") or {}
            if confirm.INPUT_KEY in answers and self.request_states.valid(
                    request.params.get("requestState"), request.tenant.binding, tool, arguments):
                return None if confirm.accepted(answers[confirm.INPUT_KEY]) else confirm.declined(tool)
            return {"resultType": "input_required",
                    "inputRequests": {confirm.INPUT_KEY: {"method": "elicitation/create", "params": form}},
                    "requestState": self.request_states.issue(request.tenant.binding, tool, arguments)}

        return gate

    # -- tasks ---------------------------------------------------------------------------------

    @staticmethod
    def _as_task(request: Request) -> bool:
        """A 2025-11-25 call that asks for a task, or a 2026 call from a client with the extension."""
        if request.modern:
            return tasks.EXTENSION in (request.capabilities.get("extensions") or {})
        return request.version == TASKS_VERSION and isinstance(request.params.get("task"), dict)

    def _start_task(self, request: Request, name: str, arguments: dict[str, Any]) -> dict[str, Any] | None:
        """The task for a long-running tool; ``None`` when the call should simply run (2026)."""
        prepared = request.tenant.prepare(name, arguments, request.profile, request.narrow)
        if isinstance(prepared, dict):
            return prepared
        _, tool = prepared
        if not tool.long_running:
            if request.modern:
                return None
            raise JsonRpcError(METHOD_NOT_FOUND, f"Tool {name!r} does not run as a task (taskSupport forbidden)")
        try:
            ref, invocation = tasks.start(self.task_ids, request.tenant, tool, arguments)
        except GatewayError as exc:
            return results.error_result(results.gateway_failure(name, exc))
        fields = tasks.task_fields(ref, invocation)
        log.bind(tool=name, slug=tool.slug, tenant=request.tenant.key_id, invocation_id=ref.invocation_id,
                 era="modern" if request.modern else "legacy").info("mcp.task.created")
        return {"resultType": "task", **tasks.modern_fields(fields)} if request.modern else {"task": fields}

    def _task(self, request: Request) -> tasks.TaskRef:
        if request.modern:
            tasks.require_extension(request.capabilities)
        elif request.version != TASKS_VERSION:
            raise JsonRpcError(METHOD_NOT_FOUND, f"Method not found: {request.method} (tasks need protocol {TASKS_VERSION})")
        return self.task_ids.find(request.tenant, request.params.get("taskId"))

    def _tasks_get(self, request: Request) -> dict[str, Any]:
        ref = self._task(request)
        invocation = tasks.fetch(request.tenant, ref)
        fields = tasks.task_fields(ref, invocation)
        if not request.modern:
            return fields
        fields = tasks.modern_fields(fields)
        if fields["status"] in ("completed", "failed"):  # an upstream failure is a completed isError result
            fields.update(status="completed", result=tasks.outcome(request.tenant, ref, invocation, request.version))
        return fields

    def _tasks_result(self, request: Request) -> dict[str, Any]:
        ref = self._task(request)
        invocation = tasks.wait(request.tenant, ref, request.cancelled)
        if invocation is None:
            raise JsonRpcError(INTERNAL_ERROR, "Stopped waiting before the task finished (the server may be "
                               "restarting); the task is still running: call tasks/result again")
        result = tasks.outcome(request.tenant, ref, invocation, request.version)
        result.setdefault("_meta", {})[tasks.RELATED_TASK] = {"taskId": ref.task_id}
        return result

    def _tasks_cancel(self, request: Request) -> dict[str, Any]:
        ref = self._task(request)
        if not request.modern and is_terminal(tasks.fetch(request.tenant, ref)):
            raise JsonRpcError(INVALID_PARAMS, "Cannot cancel a task that has already finished")
        invocation = tasks.cancel(request.tenant, ref)
        return {} if request.modern else tasks.task_fields(ref, invocation, status="cancelled")

    def _listen(self, request: Request) -> dict[str, Any]:
        """2026 ``subscriptions/listen``: acknowledge, then announce tool-list changes until the
        client goes away (a cancelled listen gets no answer) or the server shuts down."""
        wanted = request.params.get("notifications")
        accepted = {"toolsListChanged": True} if isinstance(wanted, dict) and wanted.get("toolsListChanged") else {}
        tag = {META_SUBSCRIPTION: request.id}
        request.send("notifications/subscriptions/acknowledged", {"_meta": tag, "notifications": accepted})
        if accepted:
            self.watch_tools(request.tenant, request.cancelled,
                             lambda: request.send("notifications/tools/list_changed", {"_meta": tag}))
        else:
            request.cancelled.wait()
        return {"_meta": tag}

    def _tasks_update(self, request: Request) -> dict[str, Any]:
        self._task(request)
        return {}  # no task of ours ever waits for input

    _legacy_methods: dict[str, Callable[..., dict[str, Any]]] = {
        "logging/setLevel": _set_level, "tools/list": _tools_list, "tools/call": _tools_call,
        "tasks/get": _tasks_get, "tasks/result": _tasks_result, "tasks/cancel": _tasks_cancel}
    _modern_methods: dict[str, Callable[..., dict[str, Any]]] = {
        "server/discover": _discover, "tools/list": _tools_list, "tools/call": _tools_call,
        "subscriptions/listen": _listen,
        "tasks/get": _tasks_get, "tasks/cancel": _tasks_cancel, "tasks/update": _tasks_update}


def key_rejected(exc: KeyRejected) -> JsonRpcError:
    """What a client is told when the gateway refuses its key: that the key is bad, not "internal"."""
    return JsonRpcError(jsonrpc.KEY_REJECTED, f"{exc.message[0].upper()}{exc.message[1:]}. Check the API key: "
                        "COLABHIVE_API_KEY for a local server, the Authorization or X-API-Key header for a "
                        "hosted one.")


def _reporter(request: Request) -> Callable[[dict[str, Any]], None] | None:
    """Turn invocation updates into progress notifications and/or log messages for this request."""
    token = request.progress_token
    if token is None and not request.wants_log("info"):
        return None
    tracker = ProgressTracker()
    with_message = request.version != "2024-11-05"

    def report(invocation: dict[str, Any]) -> None:
        value, total, message = tracker.advance(invocation)
        if token is not None:
            params: dict[str, Any] = {"progressToken": token, "progress": value, "total": total}
            if with_message:
                params["message"] = message
            request.send("notifications/progress", params)
        if request.wants_log("info"):
            request.send("notifications/message", {"level": "info", "logger": "colabhive",
                                                   "data": f"{request.params.get('name')}: {status_message(invocation)}"})

    return report


def _frame(message: Any, limit: int = 4000) -> str:
    """A JSON-RPC frame as logged (redacted by the log pipeline), cut at ``limit`` characters."""
    text = jsonrpc.encode(message).decode("utf-8", "replace")
    return text if len(text) <= limit else text[:limit] + "…"


def _fingerprint(etag: str | None, count: int) -> str:
    return f"{etag or ''}|{count}"


def _make_cursor(offset: int, fingerprint: str) -> str:
    return base64.urlsafe_b64encode(f"{offset}:{fingerprint}".encode()).decode().rstrip("=")


def _read_cursor(cursor: Any, fingerprint: str) -> int:
    if cursor is None or cursor == "":
        return 0
    try:
        text = base64.urlsafe_b64decode(str(cursor) + "=" * (-len(str(cursor)) % 4)).decode()
        offset, _, stamp = text.partition(":")
        if stamp == fingerprint and int(offset) >= 0:
            return int(offset)
    except (ValueError, UnicodeDecodeError):
        pass
    raise JsonRpcError(INVALID_PARAMS, "Invalid or expired cursor: list the tools again from the start")
