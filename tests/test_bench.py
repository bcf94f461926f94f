"""The benchmark suite still works (a quick run; its figures are not asserted: they are the machine's)."""

import json
import subprocess
import sys
from pathlib import Path

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
    assert figures["tools_list_warm"]["tools"] > 300
