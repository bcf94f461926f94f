"""The stdio transport: newline-delimited JSON-RPC on stdin/stdout.

The main thread reads lines, and answers a handshake-era ``ping`` itself. Tool calls (and the other
requests that may take long: a listen, a task's result) run on ``workers`` threads; every other
request on a few threads of its own, so a list or a discovery is never queued behind long calls.
Every write to stdout goes through one lock, and nothing but MCP messages is ever written there
(logs go to stderr).

Shutdown: end of input (the host has gone) and SIGTERM (or SIGINT) end every request still open
the way a cancellation does: a tool call's work is stopped upstream and the call answered with an
error, a ``subscriptions/listen`` gets its completion result, as over HTTP (the answer JSON-RPC
promises; 2026-07-28 also names a server's ``notifications/cancelled`` in one place: one reading, on
both transports). The process exits within about a second, whatever the gateway does.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from typing import Any, BinaryIO

from ..keys import KeyRejected
from ..logs import log
from ..protocol import Server, Session, jsonrpc
from ..protocol.jsonrpc import BatchFrame, Frame, JsonRpcError
from ..tenants.limits import LimitReached
from ..tenants.tenant import Tenant
from .workers import Workers

PREFETCH_AFTER_S = 0.5  # after the handshake, which must not wait for the gateway
QUICK_WORKERS = 4  # threads for the requests that wait for one answer of the gateway at most (lists, a task's status)
READ_CHUNK = 1 << 16
TEARDOWN_S = 1.5  # how long ended requests may take to stop their work upstream and answer (hosts wait 2 s)


class Shutdown(Exception):
    """Raised in the main thread by the SIGTERM handler."""


class StdioTransport:
    def __init__(self, server: Server, tenant: Tenant, stdin: BinaryIO, stdout: BinaryIO, *,
                 max_message_bytes: int, workers: int) -> None:
        self.server = server
        self.tenant = tenant
        self.stdin = stdin
        self.stdout = stdout
        self.max_message_bytes = max_message_bytes
        self.session = Session(id="stdio")
        self.workers = Workers(workers, "mcp-call")  # what may take long
        self.quick = Workers(QUICK_WORKERS, "mcp-request")
        self._write_lock = threading.Lock()
        self._stopped = threading.Event()

    def serve(self) -> None:
        """Serve until end of input or SIGTERM, then end what is still open (see the module's text)."""
        threading.Thread(target=self._watch_manifest, name="mcp-manifest-watch", daemon=True).start()
        try:
            while (line := self._read_line()) is not None:
                if line.strip():
                    self._receive(line)
            log.info("stdio.end_of_input")
        except (Shutdown, KeyboardInterrupt):
            log.info("stdio.shutdown")
        finally:
            self._stopped.set()
            self.workers.close()
            self.quick.close()
            self.server.drain()
            deadline = time.monotonic() + TEARDOWN_S
            if not (self.workers.wait(TEARDOWN_S) and self.quick.wait(max(0.0, deadline - time.monotonic()))):
                log.warning("stdio.exit_with_requests_open")
            self.tenant.save()  # a manifest no answer was written after

    def _watch_manifest(self) -> None:
        """Shortly after start, fetch the tool list (a rejected key is said on stderr at once, and
        the first tools/list is warm); then tell a handshake-era client when its tool list changed
        (2026 clients use listen)."""
        if self._stopped.wait(PREFETCH_AFTER_S):
            return
        try:
            self.tenant.verify()
        except KeyRejected as exc:
            log.bind(hint=exc.client_message).error("stdio.key_rejected")
        except LimitReached:
            pass  # the gateway cannot say now: the first tools/list asks it again

        def changed() -> None:
            if self.session.version is not None:
                self.write(jsonrpc.notification("notifications/tools/list_changed"))

        self.tenant.watch(self._stopped, changed)

    def write(self, message: dict[str, Any] | list[dict[str, Any]]) -> None:
        """Write one message."""
        data = jsonrpc.encode(message) + b"\n"
        with self._write_lock:
            try:
                self.stdout.write(data)
                self.stdout.flush()
            except (BrokenPipeError, ValueError):
                pass  # the client is gone; the read loop will see end of input

    def _read_line(self) -> bytes | None:
        """One line of at most ``max_message_bytes``; a longer one is skipped and answered."""
        line = self.stdin.readline(self.max_message_bytes + 1)
        if not line:
            return None
        if len(line) > self.max_message_bytes and not line.endswith(b"\n"):
            while True:  # discard the rest of the oversized line without holding it
                rest = self.stdin.readline(READ_CHUNK)
                if not rest or rest.endswith(b"\n"):
                    break
            self.write(jsonrpc.error(None, JsonRpcError(
                jsonrpc.INVALID_REQUEST, f"Invalid Request: message larger than {self.max_message_bytes} bytes")))
            return b""
        return line

    def _receive(self, line: bytes) -> None:
        try:
            frame = jsonrpc.parse(line)
        except JsonRpcError as exc:
            self.write(jsonrpc.error(None, exc))
            return
        if isinstance(frame, BatchFrame):
            self.workers.submit(self._run, frame)
            return
        plan = self.server.plan(frame)
        if plan.request and not (plan.opens or plan.light):
            (self.workers if plan.long else self.quick).submit(self._run, frame)
        else:  # the handshake, a ping, notifications (a cancellation), answers: done before the next line is read
            self._run(frame)

    def _run(self, frame: Frame) -> None:
        """Serve one frame; whatever goes wrong, the process keeps reading the next line."""
        try:
            answer = self.server.serve(frame, tenant=self.tenant, session=self.session, notify=self.write)
        except Exception:
            log.bind(method=frame.method).exception("stdio.internal_error")
            answer = jsonrpc.internal_error(frame)
        if answer is not None:
            self.write(answer)
            self.tenant.save()  # what the tenant keeps on disk, if it has news: never before an answer


def serve(server: Server, tenant: Tenant, *, max_message_bytes: int, workers: int) -> None:
    """Run the stdio transport on this process's stdin/stdout.

    ``sys.stdout`` is pointed at stderr while serving, so a stray ``print`` can never
    corrupt the protocol stream.
    """
    stdout = sys.stdout.buffer
    sys.stdout = sys.stderr
    previous = signal.signal(signal.SIGTERM, _raise_shutdown)
    try:
        StdioTransport(server, tenant, sys.stdin.buffer, stdout, max_message_bytes=max_message_bytes,
                       workers=workers).serve()
    finally:
        signal.signal(signal.SIGTERM, previous)
        sys.stdout = sys.__stdout__


def _raise_shutdown(_signum: int, _frame: Any) -> None:
    raise Shutdown()
