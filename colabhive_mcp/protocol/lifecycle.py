"""Meeting a client: the legacy handshake (``initialize``, ``logging/setLevel``), 2026's
``server/discover``, and 2026's ``subscriptions/listen``."""

from __future__ import annotations

from typing import Any

from .. import __version__
from ..catalog import profiles
from ..logs import log
from ..revisions import LEGACY_VERSIONS, SUPPORTED_VERSIONS, revision
from ..settings.config import Config
from . import tasks
from .context import Context
from .envelope import LOG_LEVELS, META_SUBSCRIPTION
from .jsonrpc import INVALID_PARAMS, JsonRpcError
from .request import Request, Session

SERVER = {"name": "colabhive-mcp", "title": "ColabHive", "version": __version__,
          "description": "ColabHive actions as MCP tools", "websiteUrl": "https://colabhive.com"}
INSTRUCTIONS = (
    "These tools run ColabHive actions: language models, specialist models, tools and the user's own "
    "trained models. Slow tools may take minutes on a cold start; they report progress while they wait. "
    "A tool with side effects says so in its description."
)


def server_info(version: str) -> dict[str, Any]:
    """This server's ``Implementation``, as ``version`` spells it."""
    return {k: SERVER[k] for k in revision(version).server_info}


def initialize(params: dict[str, Any], session: Session, config: Config, list_changed: bool) -> dict[str, Any]:
    """The legacy handshake: the revision both sides speak (the client's, when we know it)."""
    requested = params.get("protocolVersion")
    if not isinstance(requested, str):
        raise JsonRpcError(INVALID_PARAMS, "initialize needs params.protocolVersion (a string)")
    version = requested if requested in LEGACY_VERSIONS else LEGACY_VERSIONS[0]
    session.version = version
    client_info, declared = params.get("clientInfo"), params.get("capabilities")
    session.client_info = client_info if isinstance(client_info, dict) else {}
    session.capabilities = declared if isinstance(declared, dict) else {}
    log.bind(session=session.id, transport=session.transport, protocol_version=version, requested_version=requested,
             client=session.client_info.get("name"), client_version=session.client_info.get("version"),
             profile=profiles.for_client(session.client_info, config).name, era="legacy").info("mcp.session.started")
    capabilities: dict[str, Any] = {"tools": {"listChanged": list_changed}, "logging": {}}
    if revision(version).core_tasks:
        capabilities["tasks"] = {"cancel": {}, "requests": {"tools": {"call": {}}}}
    return {"protocolVersion": version, "capabilities": capabilities, "serverInfo": server_info(version),
            "instructions": INSTRUCTIONS}


# what this server offers every client, whoever it is (its tools are each key's own: they change)
CAPABILITIES: dict[str, Any] = {"tools": {"listChanged": True}, "logging": {}, "extensions": {tasks.EXTENSION: {}}}
SERVER_CARD_SCHEMA = "https://static.modelcontextprotocol.io/schemas/v1/server-card.schema.json"
REGISTRY_NAME = "com.colabhive/mcp"  # the server's name in the MCP registry (reverse DNS, one slash)
DOCUMENTATION = "https://docs.colabhive.com/mcp"


def discover(request: Request) -> dict[str, Any]:
    return {"supportedVersions": list(SUPPORTED_VERSIONS), "capabilities": CAPABILITIES,
            "instructions": INSTRUCTIONS, "ttlMs": 3_600_000, "cacheScope": "public"}


def server_card(url: str, oauth: bool) -> dict[str, Any]:
    """The MCP Server Card (SEP-2127) of the hosted server whose MCP endpoint is ``url``: who it is,
    where and how to connect, what it offers, from the facts ``server/discover`` gives. It lists no
    tools: those are each key's own (``tools.listChanged``), and a card holds nothing of a tenant's."""
    authentication = {"required": True, "schemes": ["bearer", *(["oauth2"] if oauth else [])]}
    key = {"name": "Authorization", "description": "Bearer followed by your ColabHive API key (X-API-Key: <key> "
           "works too)" + ("; or sign in with OAuth, which needs no header" if oauth else ""),
           "isRequired": not oauth, "isSecret": True, "placeholder": "Bearer hive_..."}
    root = url.rsplit("/", 1)[0]
    remotes = [{"type": "streamable-http", "url": url, "supportedProtocolVersions": list(SUPPORTED_VERSIONS)},
               {"type": "sse", "url": root + "/sse", "supportedProtocolVersions": list(LEGACY_VERSIONS[-1:])}]
    return {"$schema": SERVER_CARD_SCHEMA, "name": REGISTRY_NAME, "version": __version__, "title": SERVER["title"],
            "description": SERVER["description"], "websiteUrl": DOCUMENTATION,
            "remotes": [{**remote, "headers": [key], "authentication": authentication} for remote in remotes],
            "capabilities": CAPABILITIES, "_meta": {"com.colabhive/instructions": INSTRUCTIONS}}


def set_level(context: Context, request: Request) -> dict[str, Any]:
    level = request.params.get("level")
    if level not in LOG_LEVELS:
        raise JsonRpcError(INVALID_PARAMS, f"Invalid log level: {level!r}; use one of {', '.join(LOG_LEVELS)}")
    assert request.session is not None  # a legacy-only method
    request.session.log_level = level
    context.session_changed(request.session)
    return {}


def listen(request: Request) -> dict[str, Any]:
    """2026 ``subscriptions/listen``: acknowledge, then announce tool-list changes until the client
    goes away (a cancelled listen gets no answer) or the server ends it (at shutdown, or when its
    stream reaches ``stream_max_age``), with the completion result. Task status notifications are
    not offered (they are a MAY), but asking for them needs the tasks extension."""
    wanted = request.params.get("notifications")
    if isinstance(wanted, dict) and "taskIds" in wanted:
        tasks.require_extension(request, "notifications for taskIds")
    accepted = {"toolsListChanged": True} if isinstance(wanted, dict) and wanted.get("toolsListChanged") else {}
    tag = {META_SUBSCRIPTION: request.id}
    request.send("notifications/subscriptions/acknowledged", {"_meta": tag, "notifications": accepted})
    if accepted:
        request.tenant.watch(request.cancelled, lambda: request.send("notifications/tools/list_changed", {"_meta": tag}))
    else:
        request.cancelled.wait()
    return {"_meta": tag}
