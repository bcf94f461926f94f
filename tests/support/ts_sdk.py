"""The official TypeScript SDK (@modelcontextprotocol/sdk), installed once from the npm registry into
.cache/ts-sdk (see npm.py), and tests' Node scripts run beside it; and its second major version's
client (@modelcontextprotocol/client), in .cache/ts-client, for what only it does (a scope step-up
while holding a refresh token)."""

import json
import shutil
import subprocess
from pathlib import Path

from . import npm

ROOT = Path(__file__).resolve().parents[2]
VERSION = "1.32.2"
HOME = npm.CACHE / "ts-sdk"
CLIENT_VERSION = "2.4.0"  # the first with SEP-2350's step-up past a refresh token (typescript-sdk#2356)
CLIENT_HOME = npm.CACHE / "ts-client"


def install() -> Path:
    return npm.install("ts-sdk", "@modelcontextprotocol/sdk", VERSION)


def install_client() -> Path:
    return npm.install("ts-client", "@modelcontextprotocol/client", CLIENT_VERSION)


def run(script: str, scenario: dict, timeout: float = 180, home: Path = HOME) -> list[dict]:
    """Run tests/``script`` with ``scenario`` (JSON) beside the SDK (``home``); its JSON lines (it must exit 0)."""
    shutil.copy(ROOT / "tests" / script, home / script)
    done = subprocess.run(["node", str(home / script), json.dumps(scenario)], capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
