"""Where the hosted server's CPU goes per warm ``tools/call``: a profile taken inside a gunicorn worker.

    python scripts/profile.py                       # 8 clients, 10 s; the top 25 functions
    python scripts/profile.py --top 40 --sort cumtime --save worker.prof

Starts the sandbox gateway in its own process with the 1 MB manifest ``bench.py`` uses, and the hosted server twice,
each time driven by keep-alive clients making warm 2026 ``tools/call`` requests: first as deployed
(default settings, its default workers), to measure the server's CPU per call from ``/proc``; then
with one worker whose request threads each run ``cProfile`` on the thread's CPU clock (merged when
the worker exits: time spent waiting for a lock, the GIL or the network is not counted; the warm-up
is not profiled), to show where that CPU goes: by package, then by function (own time). cProfile slows what it measures, so
read the profile's shares, not its absolute times.
"""

from __future__ import annotations

import argparse
import os
import pstats
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import ROOT, cpu_seconds, modern_call  # noqa: E402
from bench_sandbox import Sandbox, add_big_manifest  # noqa: E402

from tests.support.http_server import HttpServer  # noqa: E402

# The project's gunicorn settings, plus hooks that profile each request thread of the worker.
PROFILING_CONF = """
import cProfile, os, pstats, threading, time
from colabhive_mcp.settings.sources import load
from colabhive_mcp.transports.http.hosting import export, gunicorn_settings

globals().update(gunicorn_settings(export(load().config)))
_profiles, _local = [], threading.local()


def post_fork(server, worker):
    handle = type(worker).handle
    go = os.path.join(os.environ["PROFILE_DIR"], "go")  # made once the warm-up is over

    def profiled(self, conn):
        if not os.path.exists(go):
            return handle(self, conn)
        profile = getattr(_local, "profile", None)
        if profile is None:
            profile = _local.profile = cProfile.Profile(time.thread_time)  # CPU time, not time waiting
            _profiles.append(profile)
        profile.enable()
        try:
            return handle(self, conn)
        finally:
            profile.disable()

    type(worker).handle = profiled


def worker_exit(server, worker):
    if _profiles:
        pstats.Stats(*_profiles).dump_stats(os.path.join(os.environ["PROFILE_DIR"], f"{os.getpid()}.prof"))
"""

PACKAGES = ("colabhive_mcp", "werkzeug", "gunicorn", "requests", "urllib3", "loguru", "prometheus_client",
            "jsonschema", "http", "json", "socket", "ssl", "email", "threading", "selectors")


def drive(url: str, clients: int, seconds: float) -> int:
    """Warm calls from ``clients`` keep-alive clients for ``seconds``; how many succeeded."""
    done = [0] * clients
    stop = time.monotonic() + seconds

    def client(index: int) -> None:
        session = requests.Session()
        while time.monotonic() < stop:
            modern_call(session, url)
            done[index] += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(done)


def measured_calls(server: HttpServer, clients: int, seconds: float) -> tuple[float, int]:
    """:func:`drive` ``server`` for ``seconds``: its CPU (ms, user + system of its process tree) per
    call, and how many calls."""
    before = cpu_seconds(server.process.pid)
    calls = drive(server.url, clients, seconds)
    return (cpu_seconds(server.process.pid) - before) / max(calls, 1) * 1000, calls


def cpu_per_call(sandbox: Sandbox, clients: int, seconds: float) -> tuple[float, int]:
    """Server CPU per warm call at default settings, and how many calls."""
    server = HttpServer(sandbox.url, tuned=False)
    try:
        drive(server.url, clients, 1.0)  # warm: tenants, connections, caches
        return measured_calls(server, clients, seconds)
    finally:
        server.stop()


def profile(sandbox: Sandbox, clients: int, seconds: float, directory: str) -> pstats.Stats:
    conf = Path(directory) / "gunicorn.conf.py"
    conf.write_text(PROFILING_CONF)
    server = HttpServer(sandbox.url, env={"COLABHIVE_API_URL": sandbox.url, "COLABHIVE_HTTP_WORKERS": "1",
                                          "PROFILE_DIR": directory},
                        gunicorn_conf=str(conf))
    try:
        drive(server.url, clients, 1.0)  # not profiled: tenants, connections, caches
        (Path(directory) / "go").touch()
        drive(server.url, clients, seconds)
    finally:
        server.stop()
    files = sorted(Path(directory).glob("*.prof"))
    if not files:
        raise SystemExit("the worker wrote no profile")
    return pstats.Stats(*map(str, files))


def package_of(filename: str) -> str:
    if filename.startswith("~") or filename.startswith("<"):
        return "builtins (C)"
    parts = Path(filename).parts
    for name in PACKAGES:
        if name in parts or Path(filename).stem == name:
            return name
    return "other"


def by_package(stats: pstats.Stats) -> list[tuple[str, float]]:
    own: dict[str, float] = defaultdict(float)
    for (filename, _line, _name), (_cc, _nc, tottime, _ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        own[package_of(filename)] += tottime
    total = sum(own.values()) or 1.0
    return sorted(((name, seconds / total) for name, seconds in own.items()), key=lambda item: -item[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--sort", default="tottime", choices=["tottime", "cumtime"])
    parser.add_argument("--save", metavar="FILE", help="also write the merged profile (for snakeviz, pstats)")
    args = parser.parse_args()
    os.chdir(ROOT)
    with Sandbox(page_size=100, cold_start_s=2) as sandbox, tempfile.TemporaryDirectory() as directory:
        add_big_manifest(sandbox)  # as bench.py: 300 more actions, a manifest of about 1 MB
        cpu_ms, calls = cpu_per_call(sandbox, args.clients, args.seconds)
        print(f"server CPU per warm tools/call: {cpu_ms:.2f} ms ({calls} calls, {args.clients} clients, "
              f"default settings)\n")
        stats = profile(sandbox, args.clients, args.seconds, directory)
    print("own time by package (profiled worker):")
    for name, share in by_package(stats):
        if share >= 0.005:
            print(f"  {share * 100:5.1f} %  {name}")
    print()
    if args.save:
        stats.dump_stats(args.save)
    stats.sort_stats(args.sort).print_stats(args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
