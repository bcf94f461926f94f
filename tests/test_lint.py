"""No unused imports, undefined names or other pyflakes findings in the package or the tests."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_pyflakes_finds_nothing():
    result = subprocess.run([sys.executable, "-m", "pyflakes", "colabhive_mcp", "tests", "scripts"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
