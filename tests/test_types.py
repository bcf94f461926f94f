"""The type checker passes on the package, at the strictness setup.cfg's [mypy] section states."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_mypy_finds_nothing_in_the_package(tmp_path):
    checked = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "setup.cfg"),
                              "--cache-dir", str(tmp_path / "mypy-cache")],
                             cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert checked.returncode == 0, checked.stdout[-4000:] + checked.stderr[-2000:]
    assert "Success: no issues found" in checked.stdout
