"""Running the sandbox gateway: in-process on a background thread, or standalone."""

from __future__ import annotations

import os
import sys
import threading
from types import TracebackType
from typing import Any

from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

from .app import create_app
from .contract import API_PREFIX, DEMO_KEYS
from .faults import Faults


class _QuietHandler(WSGIRequestHandler):
    """Werkzeug's handler without the per-request access log line."""

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass


class Sandbox:
    """A sandbox gateway served by a threaded Werkzeug server on a daemon thread.

    ``options`` are the ``Settings`` fields (``cold_start_s``, ``page_size``, ``poll_after_s``, ...).
    ``port=0`` picks a free port; ``url`` is known once started.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, **options: Any) -> None:
        self.host = host
        self.port = port
        self.app = create_app(**options)
        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None
        self._owner = 0  # the process whose thread serves (a forked child must not wait for it)

    @property
    def root_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def url(self) -> str:
        """The gateway base URL routes are appended to."""
        return self.root_url + API_PREFIX

    @property
    def faults(self) -> Faults:
        return self.app.state.faults

    @property
    def journal(self) -> list[dict[str, Any]]:
        return self.journal_entries()

    def journal_entries(self) -> list[dict[str, Any]]:
        """A snapshot of the recorded gateway requests, oldest first."""
        return self.app.state.journal.entries()

    def add_action(
        self, entry: dict[str, Any], keys: list[str] | None = None, *, result: Any = None, seconds: float = 0.0
    ) -> None:
        """Add or replace an action seen by ``keys`` (None: every key). It answers ``result``
        (None: its own arguments) after ``seconds``."""
        self.app.state.add_action(entry, keys, result, seconds)

    def add_key(self, key: str) -> None:
        """Accept one more API key (``hive_...``) until the next reset; it sees the public actions."""
        self.app.state.add_key(key)

    def remove_action(self, slug: str) -> bool:
        """Remove an action; False if there was none."""
        return self.app.state.registry.remove(slug)

    def reset(self) -> None:
        """Clear journal, faults, invocations and model states; restore the default catalogue."""
        self.app.state.reset()

    def start(self) -> Sandbox:
        self.app.state.stopping.clear()
        self._server = make_server(self.host, self.port, self.app, threaded=True, request_handler=_QuietHandler)
        self.port = self._server.server_port
        self._thread = threading.Thread(target=self._server.serve_forever, name="colabhive-sandbox", daemon=True)
        self._thread.start()
        self._owner = os.getpid()
        return self

    def stop(self) -> None:
        """Stop serving; held requests and injected waits end at once."""
        if self._server is None or self._thread is None or os.getpid() != self._owner:
            return  # not started, or a forked child (a gunicorn worker) leaving the parent's block
        self.app.state.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
        self._server = self._thread = None

    def __enter__(self) -> Sandbox:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()


def serve(host: str = "127.0.0.1", port: int = 8600, quiet: bool = False, **options: Any) -> None:
    """Serve the sandbox gateway until interrupted (``colabhive-mcp sandbox``); ``quiet``: no
    line per request."""
    server = make_server(host, port, create_app(**options), threaded=True,
                         request_handler=_QuietHandler if quiet else None)
    keys = ", ".join(DEMO_KEYS)
    print(
        f"ColabHive sandbox gateway at http://{host}:{server.server_port}{API_PREFIX} (demo keys: {keys})",
        file=sys.stderr,
        flush=True,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
