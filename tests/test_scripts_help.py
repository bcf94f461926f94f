"""Every script in scripts/ answers --help with its usage, exit status 0, and changes nothing: each
runs from a copy of the checkout's scripts/, conf/ and tests/ (which scripts import), which must be
left exactly as they were."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = sorted(p.name for p in (ROOT / "scripts").iterdir() if p.suffix in (".py", ".sh"))


def snapshot(root: Path) -> dict[str, tuple[int, bytes]]:
    return {str(p.relative_to(root)): (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(root.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts}


def test_every_script_is_covered():
    assert {"bench.py", "example_config.py", "floor_app.py", "conformance.sh", "inspector.sh"} <= set(SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_prints_usage_and_changes_nothing(script, tmp_path):
    for part in ("scripts", "conf", "tests"):
        shutil.copytree(ROOT / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "home").mkdir()
    before = snapshot(tmp_path)
    path = tmp_path / "scripts" / script
    argv = ["bash", str(path)] if script.endswith(".sh") else [sys.executable, str(path)]
    env = {**os.environ, "HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": os.devnull,
           "PYTHONDONTWRITEBYTECODE": "1", "PATH": os.environ.get("PATH", "")}
    done = subprocess.run([*argv, "--help"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "usage" in done.stdout.lower(), done.stdout + done.stderr
    assert snapshot(tmp_path) == before
