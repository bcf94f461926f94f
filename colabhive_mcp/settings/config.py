"""Configuration: one table of settings, resolved as flag > environment > config file > default.

Every setting is a field of :class:`Config` whose metadata says how to parse it, which
environment variable and command-line flag set it, whether it is secret, and which mode it
applies to (its scope). The CLI builds each command's flags from this table; :mod:`.sources`
resolves it, and ``colabhive-mcp config`` prints where each value came from.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable

from .parsers import (API_PREFIX, address, bind, boolean, by_name, choice, number, public_address, seconds_by_name,
                      secret, text, url, words)

DEFAULT_API_URL = "https://api.colabhive.com"
CONFIG_ENV = "COLABHIVE_MCP_CONFIG"
STABILITIES = ("experimental", "beta", "stable")
PROFILE_NAMES = ("claude-code", "claude-desktop", "cursor", "vscode", "gemini", "n8n", "inspector", "unknown")
SCOPES = ("all", "stdio", "http")  # every mode that reaches the gateway; the stdio server only; serve only


class ConfigError(ValueError):
    """One or more settings are invalid; the message names each one and where it came from."""


def _setting(default: Any, parse: Callable[[Any], Any], help: str, *, env: str | None = None,
             secret: bool = False, metavar: str | None = None, example: Any = None,
             aliases: tuple[str, ...] = (), scope: str | None = None) -> Any:
    """A setting; ``example`` is shown in the example config file when there is no default.

    ``aliases`` are the names colabhive-mcp 0.3.4 gave it, accepted in every form: the flag
    ``--old-name``, the variable ``COLABHIVE_OLD_NAME`` and the file key ``old_name``.
    ``scope`` is one of :data:`SCOPES`: "http" when the help starts with "HTTP:", else "all" unless given.
    """
    return field(default=default, metadata={
        "parse": parse, "help": help, "env": env, "secret": secret, "metavar": metavar, "example": example,
        "aliases": aliases, "scope": scope or ("http" if help.startswith("HTTP: ") else "all")})


@dataclass(frozen=True)
class Config:
    """The resolved settings. Field metadata drives parsing, flags, env names and ``describe``."""

    api_key: str | None = _setting(
        None, text, "ColabHive API key (hive_...)", env="COLABHIVE_API_KEY", secret=True, metavar="KEY")
    api_url: str = _setting(
        DEFAULT_API_URL + API_PREFIX, url, "Builder Gateway base URL", env="COLABHIVE_API_URL", metavar="URL")
    gateway_proxy: str | None = _setting(
        None, address, "the proxy to reach the gateway through (HTTP(S)_PROXY are never used: the key would go "
        "to them)", env="COLABHIVE_GATEWAY_PROXY", metavar="URL", example="http://proxy.internal:3128")
    allow_http_gateway: bool = _setting(
        False, boolean, "accept a plain http:// gateway that is not on this machine (the key would travel in "
        "clear)", env="COLABHIVE_ALLOW_HTTP_GATEWAY")
    account_id: str | None = _setting(
        None, text, "optional X-Account-ID sent to the gateway", env="COLABHIVE_ACCOUNT_ID", metavar="ID")
    request_timeout: float = _setting(
        30.0, number(float, 1, 600), "seconds to wait for one gateway response", env="COLABHIVE_REQUEST_TIMEOUT",
        aliases=("http_timeout",))
    retries: int = _setting(
        3, number(int, 0, 10), "retries of idempotent gateway requests on connection errors and 502/503/504",
        env="COLABHIVE_RETRIES")
    manifest_ttl: float = _setting(
        60.0, number(float, 0, 86400), "seconds a fetched manifest is used before it is revalidated",
        env="COLABHIVE_MANIFEST_TTL")
    manifest_stale_while_revalidate: float = _setting(
        300.0, number(float, 0, 86400), "seconds past manifest_ttl that a key's copy is still served at once while "
        "one revalidation runs in the background (0: the list that finds it expired waits for the gateway)",
        env="COLABHIVE_MANIFEST_STALE_WHILE_REVALIDATE", metavar="SECONDS")
    manifest_etag: bool = _setting(
        True, boolean, "revalidate the manifest with its ETag (off: fetch it whole every manifest_ttl)",
        env="COLABHIVE_MANIFEST_ETAG", aliases=("use_etag", "etag"))
    rejected_key_ttl: float = _setting(
        30.0, number(float, 0, 86400), "HTTP: seconds a key the gateway rejected is answered 401 without asking "
        "it again", env="COLABHIVE_REJECTED_KEY_TTL")
    manifest_pin: str | None = _setting(
        None, text, "only ever serve the manifest with this ETag", env="COLABHIVE_MANIFEST_PIN", metavar="ETAG")
    manifest_snapshot: str | None = _setting(
        None, text, "serve the manifest from this JSON file instead of the gateway (stdio and single-tenant only: "
        "hosted mode could not check keys)",
        env="COLABHIVE_MANIFEST_SNAPSHOT", metavar="FILE")
    manifest_cache: bool = _setting(
        True, boolean, "keep the last manifest, and the tool lists made of it, on disk from one start to the next "
        "($XDG_CACHE_HOME/colabhive-mcp, mode 0600; never the key): within manifest_ttl of the gateway's last word on "
        "it, the next start lists its tools from it at once and asks the gateway behind the answer; older, it asks "
        "with its ETag whether it is current, instead of downloading it again", env="COLABHIVE_MANIFEST_CACHE",
        scope="stdio")
    allow: tuple[str, ...] = _setting(
        ("*",), words, "glob patterns of action slugs to expose", env="COLABHIVE_ALLOW", metavar="GLOBS",
        aliases=("allow_tools",))
    deny: tuple[str, ...] = _setting(
        (), words, "glob patterns of action slugs to hide", env="COLABHIVE_DENY", metavar="GLOBS",
        aliases=("deny_tools",))
    kinds: tuple[str, ...] = _setting(
        (), words, "only expose actions of these kinds (empty: all)", env="COLABHIVE_KINDS", metavar="KINDS",
        aliases=("allow_kinds",))
    side_effects: tuple[str, ...] = _setting(
        ("*",), words, "side effects an exposed action may have ('*': any, empty: none)",
        env="COLABHIVE_SIDE_EFFECTS", metavar="EFFECTS")
    deny_side_effects: tuple[str, ...] = _setting(
        (), words, "hide actions with any of these side effects, e.g. writes,billing ('*': any; and actions that "
        "do not say what side effects they have)", env="COLABHIVE_DENY_SIDE_EFFECTS", metavar="EFFECTS")
    read_only: bool = _setting(
        False, boolean, "expose only actions without side effects", env="COLABHIVE_READ_ONLY")
    min_stability: str = _setting(
        "experimental", choice(*STABILITIES), "hide actions less stable than this",
        env="COLABHIVE_MIN_STABILITY", metavar="LEVEL", aliases=("stability",))
    confirm_side_effects: str = _setting(
        "off", choice("off", "ask", "require"), "ask the user (MCP elicitation) before a tool with side effects "
        "runs: off, ask (when the client can), require (refuse when it cannot)", env="COLABHIVE_CONFIRM_SIDE_EFFECTS",
        metavar="POLICY")
    tenant_max_concurrent: int = _setting(
        32, number(int, 0, 100000), "tool calls one key may have running at once (0: no limit)",
        env="COLABHIVE_TENANT_MAX_CONCURRENT")
    tenant_calls_per_minute: int = _setting(
        0, number(int, 0, 10_000_000), "tool calls one key may start per minute (0: no limit; the gateway owns "
        "quotas, and its 429 reaches the client with its Retry-After)",
        env="COLABHIVE_TENANT_CALLS_PER_MINUTE", aliases=("max_calls_per_minute",))
    billable_calls_per_hour: int = _setting(
        0, number(int, 0, 10_000_000), "calls of billable actions (the billing side effect, and billable_tools) one "
        "key may make in any hour, counted across the instance (0: no budget); past it, spend_guard decides",
        env="COLABHIVE_BILLABLE_CALLS_PER_HOUR", example=50)
    billable_calls_per_day: int = _setting(
        0, number(int, 0, 10_000_000), "calls of billable actions one key may make in any 24 hours (0: no budget)",
        env="COLABHIVE_BILLABLE_CALLS_PER_DAY", example=500)
    spend_guard: str = _setting(
        "confirm", choice("confirm", "refuse"), "past a billable-calls budget: confirm (ask the user, through the "
        "client, whether this call may go on; refused when the client cannot ask) or refuse",
        env="COLABHIVE_SPEND_GUARD", metavar="GUARD")
    billable_tools: tuple[str, ...] = _setting(
        (), words, "glob patterns of action slugs that count as billable besides those with the billing side effect",
        env="COLABHIVE_BILLABLE_TOOLS", metavar="GLOBS")
    billable_weights: tuple[tuple[str, int], ...] = _setting(
        (), by_name(int, 1, 100, "N", "image-*=5"), "how many billable calls (1 to 100) one call of an action counts "
        "as, by glob of its slug, e.g. image-*=5,cold-*=2 (the first match; else 1)",
        env="COLABHIVE_BILLABLE_WEIGHTS", metavar="PAIRS")
    sync_timeout: int = _setting(
        1, number(int, 1, 300), "seconds the gateway may hold an invoke before answering 'queued'",
        env="COLABHIVE_SYNC_TIMEOUT")
    poll_max_wait: float = _setting(
        300.0, number(float, 1, 86400), "longest a tool call waits for queued work before it returns",
        env="COLABHIVE_POLL_MAX_WAIT")
    poll_max_wait_by: tuple[tuple[str, float], ...] = _setting(
        (), seconds_by_name(1), "poll_max_wait for some kinds or latency classes, e.g. slow=900,batch=3600 (a kind wins)",
        env="COLABHIVE_POLL_MAX_WAIT_BY", metavar="PAIRS")
    host_deadline: float | None = _setting(
        None, number(float, 0, 86400), "seconds every host is taken to wait for one tool call (0: no limit; "
        "default: each client profile's own, e.g. 240 for Claude Desktop, 350 for Claude Code)",
        env="COLABHIVE_HOST_DEADLINE", example=60.0)
    host_deadlines: tuple[tuple[str, float], ...] = _setting(
        (), seconds_by_name(0, PROFILE_NAMES), "host_deadline for some client profiles, e.g. "
        "claude-desktop=240,cursor=90", env="COLABHIVE_HOST_DEADLINES", metavar="PAIRS")
    host_timeout_grace: float = _setting(
        300.0, number(float, 0, 86400), "seconds a call whose host gave up keeps running upstream, for a retry to "
        "attach to (then it is cancelled)", env="COLABHIVE_HOST_TIMEOUT_GRACE")
    poll_initial: float = _setting(
        0.25, number(float, 0.01, 60), "first poll interval in seconds", env="COLABHIVE_POLL_INITIAL")
    poll_max_interval: float = _setting(
        5.0, number(float, 0.05, 600), "longest interval between two polls", env="COLABHIVE_POLL_MAX_INTERVAL",
        aliases=("poll_interval",))
    progress_heartbeat: float = _setting(
        10.0, number(float, 0.1, 3600), "seconds between progress notifications while nothing changes",
        env="COLABHIVE_PROGRESS_HEARTBEAT")
    client_profile: str = _setting(
        "auto", choice("auto", *PROFILE_NAMES), "client profile: auto (from clientInfo.name) or one of "
        + ", ".join(PROFILE_NAMES), env="COLABHIVE_CLIENT_PROFILE", metavar="NAME")
    tool_name_max: int = _setting(
        0, number(int, 0, 128), "longest tool name (0: the client profile's; hosts prefix the server name)",
        env="COLABHIVE_TOOL_NAME_MAX")
    max_tools: int | None = _setting(
        None, number(int, 0, 100000), "most tools listed, the rest found with colabhive__search_tools "
        "(0: all; default: the client profile's)", env="COLABHIVE_MAX_TOOLS", example=40)
    max_image_bytes: int | None = _setting(
        None, number(int, 0, 1 << 30), "largest image inlined in a result (default: the client profile's)",
        env="COLABHIVE_MAX_IMAGE_BYTES", example=1048576)
    max_text_chars: int | None = _setting(
        None, number(int, 100, 1 << 30), "longest text in a result before it is cut (default: the profile's)",
        env="COLABHIVE_MAX_TEXT_CHARS", example=100000)
    drop_arguments: tuple[str, ...] | None = _setting(
        None, words, "argument keys hosts inject that are dropped when a tool's schema does not name them "
        "(default: the client profile's, e.g. toolCallId)", env="COLABHIVE_DROP_ARGUMENTS", metavar="KEYS",
        example=("toolCallId",))
    tools_page_size: int = _setting(
        500, number(int, 1, 100000), "tools per tools/list page", env="COLABHIVE_TOOLS_PAGE_SIZE")
    max_message_bytes: int = _setting(
        4 * 1024 * 1024, number(int, 1024, 1 << 30), "largest JSON-RPC message accepted",
        env="COLABHIVE_MAX_MESSAGE_BYTES")
    manifest_max_bytes: int = _setting(
        32 << 20, number(int, 1 << 16, 1 << 32), "most bytes one manifest page of the gateway may hold, decoded",
        env="COLABHIVE_MANIFEST_MAX_BYTES")
    result_max_bytes: int = _setting(
        64 << 20, number(int, 1 << 16, 1 << 32), "most bytes any other answer of the gateway (an invocation and "
        "its result) may hold, decoded", env="COLABHIVE_RESULT_MAX_BYTES")
    workers: int = _setting(
        64, number(int, 1, 1024), "threads serving stdio tool calls concurrently (above tenant_max_concurrent, "
        "a call past that limit is refused at once, not queued)", env="COLABHIVE_WORKERS",
        scope="stdio")
    bind: str = _setting(
        "127.0.0.1:8765", bind, "HTTP: address to listen on (HOST:PORT)", env="COLABHIVE_BIND", metavar="HOST:PORT")
    single_tenant: bool = _setting(
        False, boolean, "HTTP: serve only the configured key (loopback only), not the request's key",
        env="COLABHIVE_SINGLE_TENANT")
    session_secret: str | None = _setting(
        None, secret, "HTTP: secret that signs session ids; every instance behind one address needs the same",
        env="COLABHIVE_SESSION_SECRET", secret=True, metavar="HEX")
    session_max_age: float = _setting(
        86400.0, number(float, 60, 30 * 86400), "HTTP: seconds a session id stays valid",
        env="COLABHIVE_SESSION_MAX_AGE")
    public_url: str | None = _setting(
        None, public_address, "HTTP: the address hosts reach /mcp at, e.g. https://mcp.colabhive.com/mcp; set, "
        "the server is an OAuth resource server with its own authorization server (see oauth), and its host name "
        "is accepted", env="COLABHIVE_PUBLIC_URL", metavar="URL", example="https://mcp.example.com/mcp")
    oauth: bool | None = _setting(
        None, boolean, "HTTP: let hosts connect with OAuth: the user pastes the key once, on this server's consent "
        "page, and the host gets tokens that carry it sealed (default: on when public_url is set)",
        env="COLABHIVE_OAUTH")
    oauth_access_token_ttl: float = _setting(
        3600.0, number(float, 5, 86400), "HTTP: seconds an OAuth access token is valid",
        env="COLABHIVE_OAUTH_ACCESS_TOKEN_TTL")
    oauth_refresh_token_ttl: float = _setting(
        30 * 86400.0, number(float, 300, 365 * 86400), "HTTP: seconds an OAuth refresh token is valid (each is "
        "used once: a refresh hands out a new one)", env="COLABHIVE_OAUTH_REFRESH_TOKEN_TTL")
    oauth_redirect_schemes: tuple[str, ...] = _setting(
        ("https", "http"), words, "HTTP: URI schemes an OAuth client may be redirected to (http: to loopback "
        "only, per RFC 8252; add e.g. cursor for an app's own scheme)", env="COLABHIVE_OAUTH_REDIRECT_SCHEMES",
        metavar="SCHEMES")
    oauth_consents_per_minute: int = _setting(
        10, number(int, 0, 100000), "HTTP: keys one client address (an IPv6 /64) may submit on the consent page "
        "per minute; past it, 429 (0: no limit)", env="COLABHIVE_OAUTH_CONSENTS_PER_MINUTE")
    oauth_token_requests_per_minute: int = _setting(
        300, number(int, 0, 1_000_000), "HTTP: requests one client address (an IPv6 /64) may send to the OAuth "
        "token endpoint per minute; past it, 429 (0: no limit). A host's servers send every user's refreshes: "
        "leave room for them", env="COLABHIVE_OAUTH_TOKEN_REQUESTS_PER_MINUTE")
    oauth_refreshes_per_minute: int = _setting(
        30, number(int, 0, 1_000_000), "HTTP: OAuth refreshes of one key's grants per minute, from every client "
        "(a host refreshes once per access token's life); past it, 429 (0: no limit)",
        env="COLABHIVE_OAUTH_REFRESHES_PER_MINUTE")
    oauth_document_fetches_per_minute: int = _setting(
        30, number(int, 0, 1_000_000), "HTTP: OAuth client metadata documents (and key sets) that requests from one "
        "client address (an IPv6 /64) may have this server fetch per minute; documents it keeps do not count; past "
        "it, 429 (0: no limit)", env="COLABHIVE_OAUTH_DOCUMENT_FETCHES_PER_MINUTE")
    oauth_loopback_clients: bool = _setting(
        False, boolean, "HTTP: for tests only: fetch OAuth client metadata documents from this machine (over "
        "plain http too); otherwise only https on public addresses", env="COLABHIVE_OAUTH_LOOPBACK_CLIENTS")
    allowed_hosts: tuple[str, ...] = _setting(
        (), words, "HTTP: Host names accepted besides loopback ('*': any)", env="COLABHIVE_ALLOWED_HOSTS",
        metavar="HOSTS")
    allowed_origins: tuple[str, ...] = _setting(
        (), words, "HTTP: browser origins allowed (CORS), e.g. https://app.example.com",
        env="COLABHIVE_ALLOWED_ORIGINS", metavar="ORIGINS", aliases=("cors_origins",))
    tenant_max_streams: int = _setting(
        8, number(int, 0, 100000), "HTTP: streams (GET /mcp, /sse, subscriptions/listen) and tasks/result waits "
        "one key may hold open at once, across the instance (0: no limit)", env="COLABHIVE_TENANT_MAX_STREAMS")
    stream_max_age: float = _setting(
        1800.0, number(float, 1, 86400), "HTTP: seconds a stream or a tasks/result wait stays open; then it ends "
        "and the client reconnects", env="COLABHIVE_STREAM_MAX_AGE")
    http_long_requests: int | None = _setting(
        None, number(int, 1, 10000), "HTTP: requests per worker that may hold a thread for long (tool calls, "
        "streams, waits, waits for the gateway's word on a key); past it, 503 with Retry-After (default: "
        "http_threads less a quarter, kept for short requests and health checks)",
        env="COLABHIVE_HTTP_LONG_REQUESTS", example=1536)
    cold_fetches_per_minute: int = _setting(
        1200, number(int, 0, 1_000_000), "HTTP: keys the instance has not seen that it checks with the gateway "
        "per minute, from all addresses; past it, 503 with Retry-After (0: no limit)",
        env="COLABHIVE_COLD_FETCHES_PER_MINUTE")
    rejected_keys_per_minute: int = _setting(
        20, number(int, 0, 1_000_000), "HTTP: keys the gateway rejected that one client address (an IPv6 /64) "
        "may send per minute, and an IPv6 /48 four times as many; past it, its new keys get 429 with "
        "Retry-After, unchecked (0: no limit)",
        env="COLABHIVE_REJECTED_KEYS_PER_MINUTE")
    accepted_key_ttl: float = _setting(
        7 * 86400.0, number(float, 0, 365 * 86400), "HTTP: seconds a key the gateway accepted is remembered (as a "
        "hash, across restarts), so that it returns without waiting for the new-key budgets; the gateway still "
        "checks it", env="COLABHIVE_ACCEPTED_KEY_TTL")
    pool_size: int = _setting(
        64, number(int, 1, 100000), "HTTP: tenants (API keys) kept warm per worker", env="COLABHIVE_POOL_SIZE")
    http_workers: int = _setting(
        2, number(int, 1, 256), "HTTP: gunicorn worker processes", env="COLABHIVE_HTTP_WORKERS")
    http_threads: int = _setting(
        2048, number(int, 1, 10000), "HTTP: threads per worker (each long call holds one: a sleeping thread is cheap)",
        env="COLABHIVE_HTTP_THREADS")
    runtime_dir: str | None = _setting(
        None, text, "HTTP: the instance's private directory, shared by its workers (the instance store, the cancel "
        "relay); default: $RUNTIME_DIRECTORY under systemd, else one that serve makes and removes",
        env="COLABHIVE_RUNTIME_DIR", metavar="DIR")
    state_dir: str | None = _setting(
        None, text, "HTTP: the instance's lasting directory, shared by its workers, where what must outlive a stop is "
        "kept (what each key spent against its budget); default: $STATE_DIRECTORY under systemd, else the runtime "
        "directory, and a stop starts every budget afresh", env="COLABHIVE_STATE_DIR", metavar="DIR")
    store_max_entries: int = _setting(
        100_000, number(int, 1000, 10_000_000), "HTTP: entries the instance store keeps at most (the soonest to "
        "expire go first), and as many single-use marks (OAuth grants, used confirmations), which are never let "
        "go before they expire: when they are all live, new OAuth grants are refused", env="COLABHIVE_STORE_MAX_ENTRIES")
    resumable_streams: bool | None = _setting(
        None, boolean, "HTTP: offer the GET stream and SSE resumption, which need a session's requests to "
        "reach the same process (default: in single-tenant mode)", env="COLABHIVE_RESUMABLE_STREAMS")
    sse_poll_after: float = _setting(
        0.0, number(float, 0, 86400), "HTTP: hand a resumable SSE answer over to a GET reconnection after this "
        "many seconds (0: never)", env="COLABHIVE_SSE_POLL_AFTER")
    metrics_token: str | None = _setting(
        None, text, "HTTP: bearer token /metrics requires (unset: open; keep it off the public side in nginx)",
        env="COLABHIVE_METRICS_TOKEN", secret=True, metavar="TOKEN")
    shutdown_grace: float = _setting(
        45.0, number(float, 0, 3600), "HTTP: on SIGTERM, seconds calls in flight may still finish before they are "
        "cancelled upstream and answered with an error", env="COLABHIVE_SHUTDOWN_GRACE")
    sse_keepalive: float = _setting(
        15.0, number(float, 0.1, 3600), "HTTP: seconds between SSE keep-alive comments", env="COLABHIVE_SSE_KEEPALIVE")
    log_level: str = _setting(
        "info", choice("debug", "info", "warning", "error"), "log level, on stderr (check, tools and call: "
        "warning unless it is set)", env="COLABHIVE_LOG_LEVEL", metavar="LEVEL")
    log_frames: bool = _setting(
        False, boolean, "log every JSON-RPC frame (redacted, cut at 4000 characters) for debugging",
        env="COLABHIVE_LOG_FRAMES", aliases=("log_jsonrpc",))
    log_format: str = _setting(
        "auto", choice("auto", "json", "text"), "log format: json lines, text, or auto (text on a terminal)",
        env="COLABHIVE_LOG_FORMAT", metavar="FORMAT")
    log_file: str | None = _setting(
        None, text, "append logs to this file instead of stderr", env="COLABHIVE_LOG_FILE", metavar="FILE")

    @property
    def oauth_on(self) -> bool:
        """Whether the server offers OAuth: ``oauth``, by default on once ``public_url`` is set."""
        return bool(self.public_url) and self.oauth is not False

    def replace(self, **changes: Any) -> "Config":
        return dataclasses.replace(self, **changes)


SETTINGS: tuple[dataclasses.Field, ...] = dataclasses.fields(Config)
