"""``colabhive-mcp demo``: a real MCP session over stdio against the sandbox gateway, then the way to a real one.

:class:`StdioPeer` is a minimal synchronous MCP client that drives a server subprocess
line by line; the demo uses it to show what an agent sees, and the tests use it to send
the server exactly the bytes they want.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import subprocess
import sys
import threading
from typing import Any, Callable

from ..keys import KEYS_URL
from ..revisions import LEGACY_VERSIONS


class StdioPeer:
    """A client end of the stdio transport: requests by id, notifications collected in order."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None, stderr: Any = subprocess.DEVNULL,
                 cwd: str | None = None) -> None:
        # a session of its own: a terminal's Ctrl-C reaches the host (this process), which then ends the
        # server as hosts do, by closing its input
        self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=env,
                                        cwd=cwd, start_new_session=True)
        self.notifications: list[dict[str, Any]] = []
        self.unparsable: list[bytes] = []  # anything on stdout that is not JSON (must stay empty)
        self.on_notification: Callable[[dict[str, Any]], None] | None = None
        self._responses: dict[Any, dict[str, Any]] = {}
        self._anonymous: list[Any] = []  # answers without a usable id, batches
        self._ids = itertools.count(1)
        self._ready = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                self.unparsable.append(line)
                continue
            with self._ready:
                if isinstance(message, list) or "method" not in message:
                    key = message[0].get("id") if isinstance(message, list) and message else message.get("id")
                    if isinstance(message, list) or key is None:
                        self._anonymous.append(message)
                    else:
                        self._responses[key] = message
                else:
                    self.notifications.append(message)
                    if self.on_notification:
                        self.on_notification(message)
                self._ready.notify_all()
        with self._ready:
            self._ready.notify_all()

    def send(self, message: dict[str, Any] | list[Any] | bytes) -> None:
        """Write one message (or raw bytes, sent as they are) followed by a newline."""
        data = message if isinstance(message, bytes) else json.dumps(message).encode()
        assert self.process.stdin is not None
        self.process.stdin.write(data + b"\n")
        self.process.stdin.flush()

    def request(self, method: str, params: dict[str, Any] | None = None, *, timeout: float = 60.0,
                request_id: Any = None) -> dict[str, Any]:
        """Send a request and wait for its response (the whole JSON-RPC message)."""
        request_id = next(self._ids) if request_id is None else request_id
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        return self.wait_for(request_id, timeout)

    def wait_for(self, request_id: Any, timeout: float = 60.0) -> dict[str, Any]:
        with self._ready:
            if not self._ready.wait_for(lambda: request_id in self._responses or self.process.poll() is not None,
                                        timeout):
                raise TimeoutError(f"no response to request {request_id!r} within {timeout} s")
            if request_id not in self._responses:
                raise ConnectionError(f"the server exited ({self.process.returncode}) before answering")
            return self._responses.pop(request_id)

    def next_anonymous(self, timeout: float = 10.0) -> Any:
        """The next answer that carries no usable id (errors for unparsable input, batches)."""
        with self._ready:
            if not self._ready.wait_for(lambda: self._anonymous, timeout):
                raise TimeoutError("no answer without an id arrived")
            return self._anonymous.pop(0)

    def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        self.send({"jsonrpc": "2.0", "method": method, **({"params": params} if params is not None else {})})

    def initialize(self, version: str = LEGACY_VERSIONS[0]) -> dict[str, Any]:
        response = self.request("initialize", {"protocolVersion": version, "capabilities": {},
                                               "clientInfo": {"name": "colabhive-demo", "version": "1"}})
        self.notify("notifications/initialized")
        return response

    def close(self, timeout: float = 10.0) -> int:
        """Close stdin (end of input) and wait for the server to exit."""
        if self.process.stdin and not self.process.stdin.closed:
            self.process.stdin.close()
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise


# What the demo calls: (tool, arguments, show progress). The tests hold the arguments to each tool's inputSchema.
CALLS: tuple[tuple[str, dict[str, Any], bool], ...] = (
    ("hive-chat", {"prompt": "Say hello to a new ColabHive user."}, False),
    ("text-embed-small", {"text": "colabhive"}, False),
    ("image-gen-tiny", {"prompt": "a beehive at dawn", "size": 32}, False),
    ("cold-summarizer", {"text": "MCP lets agents call tools through one protocol."}, True),
    ("flaky-translate", {"text": "bonjour", "target_language": "en"}, False),
)
# where ColabHive keys are made (the ColabHive Python SDK's documentation says so)
NEXT_STEPS = """
Next steps:
  1. Get an API key (hive_...) in the ColabHive console: {keys}
  2. Print the configuration for your MCP client, and paste it where the command says:
       {command} client-config claude-desktop    (or cursor, claude-code, vscode, n8n)
     With --sandbox, the client gets a sandbox gateway like this one: no key needed."""


def this_command() -> str:
    """How to run this command again, as typed in this shell: its name where ``PATH`` finds this very
    command, else the path it was started by (``.venv/bin/colabhive-mcp`` after the README's install),
    else this Python's ``-m`` form."""
    started = sys.argv[0]
    if os.path.basename(started) != "colabhive-mcp":
        return f"{sys.executable} -m colabhive_mcp"
    found = shutil.which("colabhive-mcp")
    return "colabhive-mcp" if found and os.path.samefile(found, started) else started


def main() -> int:
    """Start ``colabhive-mcp stdio --sandbox``, show a short session in the terminal, then what to do next."""
    peer = StdioPeer([sys.executable, "-m", "colabhive_mcp", "stdio", "--sandbox", "--log-level", "warning"],
                     stderr=None)
    try:
        info = peer.initialize()["result"]
        print(f"Connected to {info['serverInfo']['name']} {info['serverInfo']['version']} "
              f"(MCP {info['protocolVersion']}) on the sandbox gateway.\n")
        tools = peer.request("tools/list")["result"]["tools"]
        print(f"{len(tools)} tools:")
        for tool in tools:
            print(f"  {tool['name']:<28} {tool.get('title', '')}")
        for name, arguments, progress in CALLS:
            _show_call(peer, name, arguments, progress)
    finally:
        peer.close()
    print(NEXT_STEPS.format(keys=KEYS_URL, command=this_command()))
    return 0


def _show_call(peer: StdioPeer, name: str, arguments: dict[str, Any], progress: bool) -> None:
    print(f"\n> tools/call {name} {json.dumps(arguments)}")
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if progress:
        params["_meta"] = {"progressToken": name}
        peer.on_notification = lambda n: print(
            f"  … {n['params'].get('progress')}% {n['params'].get('message', '')}")
    response = peer.request("tools/call", params, timeout=120)
    peer.on_notification = None
    if "error" in response:
        print(f"  JSON-RPC error {response['error']['code']}: {response['error']['message']}")
        return
    result = response["result"]
    for block in result["content"]:
        if block["type"] == "text":
            print("  " + block["text"].replace("\n", "\n  "))
        else:
            size = len(base64.b64decode(block.get("data", "")))
            print(f"  [{block['type']} {block.get('mimeType')}, {size} bytes]")
    if result.get("isError"):
        print("  (isError: true — the model is told the call failed)")
