"""How ``bench.py`` reports: the performance table (docs/performance.rst) from a results file, and a comparison of two runs.

    python scripts/bench.py --table scripts/results/bench.json
    python scripts/bench.py --json new.json --compare scripts/results/bench.json
"""

from __future__ import annotations

from typing import Any

from colabhive_mcp.settings.config import Config

HEADLINES = {  # figure -> (label, how to read it from a results file, unit)
    "stdio_startup_ms": ("stdio start-up, p50", lambda r: r["p50"], "ms"),
    "overhead_stdio": ("added per call, stdio, p50", lambda r: r["added_p50_ms"], "ms"),
    "overhead_stdio_cpu": ("server CPU per call, stdio", lambda r: r.get("server_cpu_ms_per_call"), "ms"),
    "overhead_http": ("added per call, HTTP, p50", lambda r: r["added_p50_ms"], "ms"),
    "overhead_http_cpu": ("server CPU per call, HTTP, one client", lambda r: r.get("server_cpu_ms_per_call"), "ms"),
    "throughput_8_clients": ("throughput vs direct, 8 clients", lambda r: r["ratio"] * 100, "%"),
    "throughput_8_clients_cpu": ("server CPU per call, 8 clients", lambda r: r["server"]["cpu_us_per_call"]["server"] / 1000,
                                 "ms"),
    "floor_cpu": ("the stack's floor: server CPU per call, 8 clients",
                  lambda r: r["throughput_8_clients"]["server"]["cpu_us_per_call"]["server"] / 1000, "ms"),
    "tools_list_warm": ("warm tools/list, p50", lambda r: r["server_ms"]["p50"], "ms"),
    "new_tenant_first_list": ("new tenant: initialize → first tools/list, p50", lambda r: r["p50"], "ms"),
    "hosted_first_list": ("hosted, new key, new connections: → first tools/list, p50", lambda r: r["p50"], "ms"),
    "stdio_first_list": ("stdio: spawn → first tools/list, p50", lambda r: r["p50"], "ms"),
    "stdio_first_list_fresh": ("stdio: the same, saved within its TTL, p50", lambda r: r["p50"], "ms"),
    "stdio_first_list_aged": ("stdio: the same, saved past its TTL, p50", lambda r: r["p50"], "ms"),
    "stdio_first_list_unsaved": ("stdio: the same, nothing saved, p50", lambda r: r["p50"], "ms"),
    "tenancy": ("RSS added by the tenants", lambda r: r["rss_added_mb"], "MB"),
    "distinct_manifests": ("RSS kept for manifests let go", lambda r: r["rss_added_mb"][-1], "MB"),
    "churn": ("server CPU per new tenant, keys churning", lambda r: r["cpu_ms_per_tenant"]["median"], "ms"),
    "long_polls": ("peak RSS, concurrent long calls", lambda r: r["peak_rss_mb"], "MB"),
}


def render_comparison(old: dict[str, Any], new: dict[str, Any]) -> str:
    """Each headline figure measured in both runs: old, new, and the change."""
    lines = [f"compared with the run of {old['run']['date']} at {old['run']['commit']}:"]
    for name, (label, read, unit) in HEADLINES.items():
        figure = name.removesuffix("_cpu")
        try:
            before, after = read(old[figure]), read(new[figure])
        except (KeyError, TypeError):
            continue
        if before is None or after is None:
            continue
        change = f"{(after - before) / before * 100:+.0f} %" if before else ""
        lines.append(f"  {label:<42} {before:10.2f} → {after:10.2f} {unit:<3} {change}")
    return "\n".join(lines)


def render_table(results: dict[str, Any], source: str) -> str:
    """The performance table of docs/performance.rst (reStructuredText) from a results file: no hand-typed figure."""
    run = results["run"]
    threads, default_threads = run["http_server"]["threads"], Config().http_threads
    note = " (per-key limits off)" if run["http_server"]["environment"] else ""
    rows: list[tuple[str, str, str]] = []
    figure = results.get
    if figure("stdio_startup_ms"):
        s = results["stdio_startup_ms"]
        rows.append(("stdio start-up to the initialize answer", f"{s['p50']:.0f} ms p50 ({s['p99']:.0f} p99)", "110 ms"))
    for name, label in (("overhead_stdio", "stdio"), ("overhead_http", f"HTTP{note}")):
        if figure(name):
            o = results[name]
            rows.append((f"added per warm ``tools/call``, {label}",
                         f"+{o['added_p50_ms']:.2f} ms p50 ({spread(o['added_p50_ms_runs'], ' ms')}){_cpu(o)}", "1.5 ms"))
    if figure("tools_list_warm"):
        t = results["tools_list_warm"]
        rows.append((f"warm ``tools/list``, {t['tools']} tools, {t['bytes'] / 1e6:.1f} MB",
                     f"{t['server_ms']['p50']:.2f} ms p50 ({t['server_ms']['p99']:.2f} p99)", "2 ms"))
    for name, label in COLD_ROWS.items():
        if figure(name):
            c = results[name]
            rows.append((label, f"{c['p50']:.0f} ms p50 ({spread(c['runs_ms'], ' ms')}){_ratio(results, name)}",
                         COLD_TARGETS.get(name.removesuffix("_stub"), "0.8 × 0.3.4")))
            if "next" in c:
                rows.append((NEXT_ROWS[name], _cold_cell(c["next"]), "≤ 0.3.4"))
    if figure("cold_tools_list_100_threads"):
        rows.append(("manifest GETs for 100 simultaneous cold lists",
                     str(results["cold_tools_list_100_threads"]["manifest_gets"]), "1"))
    if figure("throughput_8_clients"):
        t = results["throughput_8_clients"]
        server, direct = t["server"], t["direct"]
        rows.append((f"throughput, 8 clients, vs direct{note}",
                     f"{server['calls_per_s']:g} vs {direct['calls_per_s']:g} calls/s: {t['ratio'] * 100:.0f} % "
                     f"({spread([round(r * 100) for r in t['ratio_runs']], ' %')}); server CPU "
                     f"{server['cpu_us_per_call']['server'] / 1000:.2f} ms/call", "1.4 ms CPU"))
    if figure("floor") and figure("throughput_8_clients"):
        floor = results["floor"]["throughput_8_clients"]["server"]
        own = results["throughput_8_clients"]["server"]["cpu_us_per_call"]["server"] - floor["cpu_us_per_call"]["server"]
        rows.append(("the stack's floor: a minimal app forwarding the call (``floor_app.py``), 8 clients",
                     f"{floor['calls_per_s']:g} calls/s; server CPU {floor['cpu_us_per_call']['server'] / 1000:.2f} "
                     f"ms/call, so the project's own work costs {own / 1000:.2f} ms/call", ""))
    if figure("long_polls"):
        p = results["long_polls"]
        setting = f"{threads} threads per worker" + ("" if threads == default_threads else
                                                     f", not the default {default_threads}")
        rows.append((f"{p['calls']} concurrent long calls, 20 per key ({setting}){note}",
                     f"{p['succeeded']} ok, {p['errors']} errors, {p['peak_threads']} threads, "
                     f"{p['peak_rss_mb']:.0f} MB", "all ok"))
    if figure("tenancy"):
        t = results["tenancy"]
        rows.append((f"{t['tenants']} tenants holding a {t['manifest_bytes'] / 1e6:.2f} MB manifest",
                     f"+{t['rss_added_mb']:.0f} MB RSS ({t['rss_total_mb']:.0f} MB in all)", "200 MB"))
    if figure("distinct_manifests"):
        d = results["distinct_manifests"]
        growth = ", ".join(f"{n}: +{mb:.0f}" for n, mb in zip(d["after"], d["rss_added_mb"]))
        rows.append((f"{d['manifests']} different 1 MB manifests ({d['entries_each']} entries each, none shared), "
                     "each listed and let go", f"RSS +{d['rss_added_mb'][-1]:.0f} MB (after {growth} MB)", "bounded"))
    if figure("churn"):
        c = results["churn"]
        cpu, rss, store = c["cpu_ms_per_tenant"], c["rss_mb"], c["store_mb"]
        rows.append((f"{c['keys']} keys, {c['laps']} laps, one ``tools/list`` each, through pools of {c['pool_size']} "
                     "per worker", f"server CPU per new tenant {cpu['median']:.0f} ms (first {c['batch']} keys "
                     f"{cpu['first']:.0f}, last {cpu['last']:.0f}); RSS {rss['first']:.0f} → {rss['last']:.0f} MB; "
                     f"instance store {store['first']:.0f} → {store['last']:.0f} MB", "flat"))
    if figure("polls_for_job"):
        p = results["polls_for_job"]
        rows.append((f"upstream polls for a {p['job_s']:g} s job", str(p["polls"]), ""))
    header: tuple[str, ...] = ("measure", "result", "target")
    if "baseline" in results:  # the older release, measured in the same run: a column of its own
        old = results["baseline"]
        header = ("measure", "result", f"{old['version']}, same run", "target")
        rows = [(label, result, _baseline_cell(old, label), target) for label, result, target in rows]
    return _rst_table(header, rows) + (
        f"\n\nFrom ``{source}``: {run['mode']} run of {run['date']} at commit "
        f"{run['commit']}, {run['cpus']} CPUs, Python {run['python']}; HTTP server: {run['http_server']['workers']} "
        f"workers of {threads} threads.")


COLD_ROWS = {  # the cold paths, measured in fresh processes with the 1 MB manifest (in the order the tables show them)
    "new_tenant_first_list": "a new tenant's ``initialize`` → first ``tools/list``, hosted, fresh process",
    # since 2026-12-07: as a host's first contact is, each request on a new connection, ``initialized`` too
    "hosted_first_list": "hosted, a new key: ``initialize`` → ``initialized`` → first ``tools/list``, each request on a "
                         "new connection, a fresh server at its defaults",
    "stdio_first_list": "stdio: spawn → ``initialize`` → first ``tools/list`` (the manifest saved by an earlier start)",
    "stdio_first_list_fresh": "stdio: spawn → ``initialize`` → first ``tools/list``, the manifest an earlier start saved "
                              "younger than its TTL (its saved list answers)",
    "stdio_first_list_aged": "stdio: the same, the saved manifest past its TTL (the gateway is asked about it first)",
    "stdio_first_list_unsaved": "stdio: the same at a first start (nothing saved)",
    "new_tenant_first_list_stub": "the new tenant's, on a gateway with the manifest ready (``stub_gateway.py``)",
    "hosted_first_list_stub": "hosted, the new key's, on a gateway with the manifest ready (``stub_gateway.py``)",
    "stdio_first_list_stub": "stdio, the manifest saved, on that gateway",
    "stdio_first_list_fresh_stub": "stdio, the saved manifest within its TTL, on that gateway",
    "stdio_first_list_aged_stub": "stdio, the saved manifest past its TTL, on that gateway",
    "stdio_first_list_unsaved_stub": "stdio at a first start, on that gateway",
}
COLD_TARGETS = {  # as set on 2026-12-07; every other cold row's is 0.8 × 0.3.4
    "stdio_first_list_fresh": "0.75 × 0.3.4", "stdio_first_list_unsaved": "1.0 × 0.3.4",
}


NEXT_ROWS = {  # after a new key's first list: the slowest of the key's next lists (another worker's first)
    "hosted_first_list": "the same key's next six ``tools/list``, each on a new connection: the slowest",
    "hosted_first_list_stub": "the same key's next six, on that gateway: the slowest",
}


def _cold_cell(figures: dict[str, Any]) -> str:
    return f"{figures['p50']:.0f} ms p50 ({spread(figures['runs_ms'], ' ms')})"


def _ratio(results: dict[str, Any], name: str) -> str:
    """The figure over the older release's, when both were measured in the run (trials side by side:
    the median of each trial's ratio to the one beside it)."""
    figures = results[name]
    if "ratio" not in figures:
        return ""
    return f"; {figures['ratio']:.2f} × 0.3.4 ({spread(figures['ratio_runs'])})"


def spread(runs: list[float], unit: str = "") -> str:
    return f"runs {min(runs):g}–{max(runs):g}{unit}" if len(runs) > 1 else "one run"


def _cpu(figures: dict[str, Any]) -> str:
    cpu = figures.get("server_cpu_ms_per_call")
    return "" if cpu is None else f"; server CPU {cpu:.2f} ms/call"


def _baseline_cell(old: dict[str, Any], label: str) -> str:
    """The older release's figure for the row ``label``, where it was measured."""
    cold = next((name for name, row in COLD_ROWS.items() if row == label), None)
    if cold is not None and cold in old:
        return _cold_cell(old[cold])
    after = next((name for name, row in NEXT_ROWS.items() if row == label), None)
    if after is not None and "next" in old.get(after, {}):
        return _cold_cell(old[after]["next"])
    if label.startswith("stdio start-up") and "stdio_startup_ms" in old:
        return f"{old['stdio_startup_ms']['p50']:.0f} ms p50"
    if label.startswith("added per warm ``tools/call``, HTTP") and "overhead_http" in old:
        return f"+{old['overhead_http']['added_p50_ms']:.2f} ms p50{_cpu(old['overhead_http'])}"
    if label.startswith("throughput") and "throughput_8_clients" in old:
        server = old["throughput_8_clients"]["server"]
        return f"{server['calls_per_s']:g} calls/s; server CPU {server['cpu_us_per_call']['server'] / 1000:.2f} ms/call"
    return ""


def _rst_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    rule = "  ".join("=" * w for w in widths)
    line = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    return "\n".join([rule, line(header), rule, *map(line, rows), rule])


if __name__ == "__main__":  # a module of bench.py, not a command: running it says what it is
    import argparse

    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).print_help()
