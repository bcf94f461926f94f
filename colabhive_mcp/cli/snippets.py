"""``colabhive-mcp client-config``: the snippet to paste into an MCP client, in the shape that client documents.

A snippet has to work on the machine that prints it. A release installed from the package index
runs anywhere as ``uvx colabhive-mcp@VERSION``; any other installation (a checkout, an editable
install, a wheel file) is not on the index, so its snippet starts this installation's own command
by its absolute path. Hosted snippets (``--url``) never carry the key: each refers to it the way
its client fills it in, or leaves a placeholder where the client has no way to.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote, urlsplit

from .. import __version__
from ..settings.config import Config, ConfigError

if TYPE_CHECKING:  # importlib.metadata is imported only when a snippet is made: every command builds this parser
    from importlib import metadata

CLIENTS = ("claude-desktop", "cursor", "claude-code", "n8n", "vscode")
DISTRIBUTION = "colabhive-mcp"
NAME = "colabhive"  # the server's name in every client's configuration
KEY_ENV = "COLABHIVE_API_KEY"
PLACEHOLDER = "hive_..."  # where a client cannot refer to the key, the user pastes it here
LOCAL_URL = f"http://{Config().bind}/mcp"  # `serve --single-tenant` at its default address
# https://code.visualstudio.com/docs/copilot/reference/mcp-configuration ("inputs": promptString, password)
VSCODE_INPUT = {"type": "promptString", "id": "colabhive-api-key", "description": "ColabHive API key",
                "password": True}
VSCODE_KEY = "${input:colabhive-api-key}"
CURSOR_KEY = "${env:" + KEY_ENV + "}"  # https://cursor.com/docs/mcp ("Config interpolation")
# the MCP Client Tool node: packages/@n8n/nodes-langchain/nodes/mcp/McpClientTool/McpClientTool.node.ts
# (parameters endpointUrl, serverTransport, authentication; credential httpBearerAuth, field "Bearer Token") and
# https://docs.n8n.io/integrations/builtin/cluster-nodes/sub-nodes/n8n-nodes-langchain.toolmcp/; printed as
# workflow JSON, which pastes onto the canvas: https://docs.n8n.io/workflows/export-import ("Copy-Paste")
N8N_NODE = {"name": "ColabHive", "type": "@n8n/n8n-nodes-langchain.mcpClientTool", "typeVersion": 1.1,
            "position": [0, 0]}
OPEN_LINK = {
    "vscode": "open it (click it in a page, or `code --open-url '<link>'`): VS Code asks before it adds the server",
    "cursor": "open it (click it in a page, or paste it into a browser): Cursor asks before it adds the server",
}
WHERE = {
    "claude-desktop": "paste into claude_desktop_config.json (Settings > Developer > Edit Config), then restart "
                      "Claude Desktop",
    "cursor": "paste into ~/.cursor/mcp.json (or .cursor/mcp.json in a project); Cursor fills in ${env:...} "
              "from its own environment",
    "claude-code": "run it in a shell (where COLABHIVE_API_KEY is set, if it names it)",
    "n8n": "paste onto the n8n canvas, then connect the node to an AI Agent",
    "vscode": "paste into .vscode/mcp.json (or MCP: Open User Configuration)",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("client", metavar="CLIENT", choices=CLIENTS, help="the MCP client: " + ", ".join(CLIENTS))
    parser.add_argument("--url", help="the hosted service's MCP URL (default: a local server this machine starts)")
    parser.add_argument("--sandbox", action="store_true",
                        help="the local server on the sandbox gateway, with a demo key: no account needed")
    parser.add_argument("--release", action="store_true",
                        help=f"start the release from the package index (uvx {DISTRIBUTION}@{__version__}) "
                             "even when this installation is not one")
    parser.add_argument("--link", action="store_true",
                        help="print the client's one-click install link instead of the snippet (vscode, cursor)")


def run(args: argparse.Namespace) -> int:
    if args.url and (args.sandbox or args.release):
        raise ConfigError("--sandbox and --release choose how the local server starts; --url is the hosted one")
    if args.link and args.client not in OPEN_LINK:
        raise ConfigError(f"--link: {args.client} has no install links; {', '.join(OPEN_LINK)} have")
    if args.url:
        snippet = hosted(args.client, args.url)
    else:
        command = server_command(args.release)
        snippet = local(args.client, command, args.sandbox)
        if command[1:] == ["-m", "colabhive_mcp"]:
            print(f"# colabhive-mcp is not installed here, so '{shlex.join(command)}' starts it only where Python "
                  "finds this copy: install it (pip install -e .) for a command any client can start",
                  file=sys.stderr)
    if args.link:
        print(link(args.client, snippet))
        print(f"# {OPEN_LINK[args.client]}", file=sys.stderr)
        return 0
    print(snippet if isinstance(snippet, str) else json.dumps(snippet, indent=2))
    print(f"# {WHERE[args.client]}", file=sys.stderr)  # stdout stays exactly the snippet
    return 0


def link(client: str, snippet: dict[str, Any] | str) -> str:
    """The one-click install link of ``client`` for the server ``snippet`` configures (the same
    server, the key referred to the same way: never the key itself)."""
    assert isinstance(snippet, dict)
    if client == "vscode":  # https://code.visualstudio.com/docs/copilot/customization/mcp-servers (URL handler)
        server = {"name": NAME, **snippet["servers"][NAME], **({"inputs": snippet["inputs"]} if "inputs" in snippet
                                                               else {})}
        return "vscode:mcp/install?" + quote(json.dumps(server, separators=(",", ":")), safe="")
    # https://cursor.com/docs/mcp/install-links: name, and the server's mcp.json entry, base64-encoded
    entry = json.dumps(snippet["mcpServers"][NAME], separators=(",", ":")).encode()
    return f"cursor://anysphere.cursor-deeplink/mcp/install?name={NAME}&config={base64.b64encode(entry).decode()}"


def hosted(client: str, url: str) -> dict[str, Any] | str:
    """The snippet for the hosted service at ``url``, which takes the key as a bearer token."""
    if client == "claude-desktop":
        # claude_desktop_config.json starts local (stdio) servers only, and custom connectors take no
        # header: mcp-remote bridges. No space inside args (Claude Desktop on Windows splits them):
        # https://github.com/geelen/mcp-remote#custom-headers
        return {"mcpServers": {NAME: {"command": "npx", "args": ["-y", "mcp-remote", url, "--header",
                                                                  "Authorization:${AUTH_HEADER}"],
                                      "env": {"AUTH_HEADER": f"Bearer {PLACEHOLDER}"}}}}
    if client == "cursor":  # https://cursor.com/docs/mcp: url + headers, ${env:NAME} in headers
        return {"mcpServers": {NAME: {"url": url, "headers": {"Authorization": f"Bearer {CURSOR_KEY}"}}}}
    if client == "vscode":  # https://code.visualstudio.com/docs/copilot/reference/mcp-configuration
        return {"inputs": [VSCODE_INPUT],
                "servers": {NAME: {"type": "http", "url": url, "headers": {"Authorization": f"Bearer {VSCODE_KEY}"}}}}
    if client == "claude-code":
        # https://code.claude.com/docs/en/mcp: claude mcp add --transport http NAME URL --header "...";
        # the shell fills in the key when the command runs
        return f'claude mcp add --transport http {NAME} {shlex.quote(url)} --header "Authorization: Bearer ${KEY_ENV}"'
    return {"nodes": [{**N8N_NODE, "parameters": {"endpointUrl": url, "serverTransport": "httpStreamable",
                                                  "authentication": "bearerAuth"},
                       "notes": "Credential: a Bearer Auth one, its Bearer Token your ColabHive API key"}],
            "connections": {}}


def local(client: str, command: list[str], sandbox: bool) -> dict[str, Any] | str:
    """The snippet that starts ``command`` (this machine's server) for ``client``; on the sandbox
    gateway with ``sandbox``, which needs no key."""
    program, args = command[0], [*command[1:], *(["--sandbox"] if sandbox else [])]
    stdio = {"command": program, "args": args}
    if client == "claude-desktop":  # https://modelcontextprotocol.io/quickstart/user
        return {"mcpServers": {NAME: stdio if sandbox else {**stdio, "env": {KEY_ENV: PLACEHOLDER}}}}
    if client == "cursor":  # https://cursor.com/docs/mcp: command, args, env (${env:NAME} works in env)
        return {"mcpServers": {NAME: stdio if sandbox else {**stdio, "env": {KEY_ENV: CURSOR_KEY}}}}
    if client == "vscode":  # https://code.visualstudio.com/docs/copilot/reference/mcp-configuration
        server = {"type": "stdio", **stdio}
        if sandbox:
            return {"servers": {NAME: server}}
        return {"inputs": [VSCODE_INPUT], "servers": {NAME: {**server, "env": {KEY_ENV: VSCODE_KEY}}}}
    if client == "claude-code":
        # https://code.claude.com/docs/en/mcp: options before the name, the server's command after --
        env = "" if sandbox else f'--env {KEY_ENV}="${KEY_ENV}" '
        return f"claude mcp add --transport stdio {env}{NAME} -- {shlex.join([program, *args])}"
    # n8n speaks MCP over HTTP only: the single-tenant server on this machine, for an n8n on this
    # machine (it answers only local callers that come directly: not n8n Cloud, not a container)
    serve = shlex.join([*command, "serve", "--single-tenant", *(["--sandbox"] if sandbox else [])])
    start = serve if sandbox else f"{KEY_ENV}={PLACEHOLDER} {serve}"
    return {"nodes": [{**N8N_NODE, "parameters": {"endpointUrl": LOCAL_URL, "serverTransport": "httpStreamable",
                                                  "authentication": "none"},
                       "notes": f"Start the server first, on the machine n8n runs on: {start}"}],
            "connections": {}}


def server_command(release: bool) -> list[str]:
    """How a client starts this server: the pinned release from the index (the index also has an
    older package of the same name), or else this installation's own command."""
    installation = installed()
    if release or (installation is not None and installation.read_text("direct_url.json") is None):
        return ["uvx", f"{DISTRIBUTION}@{__version__}"]
    return own_command(installation)


def installed() -> "metadata.Distribution | None":
    """The installed distribution this code runs from: the one whose RECORD lists this file, or (an
    editable install lists none of its modules) whose PEP 610 direct_url.json names the directory
    it runs from. None for a checkout run from its directory or PYTHONPATH, whose ``.egg-info``
    (no RECORD) would otherwise pass for an index install."""
    from importlib import metadata

    here = Path(__file__).resolve()
    for dist in metadata.distributions(name=DISTRIBUTION):
        if dist.read_text("RECORD") is None:
            continue
        origin = json.loads(dist.read_text("direct_url.json") or "{}")
        if origin.get("dir_info", {}).get("editable") and _local_path(origin["url"]) == here.parents[2]:
            return dist
        if any(Path(str(dist.locate_file(file))).resolve() == here for file in dist.files or ()):
            return dist
    return None


def own_command(installation: "metadata.Distribution | None") -> list[str]:
    """This installation's ``colabhive-mcp`` script, as its RECORD says where it was written; else
    this interpreter with ``-m``. Never one found on PATH: that may be another installation."""
    if installation is not None:
        for file in installation.files or ():
            script = Path(os.path.normpath(str(installation.locate_file(file))))  # ../ folded, links kept
            if file.name in ("colabhive-mcp", "colabhive-mcp.exe") and script.is_file():
                return [str(script)]
    return [sys.executable, "-m", "colabhive_mcp"]


def _local_path(url: str) -> Path | None:
    parts = urlsplit(url)
    return Path(unquote(parts.path)).resolve() if parts.scheme == "file" else None
