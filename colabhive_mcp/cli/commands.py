"""The CLI's commands for humans: check, tools, call.

``tools`` and ``call`` go through the protocol core exactly as an agent's requests do, so what
they show is what the agent gets. Like ``check``, they first load the key's tool list, so that a
missing or rejected key, an unreachable gateway or a tool the filters hide is said in the same
words, with the same exit code (:data:`colabhive_mcp.cli.arguments.EXIT_CODES`), in all three.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from ..ahead import Ahead
from ..calls import results
from ..calls.cancellation import USER
from ..catalog.profiles import for_client
from ..catalog.tools import Catalog, Tool
from ..keys import KeyRejected
from ..manifest.version import ManifestError
from ..protocol import LEGACY_VERSIONS, Server, Session, jsonrpc
from ..settings.config import Config
from ..tenants.shared import Instance
from ..tenants.spend import Budget
from ..tenants.tenant import Tenant
from .arguments import INTERRUPTED, KEY_REJECTED, NO_KEY, NO_TOOLS, OK, TOOL_FAILED, UNREACHABLE

KEY_MISSING = "missing: set COLABHIVE_API_KEY (or try --sandbox)"
CANCEL_WAIT_S = 15.0  # how long an interrupted call waits for its cancellation to reach the gateway
EXTENSIONS = {"image/png": ".png", "image/jpeg": ".jpg", "image/webp": ".webp", "audio/wav": ".wav",
              "audio/mpeg": ".mp3"}


class Failed(Exception):
    """A step that failed: which (key, manifest), what went wrong, and the exit code that says so."""

    def __init__(self, step: str, problem: str, code: int) -> None:
        super().__init__(f"{step} {problem}")
        self.step, self.problem, self.code = step, problem, code


def _open(config: Config) -> Tenant:
    """The configured key's tenant; what it spends counts with its stdio servers' (see :meth:`.Instance.local`)."""
    if not config.api_key:
        raise Failed("key", KEY_MISSING, NO_KEY)
    return Tenant(config, config.api_key, Instance.local(config, os.environ))


def _load(tenant: Tenant, config: Config, client: str) -> Catalog:
    """The key's tools as ``client`` sees them; :class:`Failed` when the gateway rejects the key or
    cannot give the list."""
    try:
        return tenant.catalog(for_client({"name": client}, config))
    except KeyRejected as exc:
        raise Failed("key", f"REJECTED: {exc}", KEY_REJECTED) from None
    except ManifestError as exc:
        raise Failed("manifest", f"FAILED: {exc}", UNREACHABLE) from None


def _actions(catalog: Catalog) -> tuple[list[Tool], list[Tool]]:
    """The gateway's actions (not the built-in tools): those shown, and those the filters hide."""
    actions = [t for t in catalog.by_name.values() if not t.builtin]
    return [t for t in actions if not t.refusal], [t for t in actions if t.refusal]


def _said(text: str, code: int) -> int:
    print(f"colabhive-mcp: {text}", file=sys.stderr)
    return code


def check(config: Config, out: Any = sys.stdout) -> int:
    """Why would the tools not show up? Each step says what it found; the exit code, what is wrong."""
    def say(text: str) -> None:
        print(text, file=out)

    say(f"gateway    {config.api_url}")
    try:
        tenant = _open(config)
        say(f"key        sha256 {tenant.key_id}")
        started = time.perf_counter()
        try:
            catalog = _load(tenant, config, "")
        finally:
            tenant.close()
    except Failed as failed:
        say(f"{failed.step:<10} {failed.problem}")
        return failed.code
    took = (time.perf_counter() - started) * 1000
    shown, hidden = _actions(catalog)
    say(f"manifest   {len(shown) + len(hidden)} actions in {took:.0f} ms (ETag {catalog.manifest.etag})")
    say(f"tools      {len(shown)} shown, {len(hidden)} hidden by the filters")
    for tool in sorted(hidden, key=lambda t: t.slug):
        say(f"  hidden   {tool.slug}: {tool.refusal}")
    for line in _budget(Budget.of(config), shown):
        say(line)
    return OK if shown else NO_TOOLS


def _budget(budget: Budget, shown: list[Tool]) -> list[str]:
    """The spend guard in force: each key's budget, what past it, which of the tools count and how much."""
    if not budget.windows:
        return ["budget     none: billable calls are not counted (billable_calls_per_hour, billable_calls_per_day)"]
    limits = " and ".join(f"{limit} per {window.name}" for window, limit in budget.windows)
    past = ("the user is asked before each call (a client that cannot ask is refused)" if budget.asks
            else "calls are refused")
    weights = {tool.slug: budget.weight(tool) for tool in shown}
    billable = [f"{slug}{f' (counts as {weight})' if weight > 1 else ''}"
                for slug, weight in sorted(weights.items()) if weight]
    return [f"budget     billable calls per key: {limits}; past it, {past}",
            f"billable   {len(billable)} tools: {', '.join(billable) or 'none'}"]


def _ask(server: Server, request: dict[str, Any], **context: Any) -> dict[str, Any]:
    """The server's answer to one of the command's requests (nothing cancels them: there always is one)."""
    answer = server.serve(jsonrpc.frame_of(request), **context)
    assert isinstance(answer, dict)
    return answer


def _ask_until_interrupted(server: Server, request: dict[str, Any], *, session: Session,
                           **context: Any) -> dict[str, Any]:
    """:func:`_ask`, on a thread of its own; on Ctrl-C, the request is cancelled as a client's
    ``notifications/cancelled`` would (its work upstream is stopped), and :class:`Failed` says so once
    the cancellation is done (a second Ctrl-C: at once)."""
    asking = Ahead(lambda: _ask(server, request, session=session, **context), "cli-call")
    try:
        while not asking.wait(0.25):  # (a wait in slices: Ctrl-C reaches the main thread between them)
            pass
    except KeyboardInterrupt:
        server.cancel(session, request["id"], USER)
        asking.wait(CANCEL_WAIT_S)
        raise Failed("call", "INTERRUPTED: the call was cancelled and the gateway asked to stop its work",
                     INTERRUPTED) from None
    answer: dict[str, Any] = asking.result()
    return answer


def _session(server: Server, tenant: Tenant, client: str) -> Session:
    session = Session(id="cli", transport="cli")
    _ask(server, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": LEGACY_VERSIONS[0], "capabilities": {}, "clientInfo": {"name": client, "version": "cli"}}},
        tenant=tenant, session=session)
    return session


def _error(error: dict[str, Any], otherwise: int) -> int:
    """Say a JSON-RPC error; its exit code (a rejected key's, else ``otherwise``)."""
    return _said(error["message"], KEY_REJECTED if error["code"] == jsonrpc.KEY_REJECTED else otherwise)


def tools(config: Config, client: str, as_json: bool, out: Any = sys.stdout) -> int:
    """The tool list exactly as an agent with this client name sees it."""
    server = Server(config)
    try:
        tenant = _open(config)
        try:
            shown, _ = _actions(_load(tenant, config, client))
            answer = _ask(server, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, tenant=tenant,
                                   session=_session(server, tenant, client))
        finally:
            tenant.close()
    except Failed as failed:
        return _said(str(failed), failed.code)
    if "error" in answer:
        return _error(answer["error"], UNREACHABLE)
    listed = answer["result"]["tools"]
    if as_json:
        print(json.dumps(listed, indent=2, ensure_ascii=False), file=out)
    else:
        width = max([len(t["name"]) for t in listed] + [4])
        print(f"{'NAME':<{width}}  {'SPEED':<6}  {'SIDE EFFECTS':<20}  TITLE", file=out)
        for tool in listed:
            meta = tool.get("_meta") or {}
            effects = ",".join(meta.get("com.colabhive/sideEffects") or []) or "-"
            print(f"{tool['name']:<{width}}  {meta.get('com.colabhive/latencyClass', '-'):<6}  {effects:<20}  "
                  f"{tool.get('title', '')}", file=out)
        print(f"{len(listed)} tools", file=out)
    return OK if shown else _said("the filters hide every action (colabhive-mcp check says why)", NO_TOOLS)


def call(config: Config, name: str, arguments: dict[str, Any], client: str, out_dir: Path,
         out: Any = sys.stdout) -> int:
    """Run one tool as an agent would, with a live progress line (on a terminal), following the
    continuations its answers name (as a host does) until the result; media blocks are saved to files
    in ``out_dir`` (which must exist). Ctrl-C cancels the call as a client's cancellation would: the
    gateway is asked to stop its work."""
    server = Server(config)
    live = sys.stderr.isatty()

    def progress(message: dict[str, Any]) -> None:
        params = message.get("params") or {}
        if live and message.get("method") == "notifications/progress":
            print(f"\r\033[K… {params.get('progress', 0):5.1f}%  {params.get('message', '')}", end="", file=sys.stderr,
                  flush=True)

    try:
        tenant = _open(config)
        try:
            found = _load(tenant, config, client).by_name.get(name)
            if found is None or found.refusal:
                raise Failed("tool", f"{name!r} " + (f"HIDDEN: {found.refusal}" if found else
                                                     "UNKNOWN: `colabhive-mcp tools` lists the tools"), NO_TOOLS)
            session, tool, tool_arguments = _session(server, tenant, client), name, arguments
            while True:
                answer = _ask_until_interrupted(server, {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
                    "name": tool, "arguments": tool_arguments, "_meta": {"progressToken": "cli"}}},
                    tenant=tenant, session=session, notify=progress)
                following = ((answer.get("result") or {}).get("_meta") or {}).get(results.CONTINUATION)
                if following is None:
                    break
                tool, tool_arguments = following["tool"], following["arguments"]
        finally:
            tenant.close()
    except Failed as failed:
        return _said(str(failed), failed.code)
    finally:
        if live:  # (the progress line goes)
            print("\r\033[K", end="", file=sys.stderr)
    if "error" in answer:
        return _error(answer["error"], TOOL_FAILED)
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
    return TOOL_FAILED if result.get("isError") else OK
