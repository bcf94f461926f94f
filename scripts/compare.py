"""Which of two variants of the hosted server costs less CPU per warm ``tools/call``, measured side by side.

    python scripts/compare.py --b-env COLABHIVE_LOG_LEVEL=warning      # what the call's log record costs
    git archive HEAD~1 colabhive_mcp | tar -x -C /tmp/before
    python scripts/compare.py --a /tmp/before --rounds 32              # what the last commit saved

Two hosted servers at their default settings share one sandbox gateway (with ``bench.py``'s 1 MB
manifest). Keep-alive clients drive one, then the other, in bursts of ``--seconds`` (the order flips
every round), and each burst's server CPU (user and system time of the server's process tree, from
``/proc``) is divided by the calls it answered. On a shared machine a round moves by about
±0.05 ms, so read the median of the per-round differences over 16 rounds or more.

Each server imports its variant of the package from ``PYTHONPATH`` with ``PYTHONSAFEPATH`` set:
``python -m`` would otherwise put the working directory first, and both would run the checkout.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import ROOT  # noqa: E402
from bench_sandbox import Sandbox, add_big_manifest  # noqa: E402
from profile import drive, measured_calls  # noqa: E402
from tests.support.http_server import HttpServer  # noqa: E402


def server_of(sandbox: Sandbox, package_root: str, settings: list[str]) -> HttpServer:
    """A hosted server running the ``colabhive_mcp`` found in ``package_root``, with ``NAME=VALUE`` settings."""
    if not (Path(package_root) / "colabhive_mcp").is_dir():
        raise SystemExit(f"{package_root} holds no colabhive_mcp package")
    env = {"PYTHONSAFEPATH": "1", "PYTHONPATH": str(Path(package_root).resolve())}
    env.update(setting.split("=", 1) for setting in settings)
    return HttpServer(sandbox.url, env=env, tuned=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", default=str(ROOT), metavar="DIR", help="the directory holding A's colabhive_mcp "
                        "(default: this checkout)")
    parser.add_argument("--b", default=str(ROOT), metavar="DIR", help="the same for B")
    parser.add_argument("--a-env", action="append", default=[], metavar="NAME=VALUE", help="a setting for A only")
    parser.add_argument("--b-env", action="append", default=[], metavar="NAME=VALUE", help="a setting for B only")
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=2.5, help="each burst")
    args = parser.parse_args()
    with Sandbox(page_size=100, cold_start_s=2) as sandbox:
        add_big_manifest(sandbox)
        servers: dict[str, HttpServer] = {}
        try:
            for name, root, settings in (("A", args.a, args.a_env), ("B", args.b, args.b_env)):
                servers[name] = server_of(sandbox, root, settings)
            for server in servers.values():
                drive(server.url, args.clients, 1.0)  # warm: tenants, connections, caches
            measured: dict[str, list[float]] = {"A": [], "B": []}
            for round_ in range(args.rounds):
                for name in ("A", "B") if round_ % 2 == 0 else ("B", "A"):
                    measured[name].append(measured_calls(servers[name], args.clients, args.seconds)[0])
        finally:
            for server in servers.values():
                server.stop()
    differences = [b - a for a, b in zip(measured["A"], measured["B"])]
    for name, figures in measured.items():
        print(f"{name}: {statistics.median(figures):.3f} ms of server CPU per call (median of {len(figures)} bursts)")
    print(f"B - A: {statistics.median(differences):+.3f} ms per call (median of the rounds); B less in "
          f"{sum(d < 0 for d in differences)} of {len(differences)} rounds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
