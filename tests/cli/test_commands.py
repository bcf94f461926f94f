"""check, tools and call in this process, against the sandbox: what each says and the code it exits
with (tests/cli/test_cli.py runs them as the command a person types)."""

import dataclasses
import io
import json

from colabhive_mcp import __version__
from colabhive_mcp.cli import commands
from colabhive_mcp.cli.arguments import KEY_REJECTED, NO_TOOLS, OK


def said(run, *args):
    out = io.StringIO()
    return run(*args, out=out), out.getvalue()


def test_check_walks_each_step_and_names_the_one_that_fails(config):
    code, text = said(commands.check, config)
    steps = [line.split()[0] for line in text.splitlines()]
    assert code == OK and steps == ["gateway", "key", "manifest", "tools", "budget"] and config.api_key not in text
    code, text = said(commands.check, dataclasses.replace(config, api_key="hive_wrong_key_000"))
    assert code == KEY_REJECTED and text.splitlines()[-1].startswith("key")
    code, text = said(commands.check, dataclasses.replace(config, deny=("crm-*",)))
    assert code == OK and "  hidden   crm-create-contact" in text
    code, _ = said(commands.check, dataclasses.replace(config, deny=("*",)))
    assert code == NO_TOOLS


def test_tools_lists_what_an_agent_sees_with_headings_or_as_json(config):
    code, table = said(commands.tools, config, "cursor-vscode", False)
    lines = table.splitlines()
    assert code == OK and lines[0].split()[:3] == ["NAME", "SPEED", "SIDE"] and lines[-1].endswith(" tools")
    assert any(line.startswith("crm-create-contact") and "writes" in line for line in lines)
    code, listed = said(commands.tools, config, "claude-code", True)
    assert code == OK and "echo" in {tool["name"] for tool in json.loads(listed)}


def test_call_runs_a_tool_and_prints_its_result(config, tmp_path):
    code, text = said(commands.call, config, "echo", {"text": "in process"}, "claude-code", tmp_path)
    assert code == OK and "in process" in text
    code, _ = said(commands.call, config, "no-such-tool", {}, "claude-code", tmp_path)
    assert code == NO_TOOLS


def test_the_module_runs_as_the_command(monkeypatch, capsys):
    """``python -m colabhive_mcp`` is the command line."""
    import runpy

    import pytest

    monkeypatch.setattr("sys.argv", ["colabhive_mcp", "--version"])
    with pytest.raises(SystemExit) as ended:
        runpy.run_module("colabhive_mcp", run_name="__main__", alter_sys=False)
    assert ended.value.code in (0, None) and __version__ in capsys.readouterr().out
