"""The command line: resolved configuration, the standalone sandbox, flags without a subcommand,
mistakes said in one line with the exit code the same in every command, help that fits each command."""

import json
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from colabhive_mcp.cli import main
from colabhive_mcp.cli.main import _check_free
from colabhive_mcp.sandbox import DEMO_KEY
from colabhive_mcp.settings.config import ConfigError

from ..support.environ import server_env
from ..support.http_server import SECRET, HttpServer

pytestmark = pytest.mark.slow

MISSING = "key missing: set COLABHIVE_API_KEY (or try --sandbox)"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_config_prints_each_value_and_its_source_with_the_key_redacted(capsys, monkeypatch):
    monkeypatch.setenv("COLABHIVE_API_KEY", "hive_cli_secret_value_123")
    monkeypatch.setenv("COLABHIVE_MANIFEST_TTL", "90")
    assert main(["config", "--deny", "crm-*"]) == 0
    out = capsys.readouterr().out
    assert "hive_cli_secret_value_123" not in out
    lines = {line.split()[0]: line for line in out.splitlines()}
    assert "[environment COLABHIVE_API_KEY]" in lines["api_key"] and "sha256" in lines["api_key"]
    assert "90.0" in lines["manifest_ttl"] and "[environment COLABHIVE_MANIFEST_TTL]" in lines["manifest_ttl"]
    assert "crm-*" in lines["deny"] and "[flag --deny]" in lines["deny"]
    assert "[default]" in lines["poll_max_wait"]


def test_a_bad_value_exits_2_with_the_reason(capsys):
    assert main(["config", "--min-stability", "solid"]) == 2
    assert "min_stability = 'solid' from flag --min-stability: must be one of" in capsys.readouterr().err


def test_the_standalone_sandbox_serves_the_contract():
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "colabhive_mcp", "sandbox", "--port", str(port)],
                               env=server_env(), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}/api/builder/v1/mcp/manifest"
        deadline = time.monotonic() + 20
        while True:
            try:
                response = requests.get(url, headers={"X-API-Key": DEMO_KEY}, timeout=2)
                break
            except requests.ConnectionError:
                assert time.monotonic() < deadline, "the sandbox did not start"
                time.sleep(0.1)
        assert response.status_code == 200 and response.json()["tools"]
        assert requests.get(url, timeout=2).status_code == 401
    finally:
        process.terminate()
        process.wait(10)
    assert f"127.0.0.1:{port}".encode() in process.stderr.read()


def cli(*args, sandbox=None, key=DEMO_KEY, cwd=None):
    argv = [sys.executable, "-m", "colabhive_mcp", *args]
    if args[0] != "client-config":
        argv += ["--log-level", "error"]
    if sandbox is not None:
        argv += ["--api-url", sandbox.url]
    env = server_env(**({"COLABHIVE_API_KEY": key} if key else {}))
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, cwd=cwd)


def test_check_says_what_is_wrong_with_its_exit_code(sandbox):
    ok = cli("check", sandbox=sandbox, key=DEMO_KEY)
    assert ok.returncode == 0 and "shown" in ok.stdout
    hidden = cli("check", "--deny", "crm-*", sandbox=sandbox)
    assert hidden.returncode == 0 and "crm-create-contact: matched by the deny pattern 'crm-*'" in hidden.stdout
    assert cli("check", "--deny", "*", sandbox=sandbox).returncode == 6
    assert cli("check", sandbox=sandbox, key="hive_wrong_key_000").returncode == 5
    assert cli("check", sandbox=sandbox, key=None).returncode == 3
    unreachable = cli("check", "--api-url", f"http://127.0.0.1:{free_port()}", "--retries", "0")
    assert unreachable.returncode == 4 and "FAILED" in unreachable.stdout


def test_check_shows_the_budget_in_force(sandbox):
    none = cli("check", sandbox=sandbox)
    assert "budget     none: billable calls are not counted" in none.stdout
    budgeted = cli("check", "--billable-calls-per-hour", "50", "--billable-calls-per-day", "500", "--spend-guard",
                   "refuse", "--billable-weights", "image-*=5", "--billable-tools", "web-*", sandbox=sandbox)
    assert budgeted.returncode == 0
    assert "billable calls per key: 50 per hour and 500 per day; past it, calls are refused" in budgeted.stdout
    assert ("billable   5 tools: cold-summarizer, hive-chat, image-gen-tiny (counts as 5), text-embed-small, "
            "web-scrape") in budgeted.stdout


def test_call_counts_against_the_budget_its_stdio_servers_count(sandbox, journal, tmp_path):
    """What ``call`` spends is counted where the key's stdio servers count it: its next run sees it."""
    budget = ("--billable-calls-per-day", "1", "--spend-guard", "refuse", "--out", str(tmp_path))
    first = cli("call", "image-gen-tiny", "--args", '{"prompt": "bee", "size": 16}', *budget, sandbox=sandbox)
    second = cli("call", "image-gen-tiny", "--args", '{"prompt": "bee", "size": 16}', *budget, sandbox=sandbox)
    assert first.returncode == 0 and second.returncode != 0
    assert "daily budget of 1 billable ColabHive calls is used" in second.stdout + second.stderr
    assert len(journal("invoke")) == 1


def test_tools_shows_what_an_agent_sees(sandbox):
    listed = cli("tools", "--json", sandbox=sandbox)
    names = [t["name"] for t in json.loads(listed.stdout)]
    assert listed.returncode == 0 and "hive-chat" in names and names == sorted(names)
    table = cli("tools", "--client", "cursor-vscode", sandbox=sandbox)
    assert "crm-create-contact" in table.stdout and "writes" in table.stdout and table.stdout.strip().endswith("tools")


def test_call_runs_a_tool_and_saves_media(sandbox, tmp_path):
    echo = cli("call", "echo", "--args", '{"text": "from the cli"}', sandbox=sandbox)
    assert echo.returncode == 0 and echo.stdout.strip() == "from the cli"
    image = cli("call", "image-gen-tiny", "--args", '{"prompt": "bee", "size": 16}', "--out", str(tmp_path),
                sandbox=sandbox)
    saved = tmp_path / "image-gen-tiny-0.png"
    assert image.returncode == 0 and saved.read_bytes().startswith(b"\x89PNG")
    slow = cli("call", "batch-report", "--args", '{"seconds": 2}', sandbox=sandbox)
    assert "report ready" in slow.stdout and slow.stderr == ""  # (stderr is a pipe: no progress line)
    assert "step" in on_a_terminal("call", "batch-report", "--args", '{"seconds": 2}', sandbox=sandbox)
    assert cli("call", "flaky-translate", "--args", '{"text": "x"}', sandbox=sandbox).returncode == 1
    assert cli("call", "echo", "--args", "[1]", sandbox=sandbox).returncode == 2


def on_a_terminal(*args, sandbox):
    """What a command writes to stderr when stderr is a terminal (a pseudo-terminal here)."""
    import os
    import pty

    reader, writer = pty.openpty()
    argv = [sys.executable, "-m", "colabhive_mcp", *args, "--log-level", "error", "--api-url", sandbox.url]
    process = subprocess.Popen(argv, env=server_env(COLABHIVE_API_KEY=DEMO_KEY), stdout=subprocess.DEVNULL,
                               stderr=writer, stdin=subprocess.DEVNULL)
    os.close(writer)
    seen = b""
    while True:
        try:
            chunk = os.read(reader, 4096)
        except OSError:  # the terminal's other end is closed: the command is done
            break
        if not chunk:
            break
        seen += chunk
    os.close(reader)
    process.wait(60)
    return seen.decode(errors="replace")


def test_call_follows_the_continuations_past_the_hosts_deadline_to_the_result(sandbox):
    slow = cli("call", "batch-report", "--args", '{"seconds": 4}', "--host-deadline", "2", sandbox=sandbox)
    assert slow.returncode == 0 and slow.stdout.strip().startswith("report ready"), slow.stdout + slow.stderr
    assert len([e for e in sandbox.journal_entries() if e["route"] == "invoke"]) == 1


def outcome(capsys, *argv):
    """main's exit status, stdout and stderr, for a command line that stops before serving anything."""
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_a_flag_and_its_0_3_4_spelling_that_disagree_stop_the_start(capsys):
    code, out, err = outcome(capsys, "config", "--poll-interval", "3", "--poll-max-interval", "2")
    assert (code, out) == (2, "") and err == ("colabhive-mcp: invalid configuration: poll_max_interval: flag "
                                              "--poll-interval and flag --poll-max-interval disagree; keep one\n")
    code, _, err = outcome(capsys, "config", "--no-etag", "--manifest-etag")
    assert code == 2 and "flag --etag and flag --manifest-etag disagree" in err
    code, out, _ = outcome(capsys, "config", "--poll-interval", "2", "--poll-max-interval", "2.0", "--deny", "a",
                           "--deny", "b")  # the same value; one spelling twice (the last wins)
    rows = {line.split()[0]: line.split()[1] for line in out.splitlines()}
    assert code == 0 and rows["poll_max_interval"] == "2.0" and rows["deny"] == "b"


def test_a_mistyped_command_is_answered_with_the_closest_and_the_list(capsys):
    for argv in (["chek"], ["--log-level", "error", "chek"]):
        code, out, err = outcome(capsys, *argv)
        assert (code, out) == (2, "") and len(err.splitlines()) == 1
        assert "unknown command 'chek'; did you mean check?" in err and "stdio, serve, check, tools, call" in err
    code, _, err = outcome(capsys, "frobnicate")
    assert code == 2 and "did you mean" not in err and "client-config, config, sandbox, demo" in err


def test_settings_flags_may_come_before_the_command(capsys, sandbox):
    code, out, _ = outcome(capsys, "--deny", "tools", "config")  # a flag's value is not a command
    assert code == 0 and re.search(r"^deny +tools +\[flag --deny\]$", out, re.M)
    listed = subprocess.run([sys.executable, "-m", "colabhive_mcp", "--sandbox", "--log-level", "error", "tools"],
                            env=server_env(), capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0 and "echo" in listed.stdout, listed.stderr


def normalized(text):
    return " ".join(text.split())


def test_each_command_shows_only_its_own_settings_with_their_defaults(capsys):
    helps = {}
    for command in ("stdio", "serve", "check", "tools", "call", "config", "client-config"):
        code, helps[command], _ = outcome(capsys, command, "--help")
        assert code == 0
    has = {command: set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", text)) for command, text in helps.items()}
    http = {"--http-workers", "--bind", "--session-secret", "--allowed-origins", "--cors-origins", "--runtime-dir"}
    assert http <= has["serve"] and not http & (has["stdio"] | has["check"] | has["tools"] | has["call"])
    assert "--workers" in has["stdio"] and "--workers" not in has["serve"] | has["check"]
    assert http | {"--workers", "--deny"} <= has["config"]
    assert "not queued) (default: 64) [$COLABHIVE_WORKERS]" in normalized(helps["stdio"])
    assert "gunicorn worker processes (default: 2)" in normalized(helps["serve"])
    assert "NAME the tool's name, as `colabhive-mcp tools` lists it" in normalized(helps["call"])
    assert "CLIENT the MCP client: claude-desktop" in normalized(helps["client-config"])
    assert "exit codes:" in helps["check"] and "3 no API key" in normalized(helps["call"])
    code, _, err = outcome(capsys, "stdio", "--http-workers", "4")
    assert code == 2 and err == ("colabhive-mcp: --http-workers is a setting of `colabhive-mcp serve`; leave it out "
                                 "of `colabhive-mcp stdio`\n")


def run(*argv, **env):
    return subprocess.run([sys.executable, "-m", "colabhive_mcp", *argv], env=server_env(**env), capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("command", [["check"], ["tools"], ["call", "echo", "--args", '{"text": "x"}']],
                         ids=["check", "tools", "call"])
def test_check_tools_and_call_log_only_warnings_unless_a_level_is_asked_for(sandbox, command):
    quiet = run(*command, "--api-url", sandbox.url, COLABHIVE_API_KEY=DEMO_KEY)
    assert quiet.returncode == 0 and '"level": "info"' not in quiet.stderr, quiet.stderr  # (call's progress: there)
    asked = run(*command, "--api-url", sandbox.url, COLABHIVE_API_KEY=DEMO_KEY, COLABHIVE_LOG_LEVEL="info")
    assert asked.returncode == 0 and '"event": "manifest.fetched"' in asked.stderr


@pytest.mark.parametrize("command", [["check"], ["tools"], ["call", "echo", "--args", '{"text": "x"}']],
                         ids=["check", "tools", "call"])
def test_check_tools_and_call_say_the_same_thing_with_the_same_exit_code(sandbox, command):
    """No key 3, unreachable 4, key rejected 5, every action hidden 6 (check's codes), in each."""
    def said(result):
        return result.stdout if command == ["check"] else result.stderr

    missing = cli(*command, sandbox=sandbox, key=None)
    assert missing.returncode == 3
    assert (f"key        {MISSING[4:]}" in missing.stdout if command == ["check"] else
            missing.stderr == f"colabhive-mcp: {MISSING}\n")
    unreachable = cli(*command, "--api-url", f"http://127.0.0.1:{free_port()}", "--retries", "0")
    assert unreachable.returncode == 4 and "manifest" in said(unreachable) and "cannot reach" in said(unreachable)
    rejected = cli(*command, sandbox=sandbox, key="hive_wrong_key_000")
    assert rejected.returncode == 5 and "key" in said(rejected) and "REJECTED" in said(rejected)
    assert cli(*command, "--deny", "*", sandbox=sandbox).returncode == 6


def test_call_refuses_a_tool_that_is_unknown_or_hidden_before_calling_it(sandbox, journal):
    unknown = cli("call", "nope", sandbox=sandbox)
    assert unknown.returncode == 6 and unknown.stderr == (
        "colabhive-mcp: tool 'nope' UNKNOWN: `colabhive-mcp tools` lists the tools\n")
    hidden = cli("call", "crm-create-contact", "--deny", "crm-*", sandbox=sandbox)
    assert hidden.returncode == 6 and "HIDDEN: matched by the deny pattern 'crm-*'" in hidden.stderr
    assert not journal("invoke")


def test_call_refuses_an_out_directory_that_is_not_there_before_calling(sandbox, journal, tmp_path):
    missing = tmp_path / "missing"
    result = cli("call", "image-gen-tiny", "--args", '{"prompt": "bee", "size": 16}', "--out", str(missing),
                 sandbox=sandbox)
    assert result.returncode == 2 and result.stderr == (
        f"colabhive-mcp: --out {missing} is not a directory: make it first (nothing was called)\n")
    assert not journal("invoke") and not missing.exists()


@pytest.mark.parametrize("key", ["sk-live-0123456789", "hive_x"])  # (a key with a space: its own sentence)
def test_a_key_of_another_shape_gets_a_warning_not_a_refusal(sandbox, key):
    for result in (cli("check", sandbox=sandbox, key=key), run("stdio", "--api-url", sandbox.url, "--log-level",
                                                               "error", COLABHIVE_API_KEY=key)):
        warning = [line for line in result.stderr.splitlines() if "warning" in line]
        assert warning == ["colabhive-mcp: warning: the API key from environment COLABHIVE_API_KEY does not look "
                           "like a ColabHive key (hive_ then letters and digits); if the gateway rejects it, check "
                           "it"], result.stderr
    checked = cli("check", sandbox=sandbox, key=key)
    assert checked.returncode == 5 and "REJECTED" in checked.stdout  # the gateway was asked all the same
    assert "warning" not in cli("check", sandbox=sandbox, key=DEMO_KEY).stderr


@pytest.mark.parametrize("sandbox", [(), ("--sandbox",)], ids=["gateway", "sandbox"])
def test_serve_refuses_an_address_in_use_in_one_line_before_gunicorn_starts(sandbox):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run("serve", *sandbox, "--bind", f"127.0.0.1:{port}", COLABHIVE_SESSION_SECRET=SECRET)
    assert result.returncode == 2
    assert result.stderr == f"colabhive-mcp: 127.0.0.1:{port} is in use; pass --bind 127.0.0.1:PORT\n"


def ipv6_loopback():
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.parametrize("family,host,shown", [
    (socket.AF_INET, "localhost", "localhost"),
    pytest.param(socket.AF_INET6, "::1", "[::1]", marks=pytest.mark.skipif(not ipv6_loopback(), reason="no IPv6")),
])
def test_the_address_check_binds_as_gunicorn_does(family, host, shown):
    with socket.socket(family) as taken:
        taken.bind(("::1" if family == socket.AF_INET6 else "127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=re.escape(f"{shown}:{port} is in use; pass --bind {shown}:PORT")):
            _check_free(f"{shown}:{port}")
    _check_free(f"{shown}:{port}")  # free again: the check let it go
    _check_free(f"{shown}:{port}")
    with pytest.raises(ConfigError, match="cannot listen on no-such-host.invalid:1: "):
        _check_free("no-such-host.invalid:1")


GUNICORN = [sys.executable, "-m", "gunicorn", "-c", str(Path(__file__).resolve().parents[2] / "conf" / "gunicorn.conf.py"),
            "colabhive_mcp.transports.http:create_app()"]


@pytest.mark.parametrize("env,says", [
    ({"COLABHIVE_MANIFEST_TTL": "soon", "COLABHIVE_SESSION_SECRET": SECRET},
     "invalid configuration: manifest_ttl = 'soon' from environment COLABHIVE_MANIFEST_TTL: expected a number"),
    ({}, "hosted mode signs session ids, task ids and confirmations with session_secret: set COLABHIVE_SESSION_SECRET"),
    ({"COLABHIVE_MANIFEST_SNAPSHOT": "tools.json", "COLABHIVE_SESSION_SECRET": SECRET},
     "manifest_snapshot serves one file's tools without asking the gateway, so hosted mode could not tell"),
], ids=["bad value", "no session secret", "a snapshot would admit any key"])
@pytest.mark.parametrize("how", ["serve", "plain gunicorn"])
def test_a_configuration_error_is_one_line_before_any_worker_starts(env, says, how):
    argv = GUNICORN + ["--bind", f"127.0.0.1:{free_port()}"] if how == "plain gunicorn" else [
        sys.executable, "-m", "colabhive_mcp", "serve", "--bind", f"127.0.0.1:{free_port()}"]
    result = subprocess.run(argv, env=server_env(**env), capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.startswith(f"colabhive-mcp: {says}")


MISTYPED = {"COLABHIVE_DENY_SIDE_EFFECT": ("writes", "COLABHIVE_DENY_SIDE_EFFECTS"),
            "COLABHIVE_READONLY": ("true", "COLABHIVE_READ_ONLY"),
            "COLABHIVE_APIKEY": (DEMO_KEY, "COLABHIVE_API_KEY"),
            "colabhive_session_secret": (SECRET, "COLABHIVE_SESSION_SECRET")}


@pytest.mark.parametrize("typo", list(MISTYPED))
@pytest.mark.parametrize("how", ["stdio", "serve", "plain gunicorn"])
def test_a_mistyped_environment_variable_stops_the_start_naming_the_setting(typo, how):
    """The issue's case: a singular COLABHIVE_DENY_SIDE_EFFECT left a write tool exposed without a word."""
    value, meant = MISTYPED[typo]
    argv = {"stdio": [sys.executable, "-m", "colabhive_mcp", "stdio", "--sandbox"],
            "serve": [sys.executable, "-m", "colabhive_mcp", "serve", "--bind", f"127.0.0.1:{free_port()}"],
            "plain gunicorn": GUNICORN + ["--bind", f"127.0.0.1:{free_port()}"]}[how]
    result = subprocess.run(argv, env=server_env(**{typo: value, "COLABHIVE_SESSION_SECRET": SECRET}),
                            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr
    assert f"environment {typo} is not a setting: did you mean {meant}?" in result.stderr


def test_an_unknown_environment_variable_is_one_warning_and_config_lists_it(capsys, monkeypatch):
    monkeypatch.setenv("COLABHIVE_SOMETHING_ELSE_ENTIRELY", "1")
    assert main(["config"]) == 0
    assert "not settings, ignored: COLABHIVE_SOMETHING_ELSE_ENTIRELY" in capsys.readouterr().out


@pytest.mark.parametrize("how", ["serve", "plain gunicorn"])
def test_a_server_with_an_unknown_variable_says_so_once_and_serves(gateway_sandbox, how):
    from ..support.http_client import initialize

    server = HttpServer(gateway_sandbox.url, "--http-workers", "2", gunicorn_conf=how == "plain gunicorn",
                        env={"COLABHIVE_SOMETHING_ELSE_ENTIRELY": "1"})
    try:
        assert initialize(server.url)
        said = [line for line in server.stderr().splitlines() if "COLABHIVE_SOMETHING_ELSE_ENTIRELY" in line]
        assert said == ["colabhive-mcp: warning: COLABHIVE_SOMETHING_ELSE_ENTIRELY is not a setting and is ignored "
                        "(`colabhive-mcp config` lists the settings and their variables)"], said
    finally:
        server.stop()


def test_serve_with_the_sandbox_says_where_and_with_which_key(gateway_sandbox):
    from ..support.http_client import initialize

    server = HttpServer(gateway_sandbox.url, "--sandbox", "--http-workers", "1")
    try:
        said = [line for line in server.stderr().splitlines() if not line.startswith("{")]
        assert said[:2] == [f"colabhive-mcp: the sandbox's tools are at {server.url}",
                            f"colabhive-mcp: send the demo key: Authorization: Bearer {DEMO_KEY}"], said
        assert initialize(server.url, key=DEMO_KEY)
    finally:
        server.stop()


def test_ctrl_c_during_call_cancels_the_gateways_job_in_one_line(sandbox, journal, tmp_path):
    import signal

    from ..support.waiting import wait_until

    process = subprocess.Popen([sys.executable, "-m", "colabhive_mcp", "call", "batch-report", "--args",
                                '{"seconds": 60}', "--out", str(tmp_path)], stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=server_env(COLABHIVE_API_URL=sandbox.url, COLABHIVE_API_KEY=DEMO_KEY))
    try:
        assert wait_until(lambda: journal("invoke"), timeout=30), "the call never reached the gateway"
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 130, err
    assert err.splitlines() == ["colabhive-mcp: call INTERRUPTED: the call was cancelled and the gateway asked to "
                                "stop its work"], err
    assert "\033[" not in err and out == ""  # (stderr is a pipe here: no progress line, no escapes)
    cancels = journal("cancel")
    assert len(cancels) == 1 and cancels[0]["invocation_id"] == journal("invoke")[0]["invocation_id"]


@pytest.mark.parametrize("key,says", [("hive_...", "the key is the placeholder from the snippet"),
                                      ('"hive_abcdefgh12345"', "the key has quotes around it"),
                                      ("${env:COLABHIVE_API_KEY}", "a variable your client did not fill in")])
def test_the_snippets_placeholder_a_quoted_key_or_an_unexpanded_variable_is_named(sandbox, key, says):
    checked = cli("check", sandbox=sandbox, key=key)
    assert "colabhive-mcp: warning: the API key from environment COLABHIVE_API_KEY: the key " in checked.stderr
    assert says in checked.stderr and checked.returncode == 5  # (and the gateway rejected it, as it said)


def test_a_hosted_server_names_the_placeholder_and_the_setting_behind_a_421(hosted):
    placeholder = requests.post(hosted.url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, timeout=10,
                                headers={"Authorization": "Bearer hive_...", "Accept": "application/json, text/event-stream"})
    assert placeholder.status_code == 401 and "placeholder" in placeholder.text, placeholder.text
    foreign = requests.post(hosted.url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, timeout=10,
                            headers={"Host": "mcp.example.com", "Authorization": f"Bearer {DEMO_KEY}"})
    assert foreign.status_code == 421 and "allowed_hosts (COLABHIVE_ALLOWED_HOSTS)" in foreign.text


def test_the_sandbox_on_a_taken_port_says_so_in_one_line():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run([sys.executable, "-m", "colabhive_mcp", "sandbox", "--port", str(port)],
                                capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and result.stderr.splitlines() == [
        f"colabhive-mcp: 127.0.0.1:{port} is in use; pass --port PORT"], result.stderr


def test_human_commands_write_no_json_log_lines_into_a_pipe_and_tools_has_headings(sandbox):
    sandbox.add_action({"name": "mismatch", "inputSchema": {"type": "object"}, "outputSchema": {
        "type": "object", "required": ["x"], "properties": {"x": {"type": "string"}}}}, result={"y": 1})
    argv = [sys.executable, "-m", "colabhive_mcp", "call", "mismatch", "--api-url", sandbox.url]
    env = {k: v for k, v in server_env(COLABHIVE_API_KEY=DEMO_KEY).items() if k != "COLABHIVE_LOG_FORMAT"}  # (auto)
    called = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    warnings = called.stderr.splitlines()
    assert len(warnings) == 1 and "WARNING result.output_schema_mismatch" in warnings[0], called.stderr
    assert not called.stderr.lstrip().startswith("{") and "\033[" not in called.stderr
    listed = subprocess.run(argv[:3] + ["tools", "--api-url", sandbox.url], env=env, capture_output=True, text=True,
                            timeout=60)
    assert listed.stdout.splitlines()[0].split() == ["NAME", "SPEED", "SIDE", "EFFECTS", "TITLE"]


@pytest.mark.parametrize("how", ["serve", "plain gunicorn"])
def test_the_server_says_where_it_serves_and_that_it_stopped(gateway_sandbox, how):
    server = HttpServer(gateway_sandbox.url, gunicorn_conf=how == "plain gunicorn")
    said = [line for line in server.stderr().splitlines() if line.startswith("colabhive-mcp:")]
    assert said == [f"colabhive-mcp: serving MCP at {server.url} (2 workers)"], server.stderr()
    log = server.stop()
    assert log.rstrip().splitlines()[-1] == "colabhive-mcp: stopped"
