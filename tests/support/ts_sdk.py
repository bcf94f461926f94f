"""The official TypeScript SDK (@modelcontextprotocol/sdk), installed once from the npm registry into
.cache/ts-sdk (see npm.py), and tests' Node scripts run beside it."""

import json
import shutil
import subprocess
from pathlib import Path

from . import npm

ROOT = Path(__file__).resolve().parents[2]
VERSION = "1.32.2"
HOME = npm.CACHE / "ts-sdk"


def install() -> Path:
    return npm.install("ts-sdk", "@modelcontextprotocol/sdk", VERSION)


def run(script: str, scenario: dict, timeout: float = 180) -> list[dict]:
    """Run tests/``script`` with ``scenario`` (JSON) beside the SDK; its JSON lines (it must exit 0)."""
    shutil.copy(ROOT / "tests" / script, HOME / script)
    done = subprocess.run(["node", str(HOME / script), json.dumps(scenario)], capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
