"""A short soak (scripts/soak.py): many keys over a small tenant pool, both protocol eras, every kind
of call. Behaviour is asserted, never speed: no wrong answer, nothing left running, nothing leaked."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
KINDS = ("fast", "private", "list", "slow", "failing", "cancelled", "hangup")


def test_a_short_soak_leaks_nothing_and_mixes_no_tenants(tmp_path):
    out = tmp_path / "soak.json"
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "soak.py"), "--clients", "6", "--seconds", "10",
                             "--keys", "12", "--pool-size", "4", "--settle", "15", "--json", str(out)],
                            capture_output=True, text=True, timeout=110, cwd=ROOT)
    assert out.exists(), result.stdout[-2000:] + result.stderr[-3000:]
    report = json.loads(out.read_text())
    errors, threads, memory, gateway = report["errors"], report["threads"], report["memory_mb"], report["gateway"]
    assert errors["unexpected"] == 0, errors["samples"]
    assert errors["cross_tenant"] == 0, errors["samples"]
    assert all(report["calls"][kind]["calls"] > 0 for kind in KINDS), report["calls"]
    assert gateway["running"] == 0 and gateway["abandoned"] == 0, gateway["stray_samples"]
    assert gateway["cancelled"] >= report["calls"]["cancelled"]["calls"]  # every cancelled call stopped upstream
    assert threads["settled"] and threads["idle_after"] <= threads["idle_baseline"], threads  # no leaked thread
    assert report["workers_restarted"] == 0
    assert memory["growth"] < 30 and memory["idle_after"] - memory["after_warmup"] < 30, memory
    assert result.returncode == 0, result.stdout[-3000:]
