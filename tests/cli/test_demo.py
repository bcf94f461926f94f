"""``colabhive-mcp demo``: its calls are what the sandbox's tools take, and it ends with the next steps."""

import subprocess
import sys

from jsonschema import Draft202012Validator

import pytest

from colabhive_mcp.cli.demo import CALLS, KEYS_URL
from colabhive_mcp.sandbox.catalogue import default_actions

from ..support.environ import server_env

pytestmark = pytest.mark.slow


def test_every_demo_call_passes_what_its_tools_input_schema_asks():
    schemas = {action.entry["name"]: action.entry["inputSchema"] for action in default_actions()}
    for name, arguments, _ in CALLS:
        # no argument the schema does not name: the gateway ignores those silently
        strict = {**schemas[name], "additionalProperties": False}
        problems = [e.message for e in Draft202012Validator(strict).iter_errors(arguments)]
        assert not problems, (name, problems)


def test_the_demo_shows_a_session_then_the_next_steps():
    done = subprocess.run([sys.executable, "-m", "colabhive_mcp", "demo"], env=server_env(), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # the server it starts logs warnings only: no record breaks up what it shows
    assert '"target_language": "en"' in done.stdout and "upstream model crashed" in done.stdout
    next_steps = done.stdout[done.stdout.index("Next steps:"):]
    assert KEYS_URL in next_steps and f"{sys.executable} -m colabhive_mcp client-config claude-desktop" in next_steps
    assert "--sandbox" in next_steps


def test_ctrl_c_during_the_demo_is_one_line():
    import os
    import signal

    demo = subprocess.Popen([sys.executable, "-m", "colabhive_mcp", "demo"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})  # (each line as it is printed)
    while "> tools/call" not in demo.stdout.readline():  # the session is under way: a call is being made
        assert demo.poll() is None, "the demo ended before it made a call"
    os.killpg(demo.pid, signal.SIGINT)  # Ctrl-C in its terminal
    _, err = demo.communicate(timeout=60)
    assert demo.returncode == 130 and [line for line in err.splitlines() if line] == [
        "colabhive-mcp: stopped (Ctrl-C)"], err


def test_the_next_steps_name_the_command_as_this_shell_can_run_it():
    """After the README's install the command is in .venv/bin, not on PATH: the next step says so."""
    import os
    from pathlib import Path

    command = str(Path(sys.executable).parent / "colabhive-mcp")
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if p != str(Path(command).parent))
    shown = subprocess.run([command, "demo"], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "PATH": path})
    assert f"       {command} client-config claude-desktop" in shown.stdout, shown.stdout[-500:]
