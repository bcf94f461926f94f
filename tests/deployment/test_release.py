"""A release: a wheel and an sdist built from a clean clone install into a fresh virtualenv and serve.

The package index already holds colabhive-mcp 0.3.4 (the package this project replaces), so this
project's releases start at 1.0.0 and the README pins them.
"""

import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from colabhive_mcp import __version__
from colabhive_mcp.cli.demo import StdioPeer

from ..support.environ import server_env

pytestmark = pytest.mark.release

ROOT = Path(__file__).resolve().parents[2]


def run(*argv, timeout=600, **kwargs):
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=True, **kwargs)


def test_a_clean_clone_builds_a_release_that_installs_and_serves(tmp_path):
    assert tuple(int(part) for part in __version__.split(".")[:2]) >= (1, 0)  # supersedes 0.3.4
    clone, dist = tmp_path / "clone", tmp_path / "dist"
    run("git", "clone", "-q", str(ROOT), str(clone))
    run(sys.executable, "-m", "build", "--outdir", str(dist), str(clone))  # the sdist, then a wheel from it
    (wheel,) = dist.glob("*.whl")
    (sdist,) = dist.glob("*.tar.gz")
    assert wheel.name == f"colabhive_mcp-{__version__}-py3-none-any.whl" and sdist.name.endswith(f"-{__version__}.tar.gz")
    assert "PASSED" in run(sys.executable, "-m", "twine", "check", "--strict", str(wheel), str(sdist)).stdout
    packaged = set(zipfile.ZipFile(wheel).namelist())
    for module in ("colabhive_mcp/sandbox/app.py", "colabhive_mcp/sandbox/catalogue.py", "colabhive_mcp/cli/demo.py",
                   "colabhive_mcp/transports/http/app.py", "colabhive_mcp/protocol/server.py"):
        assert module in packaged

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    run(str(env_dir / "bin" / "pip"), "install", "-q", str(wheel))
    command = str(env_dir / "bin" / "colabhive-mcp")
    assert run(command, "--version").stdout.strip() == f"colabhive-mcp {__version__}"
    peer = StdioPeer([command, "--sandbox", "--log-level", "warning"], env=server_env())
    try:
        info = peer.initialize()["result"]["serverInfo"]
        assert info["version"] == __version__
        assert "hive-chat" in {t["name"] for t in peer.request("tools/list")["result"]["tools"]}
        answer = peer.request("tools/call", {"name": "echo", "arguments": {"text": "from the wheel"}})
        assert answer["result"]["content"] == [{"type": "text", "text": "from the wheel"}]
    finally:
        assert peer.close() == 0
    assert peer.unparsable == []
