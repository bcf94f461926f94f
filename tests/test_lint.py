"""No unused imports, undefined names or other pyflakes findings in the package or the tests."""

import subprocess
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent


def test_pyflakes_finds_nothing():
    result = subprocess.run([sys.executable, "-m", "pyflakes", "colabhive_mcp", "tests", "scripts"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_test_module_imports_another():
    """What two test modules share lives in tests/support/ (a test module's helpers are its own)."""
    import re
    from pathlib import Path

    tests = Path(__file__).parent
    importing = [f"{path.relative_to(tests)}: {line.strip()}" for path in tests.rglob("*.py")
                 for line in path.read_text().splitlines()
                 if re.search(r"^\s*(from\s+(\.+|tests\.)(\w+\.)*test_\w+\s+import|import\s+(tests\.)?test_\w+)", line)]
    assert importing == []


def test_the_package_imports_run_down_its_layers():
    """Each wing imports only the leaves, itself and lower layers; no circle, type-only imports included."""
    from .support import layers

    edges = layers.graph()
    assert "colabhive_mcp.calls.call" in edges["colabhive_mcp.tenants.tenant"]  # it reads the imports
    assert "colabhive_mcp.manifest.saved" in edges["colabhive_mcp.manifest.cache"]  # type-only ones too
    assert layers.why_not("calls", "tenants") == "a higher layer"
    assert layers.why_not("oauth", "protocol") == "a wing of the same layer"
    assert layers.why_not("protocol", "gateway") and layers.why_not("sandbox", "leaves")
    assert layers.breaks(edges) == []
    assert layers.circles(edges) == []
