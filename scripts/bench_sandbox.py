"""The sandbox gateway a bench runs against, served as a real gateway would be, and the big manifest
it can publish (300 actions, about 1 MB)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from colabhive_mcp.sandbox import API_PREFIX  # noqa: E402
from tests.support.http_server import free_port  # noqa: E402

BIG_TOOLS = 300


class Sandbox:
    """The sandbox gateway served as a real gateway would be: a process of its own (the clients,
    the server and the gateway each have their own interpreter lock) and an HTTP server that keeps
    connections alive (gunicorn; one worker, since the sandbox keeps its state in memory)."""

    def __init__(self, page_size: int, cold_start_s: float, threads: int = 256) -> None:
        port = free_port()
        self.root_url = f"http://127.0.0.1:{port}"
        self.url = self.root_url + API_PREFIX
        app = f"baseline:sandbox_app(page_size={page_size}, cold_start_s={cold_start_s})"  # and the old invoke route
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "--worker-class", "gthread", "--workers", "1", "--threads", str(threads),
             "--keep-alive", "75", "--bind", f"127.0.0.1:{port}", "--log-level", "warning",
             "--pythonpath", str(ROOT / "scripts"), app],
            stderr=subprocess.DEVNULL, cwd=ROOT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                self.journal_entries()
                return
            except requests.ConnectionError:
                time.sleep(0.1)
        raise RuntimeError("the sandbox did not start")

    def add_action(self, entry: dict[str, Any]) -> None:
        requests.post(self.root_url + "/_sandbox/actions", json={"entry": entry}, timeout=10).raise_for_status()

    def journal_entries(self) -> list[dict[str, Any]]:
        return requests.get(self.root_url + "/_sandbox/journal", timeout=10).json()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *_exc: Any) -> None:
        self.process.terminate()
        self.process.wait(10)


def add_big_manifest(sandbox: Sandbox) -> None:
    """300 actions of ~3 KB each: a manifest of about 1 MB, as the contract says is normal."""
    for i in range(BIG_TOOLS):
        properties = {f"field_{j}": {"type": "string", "description": f"Parameter {j} of action {i}. " * 4}
                      for j in range(13)}
        sandbox.add_action({"name": f"bench-action-{i:03d}", "displayName": f"Bench action {i}",
                            "description": f"Benchmark action number {i}. " * 20, "kind": "tool",
                            "sideEffects": [], "latencyClass": "fast", "stability": "stable",
                            "inputSchema": {"type": "object", "properties": properties}})


if __name__ == "__main__":  # a module of the benches, not a command: running it says what it is
    import argparse

    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).print_help()
