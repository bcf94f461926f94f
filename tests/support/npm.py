"""npm packages the tests drive, each installed once from the npm registry at a pinned version into
.cache/NAME (under a lock beside it: test workers running at once install it once)."""

import fcntl
import json
import subprocess
from pathlib import Path

CACHE = Path(__file__).resolve().parents[2] / ".cache"


def install(name: str, package: str, version: str) -> Path:
    """``package`` at ``version`` in .cache/``name`` (installed now unless it is there already): that directory."""
    home = CACHE / name
    home.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        installed = home / "node_modules" / package / "package.json"
        if not installed.exists() or json.loads(installed.read_text())["version"] != version:
            (home / "package.json").write_text('{"private": true, "type": "module"}\n')
            subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--silent", f"{package}@{version}"], cwd=home,
                           check=True, timeout=600, capture_output=True)
    return home
