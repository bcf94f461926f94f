"""Start `colabhive-mcp serve` (real gunicorn) as a subprocess for the HTTP tests."""

import json
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import requests
from requests.adapters import HTTPAdapter

CONF = Path(__file__).resolve().parents[2] / "conf" / "gunicorn.conf.py"
SECRET = "test-secret-0123456789abcdef0123456789abcdef"
# what the tests tune, so that a wait takes a test milliseconds: polls every 0.2 s at most, an SSE
# keep-alive every second (the defaults: 5 s and 15 s); measurements run at the defaults (``tuned=False``)
TUNED = {"COLABHIVE_POLL_INITIAL": "0.05", "COLABHIVE_POLL_MAX_INTERVAL": "0.2", "COLABHIVE_SSE_KEEPALIVE": "1"}


def rpc_messages(response):
    """The JSON-RPC messages of a JSON body or of an SSE stream."""
    if response.headers.get("Content-Type", "").startswith("text/event-stream"):
        return [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ") and line[6:]]
    body = response.json()
    return body if isinstance(body, list) else [body]


def log_events(text, name):
    """The JSON log records in ``text`` whose event is ``name`` (other lines are skipped)."""
    found = []
    for line in text.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("event") == name:
            found.append(event)
    return found


class SourceAdapter(HTTPAdapter):
    """Connections from one local address."""

    def __init__(self, address, **kwargs):
        self.address = address
        super().__init__(pool_maxsize=64, **kwargs)

    def init_poolmanager(self, *args, **kwargs):
        super().init_poolmanager(*args, source_address=(self.address, 0), **kwargs)


def client(address):
    """A requests session whose connections come from ``address`` (127.0.0.2 …: another client of
    loopback, as the server's budgets per client address see it)."""
    session = requests.Session()
    session.mount("http://", SourceAdapter(address))
    return session


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class HttpServer:
    """``colabhive-mcp serve`` on a free loopback port; ``url`` is its /mcp endpoint."""

    def __init__(self, api_url, *args, env=None, debug=False, gunicorn_conf=False, host="127.0.0.1", public=False,
                 port=None, tuned=True):
        """``host``: the address to listen on (the server is always reached on 127.0.0.1);
        ``gunicorn_conf``: run plain gunicorn with the project's config file (or this one);
        ``public``: its ``url`` is its public_url (OAuth on); ``port``: a free one chosen already;
        ``tuned``: with the tests' quick polls and keep-alives (:data:`TUNED`), else at the defaults."""
        self.port = port or free_port()
        self.root = f"http://127.0.0.1:{self.port}"
        self.url = self.root + "/mcp"
        env = {**({"COLABHIVE_PUBLIC_URL": self.url} if public else {}), **(env or {})}
        environ = {k: v for k, v in os.environ.items() if not k.startswith("COLABHIVE_")}
        environ["XDG_CONFIG_HOME"] = os.devnull  # no user's config file
        environ.update({"COLABHIVE_LOG_FORMAT": "json", "COLABHIVE_SESSION_SECRET": SECRET, **(TUNED if tuned else {})})
        environ.update(env or {})
        if gunicorn_conf:  # plain gunicorn with the project's config file; settings from the environment
            # the settings say loopback; gunicorn's own --bind (which wins over its config file) says ``host``
            environ.update({"COLABHIVE_BIND": f"127.0.0.1:{self.port}", "COLABHIVE_API_URL": api_url})
            conf = CONF if gunicorn_conf is True else gunicorn_conf
            argv = [sys.executable, "-m", "gunicorn", "-c", str(conf), "--bind", f"{host}:{self.port}",
                    "colabhive_mcp.transports.http:create_app()"]
        else:
            argv = [sys.executable, "-m", "colabhive_mcp", "serve", "--bind", f"{host}:{self.port}",
                    "--api-url", api_url, *(["--debug"] if debug else []), *args]
        # a group of its own, as a terminal's foreground job: Ctrl-C (interrupt) reaches the master and its workers
        self.process = subprocess.Popen(argv, env=environ, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                        start_new_session=True)
        self.lines: list[str] = []  # stderr, drained all along: a full pipe would block the server's logging
        self._drain = threading.Thread(target=self._read_stderr, name="server-stderr", daemon=True)
        self._drain.start()
        self._wait_ready()

    def _wait_ready(self, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self._drain.join(5)
                raise RuntimeError("the server exited: " + self.stderr())
            try:
                if requests.get(self.root + "/healthz", timeout=5).status_code == 200:
                    return
            except (requests.ConnectionError, requests.Timeout):  # not listening yet, or a busy machine
                time.sleep(0.1)
        raise RuntimeError("the server did not start")

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._drain.join(10)
        return self.stderr()

    def interrupt(self):
        """Ctrl-C in the terminal it runs in: SIGINT to every process of its group."""
        os.killpg(self.process.pid, signal.SIGINT)

    def _read_stderr(self) -> None:
        for raw in iter(self.process.stderr.readline, b""):
            self.lines.append(raw.decode(errors="replace"))

    def stderr(self, since: int = 0) -> str:
        """What the server has written to stderr so far (its logs), from line ``since`` on."""
        return "".join(self.lines[since:])


@contextlib.contextmanager
def hosted_server(url, *args, **env):
    """A hosted server with these settings (``http_threads=8`` is ``COLABHIVE_HTTP_THREADS=8``), stopped after."""
    running = HttpServer(url, *args, env={f"COLABHIVE_{k.upper()}": str(v) for k, v in env.items()})
    try:
        yield running
    finally:
        running.stop()


def events(server, name):
    """The log records ``name`` the server has written so far."""
    return log_events(server.stderr(), name)
