"""The benchmark suite still works (a quick run; its figures are not asserted: they are the machine's)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent


def test_the_benchmarks_run(tmp_path):
    out = tmp_path / "bench.json"
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench.py"), "--quick", "--json", str(out)],
                            capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert figures["cold_tools_list_100_threads"]["manifest_gets"] == 1  # behaviour, not speed
    assert figures["long_polls"]["succeeded"] == figures["long_polls"]["calls"]
    assert figures["throughput_8_clients"]["server"]["errors"] == 0
    assert figures["floor"]["throughput_8_clients"]["server"]["errors"] == 0  # the stack's floor answers too
    assert figures["tools_list_warm"]["tools"] > 300
    tools = figures["stdio_first_list_unsaved"]["tools"]
    assert figures["hosted_first_list"]["tools"] > 300 and tools > 300
    assert figures["hosted_first_list"]["next"]["p50"] > 0  # the key's next lists (the other worker's first)
    assert figures["stdio_first_list_fresh"]["tools"] == figures["stdio_first_list_aged"]["tools"] == tools
    for name in ("hosted_first_list", "stdio_first_list_fresh", "stdio_first_list_aged", "stdio_first_list_unsaved"):
        assert figures[name + "_stub"]["tools"] == tools  # the stub's manifest is the sandbox's for the demo key
    churn = figures["churn"]
    assert len(churn["batches"]) == churn["laps"] * churn["keys"] // churn["batch"]
    assert churn["store_mb"]["last"] - churn["store_mb"]["first"] < 5  # the 1 MB manifest is stored once, not per key
    assert figures["distinct_manifests"]["after"] == [2, 4, 6, 8, 10]


def test_the_side_by_side_comparison_runs_each_server_on_its_own_copy_of_the_package(tmp_path):
    (tmp_path / "colabhive_mcp").mkdir()  # not a package a server can run: B must fail to start, not use the checkout
    broken = subprocess.run([sys.executable, str(ROOT / "scripts" / "compare.py"), "--b", str(tmp_path), "--rounds", "1",
                             "--seconds", "0.3"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert broken.returncode != 0
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "compare.py"), "--rounds", "2", "--seconds", "0.3",
                             "--b-env", "COLABHIVE_LOG_LEVEL=warning"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "B - A:" in result.stdout and "of 2 rounds" in result.stdout


@pytest.mark.parametrize("results", ["bench.json", "cold.json", "rich.json"])
def test_the_performance_page_tables_are_rendered_from_the_committed_results(results):
    """Every figure in the tables of docs/performance.rst comes from a committed results file: the whole
    table from scripts/results/bench.json, the cold paths on both gateways from cold.json, and on a manifest
    shaped like real ones, as deployed, from rich.json, which the README's table is too (no hand-typed number)."""
    path = f"scripts/results/{results}"
    table = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench.py"), "--table", path],
                           capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert table.returncode == 0, table.stderr
    assert json.loads((ROOT / path).read_text())["run"]["mode"] == "full"
    assert table.stdout.strip() in (ROOT / "docs" / "performance.rst").read_text()
    if results == "rich.json":
        assert table.stdout.strip() in (ROOT / "README.rst").read_text()


def test_the_bench_sandbox_also_answers_the_older_release_invoke_route():
    """``--baseline``: 0.3.4 invokes at /internal/mcp/actions/{slug}:invoke; the sandbox serves it as the contract's route."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from baseline import sandbox_app
    from werkzeug.test import Client

    from colabhive_mcp.sandbox import API_PREFIX, DEMO_KEY

    client = Client(sandbox_app())
    answers = [client.post(API_PREFIX + route, json={"input": {"text": "hi"}, "sync": True},
                           headers={"X-API-Key": DEMO_KEY}) for route in ("/internal/mcp/actions/echo:invoke",
                                                                          "/actions/echo:invoke")]
    assert [a.status_code for a in answers] == [200, 200]
    assert answers[0].json["result"] == answers[1].json["result"] and answers[0].json["status"] == "succeeded"


def test_a_cold_paths_ratio_is_the_median_of_each_trial_over_the_older_releases_beside_it():
    """``--baseline``: the trials alternate, ours then 0.3.4's, and each of ours is judged against the one
    beside it (what else the machine does moves both), not median against median."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from bench import cold_runs

    seconds = iter([1.0, 2.0, 3.0, 2.0, 1.0, 4.0, 0.2, 0.1])  # ours, theirs, ours, theirs...
    asked = []

    def trial(sandbox, baseline=None):
        asked.append(baseline)
        return {"s": next(seconds), "tools": 7}

    ours, theirs = cold_runs(trial, None, 4, "/old/python")
    assert asked == [None, "/old/python"] * 4
    assert ours["ratio_runs"] == [0.5, 1.5, 0.25, 2.0] and ours["ratio"] == 1.0  # median of the four
    assert ours["runs_ms"] == [1000.0, 3000.0, 1000.0, 200.0] and theirs["runs_ms"] == [2000.0, 2000.0, 4000.0, 100.0]
