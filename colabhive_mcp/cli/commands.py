"""The CLI's commands for humans: check, tools, call, client-config.

``tools`` and ``call`` go through the protocol core exactly as an agent's requests do, so what
they show is what the agent gets.
"""

from __future__ import annotations

import base64
import json
import sys
import time
from pathlib import Path
from typing import Any

from .. import __version__, results
from ..config import Config
from ..keys import KeyRejected
from ..manifest import ManifestError
from ..profiles import for_client
from ..protocol import LEGACY_VERSIONS, Server, Session
from ..tenant import Tenant

# exit codes of `check`
OK, NO_KEY, UNREACHABLE, KEY_REJECTED, NO_TOOLS = 0, 3, 4, 5, 6
EXTENSIONS = {"image/png": ".png", "image/jpeg": ".jpg", "image/webp": ".webp", "audio/wav": ".wav",
              "audio/mpeg": ".mp3"}


def check(config: Config, out: Any = sys.stdout) -> int:
    """Why would the tools not show up? Each step says what it found; the exit code, what is wrong."""
    def say(text: str) -> None:
        print(text, file=out)

    say(f"gateway    {config.api_url}")
    if not config.api_key:
        say("key        missing: set COLABHIVE_API_KEY (or try --sandbox)")
        return NO_KEY
    tenant = Tenant(config, config.api_key)
    say(f"key        sha256 {tenant.key_id}")
    started = time.perf_counter()
    try:
        catalog = tenant.catalog(for_client({}, config))
    except KeyRejected as exc:
        say(f"key        REJECTED: {exc}")
        return KEY_REJECTED
    except ManifestError as exc:
        say(f"manifest   FAILED: {exc}")
        return UNREACHABLE
    finally:
        tenant.close()
    took = (time.perf_counter() - started) * 1000
    actions = [t for t in catalog.by_name.values() if not t.builtin]
    hidden = [t for t in actions if t.refusal]
    say(f"manifest   {len(actions)} actions in {took:.0f} ms (ETag {catalog.manifest.etag})")
    say(f"tools      {len(actions) - len(hidden)} shown, {len(hidden)} hidden by the filters")
    for tool in sorted(hidden, key=lambda t: t.slug):
        say(f"  hidden   {tool.slug}: {tool.refusal}")
    return OK if len(hidden) < len(actions) else NO_TOOLS


def _session(server: Server, tenant: Tenant, client: str) -> Session:
    session = Session(id="cli", transport="cli")
    server.handle({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": LEGACY_VERSIONS[0], "capabilities": {}, "clientInfo": {"name": client, "version": "cli"}}},
        tenant=tenant, session=session)
    return session


def tools(config: Config, client: str, as_json: bool, out: Any = sys.stdout) -> int:
    """The tool list exactly as an agent with this client name sees it."""
    server, tenant = Server(config), Tenant(config, config.api_key or "")
    try:
        answer = server.handle({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, tenant=tenant,
                               session=_session(server, tenant, client))
    finally:
        tenant.close()
    if "error" in answer:
        print(f"colabhive-mcp: {answer['error']['message']}", file=sys.stderr)
        return UNREACHABLE
    listed = answer["result"]["tools"]
    if as_json:
        print(json.dumps(listed, indent=2, ensure_ascii=False), file=out)
        return OK
    width = max([len(t["name"]) for t in listed] + [4])
    for tool in listed:
        meta = tool.get("_meta") or {}
        effects = ",".join(meta.get("com.colabhive/sideEffects") or []) or "-"
        print(f"{tool['name']:<{width}}  {meta.get('com.colabhive/latencyClass', '-'):<6}  {effects:<20}  "
              f"{tool.get('title', '')}", file=out)
    print(f"{len(listed)} tools", file=out)
    return OK


def call(config: Config, name: str, arguments: dict[str, Any], client: str, out_dir: Path,
         out: Any = sys.stdout) -> int:
    """Run one tool as an agent would, with a live progress line, following the continuations its
    answers name (as a host does) until the result; media blocks are saved to files."""
    server, tenant = Server(config), Tenant(config, config.api_key or "")

    def progress(message: dict[str, Any]) -> None:
        params = message.get("params") or {}
        if message.get("method") == "notifications/progress":
            print(f"\r\033[K… {params.get('progress', 0):5.1f}%  {params.get('message', '')}", end="", file=sys.stderr,
                  flush=True)

    try:
        session, tool, tool_arguments = _session(server, tenant, client), name, arguments
        while True:
            answer = server.handle({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
                "name": tool, "arguments": tool_arguments, "_meta": {"progressToken": "cli"}}},
                tenant=tenant, session=session, notify=progress)
            following = ((answer.get("result") or {}).get("_meta") or {}).get(results.CONTINUATION)
            if following is None:
                break
            tool, tool_arguments = following["tool"], following["arguments"]
    finally:
        tenant.close()
    print("\r\033[K", end="", file=sys.stderr)
    if "error" in answer:
        print(f"colabhive-mcp: {answer['error']['message']}", file=sys.stderr)
        return 2
    result = answer["result"]
    for index, block in enumerate(result["content"]):
        if block["type"] == "text":
            print(block["text"], file=out)
        elif block["type"] in ("image", "audio"):
            path = out_dir / f"{name}-{index}{EXTENSIONS.get(block.get('mimeType', ''), '.bin')}"
            path.write_bytes(base64.b64decode(block["data"]))
            print(f"[{block['type']} {block.get('mimeType')} saved to {path}]", file=out)
        else:
            print(json.dumps(block, ensure_ascii=False), file=out)
    if "structuredContent" in result:
        print(json.dumps(result["structuredContent"], indent=2, ensure_ascii=False), file=out)
    return 1 if result.get("isError") else OK


def client_config(client: str, url: str | None, out: Any = sys.stdout) -> int:
    """The snippet to paste into a client's configuration: stdio, or the hosted URL."""
    if url:
        remote = {"url": url, "headers": {"Authorization": "Bearer ${COLABHIVE_API_KEY}"}}
        snippets = {
            "claude-desktop": {"mcpServers": {"colabhive": {"command": "npx", "args": [
                "mcp-remote", url, "--header", "Authorization:Bearer ${COLABHIVE_API_KEY}"],
                "env": {"COLABHIVE_API_KEY": "hive_..."}}}},
            "cursor": {"mcpServers": {"colabhive": remote}},
            "vscode": {"servers": {"colabhive": {"type": "http", **remote}}},
            "n8n": {"endpoint": url, "serverTransport": "httpStreamable", "authentication": "bearerAuth",
                    "note": "MCP Client Tool node; put the key in a Bearer credential"},
            "claude-code": f"claude mcp add --transport http colabhive {url} "
                           "--header 'Authorization: Bearer hive_...'",
        }
    else:
        release = f"colabhive-mcp@{__version__}"  # pinned: the package index also has an older colabhive-mcp
        local = {"command": "uvx", "args": [release], "env": {"COLABHIVE_API_KEY": "hive_..."}}
        snippets = {
            "claude-desktop": {"mcpServers": {"colabhive": local}},
            "cursor": {"mcpServers": {"colabhive": local}},
            "vscode": {"servers": {"colabhive": {"type": "stdio", **local}}},
            "n8n": {"note": "n8n reaches MCP over HTTP: run `colabhive-mcp serve --single-tenant` and use "
                            "http://127.0.0.1:8765/mcp, or pass --url for the hosted service"},
            "claude-code": f"claude mcp add colabhive --env COLABHIVE_API_KEY=hive_... -- uvx {release}",
        }
    snippet = snippets[client]
    print(snippet if isinstance(snippet, str) else json.dumps(snippet, indent=2), file=out)
    return OK


