"""The MCP Inspector's command line against the stdio server on a hostile manifest."""

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from colabhive_mcp.sandbox import DEMO_KEY

from ..support.hostile_manifest import HOSTILE
from ..support.environ import server_env

pytestmark = pytest.mark.real_clients

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "inspector.sh"


def inspector(sandbox, *args, era="legacy"):
    """Run the Inspector CLI against our stdio server (it passes the server only the -e variables)."""
    server = [sys.executable, "-m", "colabhive_mcp", "stdio", "--api-url", sandbox.url]
    return subprocess.run(["bash", str(SCRIPT), "--format", "json", "-q", "--protocol-era", era,
                           "-e", f"COLABHIVE_API_KEY={DEMO_KEY}", *args, *server],
                          env=server_env(), capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("era", ["legacy", "auto"])
def test_every_tool_is_portable_and_callable(hostile, era):
    listed = inspector(hostile, "--method", "tools/list", "--strict", era=era)
    assert listed.returncode == 0, listed.stdout[-2000:] + listed.stderr[-2000:]
    tools = {t["_meta"]["com.colabhive/slug"]: t["name"] for t in json.loads(listed.stdout)["result"]["tools"]
             if "_meta" in t}
    def call(slug, arguments):
        return slug, inspector(hostile, "--method", "tools/call", "--tool-name", tools[slug],
                               "--tool-args-json", json.dumps(arguments), era=era)

    with ThreadPoolExecutor(3) as runs:  # each run is an Inspector and a server of its own
        for slug, called in runs.map(lambda case: call(case[0], case[2]), HOSTILE[:7]):
            assert called.returncode == 0, (slug, called.stdout[-1000:], called.stderr[-1000:])
    failing = inspector(hostile, "--method", "tools/call", "--tool-name", "flaky-translate",
                        "--tool-args-json", '{"text": "x"}', era=era)
    assert failing.returncode == 5  # an isError result


def test_the_readme_line_works_from_a_shell_without_the_virtualenv_active():
    """The README's example as a newcomer types it, with the project's .venv not on PATH: the script
    runs the server from the project's virtualenv (before, `python` was the system's, and the
    Inspector said only "Connection closed")."""
    import os
    import sys

    venv = Path(sys.executable).parent
    if venv != SCRIPT.parent.parent / ".venv" / "bin":
        pytest.skip("the tests run from another virtualenv than the project's .venv (CI's is .venv)")
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if Path(p) != venv)
    done = subprocess.run(["bash", str(SCRIPT), "--format", "json", "-q", "--method", "tools/list", "python", "-m",
                           "colabhive_mcp", "stdio", "--sandbox"], capture_output=True, text=True, timeout=180,
                          env={**{k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}, "PATH": path})
    assert done.returncode == 0, done.stderr[-1000:]
    assert "echo" in {tool["name"] for tool in json.loads(done.stdout)["result"]["tools"]}
