"""A keep-alive gateway stub for ``bench.py``'s cold rows: a manifest served as one page from memory.

The sandbox gateway makes each page of a manifest when asked (about 17 ms per 100 entries here, in
a Python process on the same cores), and a server that overlaps its own work with that wait gains
by it. A gateway with its manifest ready, or a stub like the ones the cold paths were first
measured on, answers at once: then a first tool list costs what the server does, and nothing
hides it. :class:`StubGateway` is that gateway: the sandbox's manifest read once, all its entries
in one page, gzipped when asked, ``304`` to its ETag. It checks no key (every key gets the demo
key's manifest), and answers nothing else but the sandbox's key registration, which it accepts.
``bench.py`` runs it on threads of its own process: it only sends bytes it holds.

    python scripts/stub_gateway.py [--port N]   # the bench's 1 MB manifest, until Ctrl-C

prints the URL to give a server (``--api-url``; the older release takes the part before ``/api``).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from colabhive_mcp.sandbox import API_PREFIX, DEMO_KEY  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_sandbox import Sandbox, add_big_manifest  # noqa: E402

MANIFEST = API_PREFIX + "/mcp/manifest"


class StubGateway:
    """The stub on a free loopback port: ``root_url`` and ``url`` (with the API prefix), as a ``Sandbox`` has."""

    def __init__(self, entries: list[dict[str, Any]], port: int = 0) -> None:
        body = json.dumps({"tools": entries, "nextCursor": None}, separators=(",", ":")).encode()
        self.etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
        self.body, self.gzipped = body, gzip.compress(body, 6)
        self._server = ThreadingHTTPServer(("127.0.0.1", port), _handler(self))
        self._server.daemon_threads = True
        self.root_url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self.url = self.root_url + API_PREFIX
        threading.Thread(target=self._server.serve_forever, name="stub-gateway", daemon=True).start()

    @classmethod
    def of(cls, sandbox_url: str, port: int = 0) -> StubGateway:
        """A stub serving the manifest the sandbox at ``sandbox_url`` shows its demo key, every page of it."""
        entries, cursor = [], None
        while True:
            answer = requests.get(sandbox_url + "/mcp/manifest", params={"cursor": cursor} if cursor else None,
                                  headers={"X-API-Key": DEMO_KEY}, timeout=30)
            answer.raise_for_status()
            page = answer.json()
            entries += page["tools"]
            cursor = page.get("nextCursor")
            if not cursor:
                return cls(entries, port)

    def __enter__(self) -> StubGateway:
        return self

    def __exit__(self, *_exc: Any) -> None:
        self.stop()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler(stub: StubGateway) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keeps connections alive, as a gateway does
        disable_nagle_algorithm = True  # a small answer's headers and body go out at once

        def do_GET(self) -> None:
            if self.path.partition("?")[0] != MANIFEST:
                self._answer(404, b'{"detail": "the stub serves the manifest only"}')
                return
            manifest = {"ETag": stub.etag, "Vary": "Accept-Encoding"}
            if self.headers.get("If-None-Match") == stub.etag:
                self._answer(304, None, manifest)
            elif "gzip" in self.headers.get("Accept-Encoding", ""):
                self._answer(200, stub.gzipped, {**manifest, "Content-Encoding": "gzip"})
            else:
                self._answer(200, stub.body, manifest)

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            registered = self.path == "/_sandbox/keys"  # ``bench.new_key``: every key is known here
            self._answer(200 if registered else 404, b"{}" if registered else b'{"detail": "no such route"}')

        def _answer(self, status: int, body: bytes | None, headers: dict[str, str] | None = None) -> None:
            """``body`` with its length, or none at all (a 304 says no length: RFC 9110, 8.6)."""
            self.send_response(status)
            for name, value in {"Content-Type": "application/json", **(headers or {})}.items():
                self.send_header(name, value)
            if body is not None:
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if body:
                self.wfile.write(body)

        def log_message(self, *_args: Any) -> None:  # nothing on the bench's output
            pass

    return Handler


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="the port to listen on (default: a free one)")
    args = parser.parse_args()

    with Sandbox(page_size=100, cold_start_s=2) as sandbox:
        add_big_manifest(sandbox)
        stub = StubGateway.of(sandbox.url, args.port)
    print(f"{stub.url}  ({len(stub.body) / 1e6:.2f} MB, ETag {stub.etag}); Ctrl-C stops it", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        stub.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
