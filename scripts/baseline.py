"""What ``bench.py`` measures beside this project's server, in the same run, on the same gateway: the
stack's floor (:class:`FloorServer`, always), and an older release (``--baseline PYTHON``).

PYTHON is an interpreter with that release installed, e.g. for 0.3.4 (its HTTP server needs the
``http`` extra)::

    python3 -m venv /tmp/colabhive-0.3.4
    /tmp/colabhive-0.3.4/bin/pip install 'colabhive-mcp[http]==0.3.4'
    python scripts/bench.py --baseline /tmp/colabhive-0.3.4/bin/python

It runs at its own defaults. It takes the gateway's root URL (and adds ``/api/builder/v1``
itself), and it invokes actions at ``/internal/mcp/actions/{slug}:invoke``. The sandbox that
``bench.py`` starts answers that route too (:func:`sandbox_app`). Both packages name their module
``colabhive_mcp``, so the old one always runs from a neutral directory, never from this checkout.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

import requests

from colabhive_mcp.sandbox import API_PREFIX, create_app
from colabhive_mcp.settings.config import Config
from colabhive_mcp.transports.http.hosting import gunicorn_settings

OLD_INVOKE = API_PREFIX + "/internal/mcp/actions/"  # the route 0.3.4 invokes at
INVOKE = API_PREFIX + "/actions/"


def sandbox_app(**options: Any) -> Callable[..., Any]:
    """The sandbox gateway's WSGI app, also answering the older package's invoke route."""
    app = create_app(**options)

    def both_routes(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        path = environ.get("PATH_INFO", "")
        if path.startswith(OLD_INVOKE):
            environ["PATH_INFO"] = INVOKE + path[len(OLD_INVOKE):]
        return app(environ, start_response)

    return both_routes


def _environment() -> dict[str, str]:
    """This machine's environment without this project's settings."""
    return {k: v for k, v in os.environ.items() if not k.startswith("COLABHIVE_")}


def version(python: str) -> str:
    """The release of colabhive-mcp that ``python`` has installed."""
    found = subprocess.run([python, "-c", "import colabhive_mcp; print(colabhive_mcp.__version__)"],
                           capture_output=True, text=True, cwd=tempfile.gettempdir(), env=_environment(), timeout=60)
    if found.returncode != 0:
        raise SystemExit(f"{python} has no colabhive_mcp installed: {found.stderr.strip()[-300:]}")
    return found.stdout.strip()


def stdio_command(python: str, gateway_root: str) -> tuple[list[str], dict[str, str], str]:
    """The older package's stdio server: argv, environment and working directory."""
    return ([python, "-m", "colabhive_mcp", "--api-url", gateway_root, "--log-level", "error"],
            _environment(), tempfile.gettempdir())


class ServerProcess:
    """A server that ``bench.py`` runs beside this project's: ``url`` is its JSON-RPC endpoint,
    ``process`` its process."""

    url: str
    process: subprocess.Popen

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


class BaselineServer(ServerProcess):
    """The older package's HTTP server (its ``serve`` command, at its defaults) on a free port."""

    def __init__(self, python: str, gateway_root: str, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}/mcp"
        self.process = subprocess.Popen(
            [python, "-m", "colabhive_mcp", "serve", "--host", "127.0.0.1", "--port", str(port),
             "--api-url", gateway_root, "--log-level", "error"],
            env=_environment(), cwd=tempfile.gettempdir(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                requests.get(f"http://127.0.0.1:{port}/health", timeout=1).raise_for_status()
                return
            except requests.RequestException:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"the baseline server did not start: {python}")


class FloorServer(ServerProcess):
    """``floor_app.py`` under gunicorn on ``port``, with the project's default workers and threads."""

    def __init__(self, gateway_url: str, port: int) -> None:
        settings = gunicorn_settings(Config())  # the project's own, for the settings that cost CPU per call
        self.url = f"http://127.0.0.1:{port}/mcp"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "--worker-class", settings["worker_class"],
             "--workers", str(settings["workers"]), "--threads", str(settings["threads"]),
             "--worker-connections", str(settings["worker_connections"]), "--keep-alive", str(settings["keepalive"]),
             "--bind", f"127.0.0.1:{port}", "--chdir", os.path.dirname(__file__), "floor_app:app"],
            env={**os.environ, "FLOOR_GATEWAY": gateway_url}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("the floor server did not start")


if __name__ == "__main__":  # a module of bench.py, not a command: running it says what it is
    import argparse

    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).print_help()
