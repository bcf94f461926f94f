"""Running the HTTP app: gunicorn with the project's settings, or Werkzeug for debugging.

``conf/gunicorn.conf.py`` and ``colabhive-mcp serve`` both take their gunicorn settings from
:func:`gunicorn_settings`, so there is one place that decides workers, threads and timeouts.

``serve``'s workers get their configuration from the process that forks them, as an object: none
of it goes through the environment, so no secret setting is handed on to whatever process a worker
or gunicorn may start. Only prometheus_client's directory is put there (it reads nothing else).
Under plain gunicorn, the workers read the operator's environment (and files) themselves.
"""

from __future__ import annotations

import contextlib
import gc
import glob
import os
import secrets
import shutil
import signal
import sys
import tempfile
import threading
from typing import Any

from ... import tracing
from ...logs import log
from ...settings.config import Config, ConfigError
from ...store.runtime_dir import check_runtime_dir
from .relay import RELAY_DIR

SECRET_ENV = "COLABHIVE_SESSION_SECRET"
RUNTIME_DIR_ENV = "COLABHIVE_RUNTIME_DIR"
STATE_DIR_ENV = "COLABHIVE_STATE_DIR"
METRICS_ENV = "PROMETHEUS_MULTIPROC_DIR"
SYSTEMD_RUNTIME_ENV = "RUNTIME_DIRECTORY"  # systemd's RuntimeDirectory=
SYSTEMD_STATE_ENV = "STATE_DIRECTORY"  # systemd's StateDirectory=
INTERRUPTED = 128 + signal.SIGINT  # the exit status of a program ended by Ctrl-C
THREAD_STACK_BYTES = 4 << 20  # half the usual 8 MiB; at 1 MiB, Python 3.13 can crash on deep JSON
# The runtime directory this process made, or the relay in a given one, with the maker's pid: a forked
# worker inherits the list, and a worker that exits (its SystemExit unwinds through run_gunicorn) must
# not remove what its siblings and the next worker still use.
_removed_at_exit: list[tuple[int, str]] = []


def gunicorn_settings(config: Config) -> dict[str, Any]:
    """gthread workers with enough threads for long polls; timeouts that never kill a stream."""
    return {
        "bind": [config.bind],
        "worker_class": "gthread",
        "workers": config.http_workers,
        "threads": config.http_threads,
        # Connections per worker: one per thread, as many again kept alive between requests (gthread
        # keeps a connection alive only while it has more connections than threads); past that,
        # they stay in the listen queue for the other workers.
        "worker_connections": 2 * config.http_threads,
        "post_fork": small_stacks,
        # gthread workers heartbeat from their main loop, so a long SSE call is never "silent":
        # this only kills a worker whose whole process hangs.
        "timeout": 60,
        # SIGTERM: calls in flight may finish for shutdown_grace seconds, then they are cancelled
        # upstream and answered; gunicorn waits a little longer for those answers to go out.
        "graceful_timeout": int(config.shutdown_grace) + 15,
        "post_worker_init": worker_ready,
        "child_exit": forget_worker_metrics,
        "when_ready": say_ready,
        "on_exit": stopped,
        "keepalive": 75,  # behind nginx's keepalive_timeout
        "accesslog": None,  # never log URLs or users' traffic; events are logged by the app
        "errorlog": "-",
        "loglevel": "warning",
        "proc_name": "colabhive-mcp",
        "forwarded_allow_ips": "127.0.0.1,::1",
    }


def say_ready(server: Any) -> None:
    """gunicorn hook: once it listens, where (one plain line, whatever the logs' format)."""
    places = ", ".join(f"{listener}/mcp" for listener in server.LISTENERS)
    print(f"colabhive-mcp: serving MCP at {places} ({server.num_workers} workers)", file=sys.stderr, flush=True)


def stopped(server: Any) -> None:
    """gunicorn hook: the master is about to exit: the runtime directory it made goes, and it says so."""
    remove_runtime_dir(server)
    print("colabhive-mcp: stopped", file=sys.stderr, flush=True)


def small_stacks(server: Any, worker: Any) -> None:
    """gunicorn hook: the worker's threads mostly sleep on a poll; 4 MiB of stack each is plenty
    (the default, 8 MiB, is address space that a thousand threads never touch)."""
    threading.stack_size(THREAD_STACK_BYTES)


def worker_ready(worker: Any) -> None:
    """gunicorn hook, once a worker has loaded the app: it drains on SIGTERM (:func:`drain_on_sigterm`),
    and what it holds so far (its modules, its settings: some hundred thousand objects that live as long
    as it does) is moved out of the garbage collector's sight (``gc.freeze``), so that a collection walks
    only what requests made: reading a new key's 1 MB manifest and making its tools took 60 % longer for
    collections that walked them all."""
    drain_on_sigterm(worker)
    gc.freeze()


def drain_on_sigterm(worker: Any) -> None:
    """gunicorn hook: after SIGTERM, give calls ``shutdown_grace`` seconds (handing out no more
    continuations), then drain the app. A terminal's Ctrl-C reaches every process of the group: the
    master alone decides what it means (:class:`Foreground`), so a worker ignores it."""
    stop = worker.handle_exit

    def handle_exit(signum: int, frame: Any) -> None:
        stop(signum, frame)
        app = worker.wsgi
        app.close()
        timer = threading.Timer(app.config.shutdown_grace, app.drain)
        timer.daemon = True
        timer.start()

    signal.signal(signal.SIGTERM, handle_exit)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def prepare_metrics_dir() -> None:
    """Multiprocess metrics: one fresh directory per server, set before prometheus_client is
    imported anywhere (the workers fork from this process and inherit it)."""
    directory = os.environ.get(METRICS_ENV)
    if directory:
        os.makedirs(directory, exist_ok=True)
        for stale in glob.glob(os.path.join(directory, "*.db")):
            os.remove(stale)
    else:
        os.environ[METRICS_ENV] = tempfile.mkdtemp(prefix="colabhive-mcp-metrics-")


def forget_worker_metrics(_server: Any, worker: Any) -> None:
    """gunicorn hook: a dead worker's live gauges (calls in flight, tenants) stop counting."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)


def made_up_secret(config: Config) -> Config:
    """A session secret for a server that may make one up (one process, a sandbox, or a local
    single-key server): sessions and task ids then last as long as this start. Hosted mode has to
    be given one (:func:`colabhive_mcp.transports.http.app.check_config`)."""
    if config.session_secret:
        return config
    log.bind(hint=f"set {SECRET_ENV} so sessions survive restarts").warning("http.session_secret_generated")
    return config.replace(session_secret=secrets.token_hex(32))


def prepare_runtime_dir(config: Config) -> Config:
    """The instance's private directory (its store, the cancel relay): the configured one, systemd's
    ``RuntimeDirectory``, or one made now (mode 0700); raises ``ConfigError`` when it is not this
    user's alone (:func:`colabhive_mcp.store.runtime_dir.check_runtime_dir`). Cancel markers are removed at start
    and exit; the store is kept (its entries expire on their own, and a call kept for a retry survives
    a restart)."""
    directory = config.runtime_dir or os.environ.get(SYSTEMD_RUNTIME_ENV, "").split(":")[0]  # systemd: the first
    if directory:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        check_runtime_dir(directory)
        shutil.rmtree(os.path.join(directory, RELAY_DIR), ignore_errors=True)
        _removed_at_exit.append((os.getpid(), os.path.join(directory, RELAY_DIR)))
    else:
        directory = tempfile.mkdtemp(prefix="colabhive-mcp-")
        _removed_at_exit.append((os.getpid(), directory))
    return config.replace(runtime_dir=directory)


def prepare_state_dir(config: Config) -> Config:
    """The instance's lasting directory: the configured one, or systemd's ``StateDirectory`` (made
    now, mode 0700); ``ConfigError`` when it is not this user's alone. None: the runtime directory serves."""
    directory = config.state_dir or os.environ.get(SYSTEMD_STATE_ENV, "").split(":")[0]
    if not directory:
        return config
    if config.runtime_dir and os.path.realpath(directory) == os.path.realpath(config.runtime_dir):
        return config.replace(state_dir=None)  # (the instance store is there already)
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"state directory {directory}: {exc.strerror}") from None
    check_runtime_dir(directory, "state directory", "what keys spent is kept there")
    return config.replace(state_dir=directory)


def remove_runtime_dir(_server: Any = None) -> None:
    """gunicorn hook (and ``serve``'s last step): remove the runtime directory this process made, or
    the cancel markers from the one it was given; in any other process (a worker), nothing."""
    while _removed_at_exit:
        maker, directory = _removed_at_exit.pop()
        if maker == os.getpid():
            shutil.rmtree(directory, ignore_errors=True)


def prepare(config: Config) -> Config:
    """The directories the workers share, ready before they fork: metrics, the runtime and state directories."""
    prepare_metrics_dir()
    return prepare_state_dir(prepare_runtime_dir(config))


def export(config: Config) -> Config:
    """For plain gunicorn (``conf/gunicorn.conf.py``), whose workers load their configuration from
    the environment as the master did: :func:`prepare`, and tell them the runtime directory (which
    may have been made now). Nothing else, secrets least of all: they read what the master read."""
    config = prepare(config)
    os.environ[RUNTIME_DIR_ENV] = config.runtime_dir or ""
    os.environ[STATE_DIR_ENV] = config.state_dir or ""
    return config


def run_gunicorn(config: Config) -> None:
    """Serve the app under gunicorn; each worker builds it from ``config``, which it has from the fork."""
    from gunicorn.app.base import BaseApplication

    config = prepare(config)

    class Application(BaseApplication):
        def load_config(self) -> None:
            for name, value in gunicorn_settings(config).items():
                self.cfg.set(name, value)

        def run(self) -> None:
            foreground_arbiter(config.shutdown_grace)(self).run()

        def load(self) -> Any:  # in the worker, after the fork (logs are configured already)
            from .app import create_app

            tracing.configure()  # an exporter's thread does not survive a fork
            return create_app(config)

    try:
        Application().run()
    finally:
        remove_runtime_dir()


def foreground_arbiter(grace: float) -> Any:
    """gunicorn's master as ``serve`` runs it: Ctrl-C stops as SIGTERM does (calls in flight get
    ``grace`` seconds, then are cancelled at the gateway and answered with an error), saying so at
    once; a second Ctrl-C stops at once, quietly (the workers are killed)."""
    from gunicorn.arbiter import Arbiter

    class Foreground(Arbiter):
        def handle_int(self) -> None:
            print(f"\ncolabhive-mcp: stopping: calls in flight have {grace:g} s to finish, then they are cancelled at "
                  "ColabHive and answered with an error (Ctrl-C again stops at once)", file=sys.stderr, flush=True)
            signal.signal(signal.SIGINT, self.at_once)
            raise StopIteration  # (gunicorn's way out of its loop: a graceful stop, as for SIGTERM)

        def at_once(self, _signum: int, _frame: Any) -> None:
            for pid in list(self.WORKERS):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            remove_runtime_dir()
            os._exit(INTERRUPTED)

    return Foreground


def run_debug(config: Config) -> None:
    """One process, Werkzeug's threaded server: ``breakpoint()`` works anywhere."""
    from werkzeug.serving import run_simple

    from .app import McpApp

    host, _, port = config.bind.rpartition(":")
    tracing.configure()
    run_simple(host.strip("[]"), int(port), McpApp(config), threaded=True)
