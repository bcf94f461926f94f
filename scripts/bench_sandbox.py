"""The sandbox gateway a bench runs against, served as a real gateway would be, and the manifests it
can publish: the big one (300 plain actions, about 1 MB) and the rich one (300 actions shaped like real
ones, about 1 MB)."""

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


RICH_KINDS = ("llm", "specialist", "tool", "model")
RICH_EFFECTS = ([], ["writes"], ["billing"], ["network"])


def rich_entry(i: int) -> dict[str, Any]:
    """One action of the rich bench manifest, shaped like real ones (about 3 KB): an input schema with a
    ``$defs`` block and ``$ref``s to it, an ``anyOf`` of three alternatives, ``pattern``, ``format``,
    ``enum``, ``default``, ``minLength``/``maxLength``, ``uniqueItems``, ``additionalProperties`` and a
    nested object, and an ``outputSchema``."""
    said = f"What rich action {i} is given; see the action's documentation for the accepted forms. "
    return {
        "name": f"rich-action-{i:03d}", "displayName": f"Rich action {i}",
        "description": f"Rich action number {i}: summarises, classifies and extracts the fields a workflow needs "
                       "from text, a list of texts or a document at an address, in the caller's language. " * 3,
        "kind": RICH_KINDS[i % 4], "sideEffects": RICH_EFFECTS[i % 4], "latencyClass": ("fast", "slow", "batch")[i % 3],
        "stability": "stable", "costHint": f"${0.001 * (i % 7 + 1):.3f} / call",
        "inputSchema": {
            "type": "object",
            "$defs": {
                "Locale": {"type": "string", "pattern": "^[a-z]{2}(-[A-Z]{2})?$", "default": "en",
                           "description": "A language tag: the language the answer is written in."},
                "Contact": {"type": "object", "description": "Who the result concerns, when anyone.",
                            "properties": {"email": {"type": "string", "format": "email"},
                                           "name": {"type": "string", "minLength": 1, "maxLength": 120},
                                           "phone": {"type": "string", "pattern": "^\\+?[0-9 ]{6,20}$"}},
                            "required": ["email"], "additionalProperties": False},
            },
            "properties": {
                "input": {"description": said, "anyOf": [
                    {"type": "string", "minLength": 1, "maxLength": 20000},
                    {"type": "array", "items": {"type": "string", "maxLength": 20000}, "minItems": 1, "maxItems": 64,
                     "uniqueItems": True},
                    {"type": "object", "properties": {"url": {"type": "string", "format": "uri"},
                                                      "pages": {"type": "string", "pattern": "^[0-9,-]+$"}},
                     "required": ["url"], "additionalProperties": False}]},
                "locale": {"$ref": "#/$defs/Locale"},
                "contact": {"$ref": "#/$defs/Contact"},
                "mode": {"type": "string", "enum": ["fast", "balanced", "thorough"], "default": "balanced",
                         "description": "How much work to spend: fast answers sooner, thorough reads everything."},
                "options": {"type": "object", "description": "Tuning, rarely needed.", "additionalProperties": False,
                            "properties": {
                                "temperature": {"type": "number", "minimum": 0, "maximum": 2, "default": 0.7},
                                "max_tokens": {"type": "integer", "minimum": 1, "maximum": 32768, "default": 1024},
                                "labels": {"type": "array", "items": {"type": "string", "maxLength": 40},
                                           "uniqueItems": True, "maxItems": 32},
                                "deadline": {"type": "string", "format": "date-time"},
                                "callback": {"type": "string", "format": "uri", "pattern": "^https://"}}},
            },
            "required": ["input"], "additionalProperties": False,
        },
        "outputSchema": {
            "type": "object", "required": ["summary"],
            "properties": {
                "summary": {"type": "string", "description": "The answer, in the requested language."},
                "labels": {"type": "array", "items": {"type": "object", "required": ["name", "score"], "properties": {
                    "name": {"type": "string"}, "score": {"type": "number", "minimum": 0, "maximum": 1}}}},
                "fields": {"type": "object", "additionalProperties": {"type": "string"}},
                "usage": {"type": "object", "properties": {"input_tokens": {"type": "integer", "minimum": 0},
                                                           "output_tokens": {"type": "integer", "minimum": 0}}},
            },
        },
    }


def add_rich_manifest(sandbox: Sandbox) -> None:
    """300 actions shaped like real ones (:func:`rich_entry`): a manifest of about 1 MB."""
    for i in range(BIG_TOOLS):
        sandbox.add_action(rich_entry(i))


if __name__ == "__main__":  # a module of the benches, not a command: running it says what it is
    import argparse

    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).print_help()
