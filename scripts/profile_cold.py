"""Where the time of a first tool list goes: every thread of the server profiled, on the bench's 1 MB manifest.

    python scripts/profile_cold.py                 # both paths; the top 25 functions of each
    python scripts/profile_cold.py --path stdio --top 40 --sort tottime --save stdio.prof
    python scripts/profile_cold.py --path hosted --stub   # on a gateway with the manifest ready as one page

The cold paths of ``bench.py``: a new tenant's ``initialize`` → first ``tools/list`` in a fresh
hosted server at its default workers, warmed with keyless requests, each request on a new connection
(``hosted_first_list``; every worker is profiled), and a stdio server's spawn → ``initialize`` → first ``tools/list`` at a first start
(``stdio_first_list_unsaved``) or, with ``--path stdio-saved``, with the manifest an earlier start
saved, within its TTL (``stdio_first_list_fresh``). Every thread of the server is profiled with ``cProfile`` on the wall clock (the
request threads, and every thread started meanwhile, e.g. the stdio manifest fetch): time spent
waiting for the gateway or the interpreter lock counts where it is spent, since that is what the
client waits for. The hosted worker's keyless warm-up is not profiled; the stdio process is profiled
from its first line of the package. Prints the shares by package (own time, all threads) and the
functions by cumulative time. cProfile slows what it measures: read the shares, not the times.
"""

from __future__ import annotations

import argparse
import os
import pstats
import sys
import tempfile
import time
from functools import partial
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent))

from profile import by_package  # noqa: E402

from bench import ROOT, Upstream, first_list, installed_bytecode, new_key, warm_without_key  # noqa: E402
from bench_sandbox import Sandbox, add_big_manifest, add_rich_manifest  # noqa: E402
from stub_gateway import StubGateway  # noqa: E402

from colabhive_mcp.cli.demo import StdioPeer  # noqa: E402
from colabhive_mcp.sandbox import DEMO_KEY  # noqa: E402
from tests.support.http_server import HttpServer  # noqa: E402

# Profiles every thread: a request thread for each request it handles once ``go`` exists, and every
# thread started after that for its whole run (one profile per thread at a time).
THREADS = """
import cProfile, os, threading
_profiles, _active = [], threading.local()


def profiled(call, go):
    def wrapper(*args, **kwargs):
        if getattr(_active, "on", False) or (go and not os.path.exists(go)):
            return call(*args, **kwargs)
        profile, _active.on = cProfile.Profile(), True
        _profiles.append(profile)
        profile.enable()
        try:
            return call(*args, **kwargs)
        finally:
            profile.disable()
            _active.on = False
    return wrapper


def dump(path):
    profiles = [p for p in _profiles if p.getstats()]
    if profiles:
        import pstats
        pstats.Stats(*profiles).dump_stats(path)
"""

HOSTED_CONF = THREADS + """
from colabhive_mcp.settings.sources import load
from colabhive_mcp.transports.http.hosting import export, gunicorn_settings

globals().update(gunicorn_settings(export(load().config)))


def post_fork(server, worker):
    go = os.path.join(os.environ["PROFILE_DIR"], "go")
    type(worker).handle = profiled(type(worker).handle, go)
    threading.Thread.run = profiled(threading.Thread.run, go)


def worker_exit(server, worker):
    dump(os.path.join(os.environ["PROFILE_DIR"], f"{os.getpid()}.prof"))
"""

STDIO_MAIN = THREADS + """
import atexit, sys
threading.Thread.run = profiled(threading.Thread.run, None)
main_profile = cProfile.Profile()
_profiles.append(main_profile)
atexit.register(lambda: (main_profile.disable(), dump(sys.argv[1])))
main_profile.enable()
from colabhive_mcp.cli import main
raise SystemExit(main(sys.argv[2:]))
"""


def hosted(sandbox: Upstream, directory: Path) -> pstats.Stats:
    conf = directory / "gunicorn.conf.py"
    conf.write_text(HOSTED_CONF)
    server = HttpServer(sandbox.url, env={"PROFILE_DIR": str(directory)}, gunicorn_conf=str(conf))
    try:
        warm_without_key(server.url)
        key = new_key(sandbox)
        (directory / "go").touch()
        started = time.perf_counter()
        first_list(server.url, key)
        print(f"hosted: a new tenant's initialize → first tools/list: {(time.perf_counter() - started) * 1000:.0f} ms"
              " (profiled)")
    finally:
        server.stop()
    return _stats(directory.glob("*.prof"))


def stdio(sandbox: Upstream, directory: Path, saved: bool = False) -> pstats.Stats:
    """``saved``: start with the manifest an earlier start saved (a first start, unprofiled, saves it)."""
    out = directory / "stdio.prof"
    argv = [sys.executable, "-c", STDIO_MAIN, str(out), "stdio", "--api-url", sandbox.url, "--log-level", "error"]
    env = {**os.environ, "COLABHIVE_API_KEY": DEMO_KEY, "XDG_CACHE_HOME": str(directory)}
    if saved:
        first = StdioPeer([sys.executable, "-m", "colabhive_mcp", *argv[4:]], env=env, cwd=str(ROOT))
        first.initialize()
        first.request("tools/list")
        first.close()
    started = time.perf_counter()
    peer = StdioPeer(argv, env=env, cwd=str(ROOT))
    peer.initialize()
    peer.request("tools/list")
    print(f"stdio{' (manifest saved)' if saved else ''}: spawn → first tools/list: "
          f"{(time.perf_counter() - started) * 1000:.0f} ms (profiled)")
    peer.close()
    return _stats([out])


def _stats(files) -> pstats.Stats:
    found = [str(f) for f in files]
    if not found:
        raise SystemExit("the server wrote no profile")
    return pstats.Stats(*found)


def report(name: str, stats: pstats.Stats, top: int, sort: str, save: str | None) -> None:
    print(f"\n{name}: own time by package (all threads)")
    for package, share in by_package(stats):
        if share >= 0.005:
            print(f"  {share * 100:5.1f} %  {package}")
    if save:
        stats.dump_stats(save)
    stats.sort_stats(sort).print_stats(top)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", choices=["hosted", "stdio", "stdio-saved", "both"], default="both",
                        help="stdio-saved: a stdio start that finds the manifest an earlier start saved")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--sort", default="cumtime", choices=["tottime", "cumtime"])
    parser.add_argument("--save", metavar="FILE", help="also write each merged profile (FILE.hosted, FILE.stdio)")
    parser.add_argument("--manifest", choices=("big", "rich"), default="big", help="as bench.py's")
    parser.add_argument("--stub", action="store_true", help="on a gateway with the manifest ready as one page "
                        "(stub_gateway.py), not on the sandbox")
    args = parser.parse_args()
    os.chdir(ROOT)
    installed_bytecode()
    with Sandbox(page_size=100, cold_start_s=2) as sandbox, tempfile.TemporaryDirectory() as directory:
        (add_rich_manifest if args.manifest == "rich" else add_big_manifest)(sandbox)
        gateway: Upstream = StubGateway.of(sandbox.url) if args.stub else sandbox
        for name, run in (("hosted", hosted), ("stdio", stdio), ("stdio-saved", partial(stdio, saved=True))):
            if args.path == name or (args.path == "both" and name != "stdio-saved"):
                place = Path(directory) / name
                place.mkdir()
                report(name, run(gateway, place), args.top, args.sort, args.save and f"{args.save}.{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
