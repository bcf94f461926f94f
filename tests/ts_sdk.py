"""The official TypeScript SDK (@modelcontextprotocol/sdk), installed once from the npm registry into
.cache/ts-sdk (under a lock: test workers running at once install it once), and tests' Node scripts
run beside it."""

import fcntl
import json
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HOME = ROOT / ".cache" / "ts-sdk"
VERSION = "1.32.2"


def install() -> Path:
    HOME.mkdir(parents=True, exist_ok=True)
    with open(HOME.parent / "ts-sdk.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        installed = HOME / "node_modules" / "@modelcontextprotocol" / "sdk" / "package.json"
        if not installed.exists() or json.loads(installed.read_text())["version"] != VERSION:
            (HOME / "package.json").write_text('{"private": true, "type": "module"}\n')
            subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--silent",
                            f"@modelcontextprotocol/sdk@{VERSION}"], cwd=HOME, check=True, timeout=600,
                           capture_output=True)
    return HOME


def run(script: str, scenario: dict, timeout: float = 180) -> list[dict]:
    """Run tests/``script`` with ``scenario`` (JSON) beside the SDK; its JSON lines (it must exit 0)."""
    shutil.copy(ROOT / "tests" / script, HOME / script)
    done = subprocess.run(["node", str(HOME / script), json.dumps(scenario)], capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
