"""Upgrading from colabhive-mcp 0.3.4: its flags, variables, files and commands keep their meaning,
or are refused at start with what to use instead. Never silently ignored: a user who denied side
effects in 0.3.4 must not get them after the upgrade."""

import re
import subprocess
import sys

import pytest
import requests

from colabhive_mcp import __version__
from colabhive_mcp.cli.demo import StdioPeer
from colabhive_mcp.cli.main import command_line, resolve
from colabhive_mcp.sandbox import DEMO_KEY
from colabhive_mcp.settings.config import SETTINGS, ConfigError
from colabhive_mcp.settings.sources import load, show
from colabhive_mcp.settings.upgrade import GATES

from ..support.environ import server_env
from ..support.http_server import HttpServer, log_events

pytestmark = pytest.mark.slow

# (0.3.4 flag and value, setting, the value it must have)
FLAGS = [
    (["--allow-tools", "hive-*,echo"], "allow", ("hive-*", "echo")),
    (["--deny-tools", "crm-*"], "deny", ("crm-*",)),
    (["--allow-kinds", "llm,tool"], "kinds", ("llm", "tool")),
    (["--deny-side-effects", "writes,billing"], "deny_side_effects", ("writes", "billing")),
    (["--stability", "beta"], "min_stability", "beta"),
    (["--log-file", "/tmp/x.log"], "log_file", "/tmp/x.log"),
    (["--log-jsonrpc"], "log_frames", True),
    (["--poll-interval", "3"], "poll_max_interval", 3.0),
    (["--no-etag"], "manifest_etag", False),
]
# (0.3.4 variable, value, setting, the value it must have)
VARIABLES = [
    ("COLABHIVE_ALLOW_TOOLS", "hive-*", "allow", ("hive-*",)),
    ("COLABHIVE_DENY_TOOLS", "crm-*", "deny", ("crm-*",)),
    ("COLABHIVE_ALLOW_KINDS", "llm", "kinds", ("llm",)),
    ("COLABHIVE_DENY_SIDE_EFFECTS", "writes", "deny_side_effects", ("writes",)),
    ("COLABHIVE_STABILITY", "stable", "min_stability", "stable"),
    ("COLABHIVE_HTTP_TIMEOUT", "12.5", "request_timeout", 12.5),
    ("COLABHIVE_CORS_ORIGINS", "https://app.example.com", "allowed_origins", ("https://app.example.com",)),
    ("COLABHIVE_USE_ETAG", "false", "manifest_etag", False),
    ("COLABHIVE_LOG_FILE", "/tmp/y.log", "log_file", "/tmp/y.log"),
    ("COLABHIVE_POLL_INTERVAL", "4", "poll_max_interval", 4.0),
    ("COLABHIVE_SYNC_TIMEOUT", "30.0", "sync_timeout", 30),  # 0.3.4 wrote it as a float
]


def parsed(*argv):
    args = command_line().parse_args(["stdio", *argv])
    return resolve(args).config


@pytest.mark.parametrize("argv,setting,expected", FLAGS, ids=[f[0][0] for f in FLAGS])
def test_each_0_3_4_flag_sets_its_setting(argv, setting, expected):
    assert getattr(parsed(*argv), setting) == expected


@pytest.mark.parametrize("variable,value,setting,expected", VARIABLES, ids=[v[0] for v in VARIABLES])
def test_each_0_3_4_variable_sets_its_setting(variable, value, setting, expected):
    resolved = load({}, {variable: value})
    assert getattr(resolved.config, setting) == expected and resolved.sources[setting] == f"environment {variable}"


def test_an_old_and_a_new_variable_that_disagree_are_refused():
    with pytest.raises(ConfigError, match="COLABHIVE_DENY and environment COLABHIVE_DENY_TOOLS disagree"):
        load({}, {"COLABHIVE_DENY": "a", "COLABHIVE_DENY_TOOLS": "b"})
    assert load({}, {"COLABHIVE_DENY": "a", "COLABHIVE_DENY_TOOLS": "a"}).config.deny == ("a",)


def test_the_0_3_4_config_file_is_read_where_it_lived_with_its_tables_and_names(tmp_path):
    home = tmp_path / "xdg"
    (home / "colabhive-mcp" / "profiles").mkdir(parents=True)
    (home / "colabhive-mcp" / "config.toml").write_text(
        'api_url = "https://api.colabhive.com"\nhttp_timeout = 20.0\nuse_etag = false\n'
        '[filter]\ndeny_side_effects = ["writes"]\nallow_kinds = ["llm"]\nstability = "beta"\n'
        '[transport]\ncors_origins = ["https://a.example"]\nmax_calls_per_minute = 90\n')
    config = load({}, {"XDG_CONFIG_HOME": str(home)}).config
    assert config.deny_side_effects == ("writes",) and config.kinds == ("llm",) and config.min_stability == "beta"
    assert config.request_timeout == 20.0 and config.manifest_etag is False
    assert config.allowed_origins == ("https://a.example",) and config.tenant_calls_per_minute == 90
    (home / "colabhive-mcp" / "profiles" / "work.toml").write_text('[filter]\ndeny_tools = ["web-*"]\n')
    shown = run_cli("config", "--profile", "work", XDG_CONFIG_HOME=str(home))
    rows = {line.split()[0]: line.split()[1:] for line in shown.stdout.splitlines()}
    assert shown.returncode == 0 and rows["deny"][:3] == ["web-*", "[config", "file"], shown.stdout
    assert run_cli("config", "--profile", "nope", XDG_CONFIG_HOME=str(home)).returncode == 2


@pytest.mark.parametrize("contents,says", [
    ('host = "0.0.0.0"\n', 'set bind = "HOST:PORT"'),
    ('[transport]\nport = 9000\n', 'set bind = "HOST:PORT"'),
    ('sse_path = "/x"\n', "the endpoint is /mcp"),
    ("webhook_tools_enabled = true\n", "no webhook or cohort tools"),
    ('manifest_pin = "{snapshot}"\n', "manifest_snapshot = PATH"),
    ('allow_tools = ["a"]\nallow = ["b"]\n', "are the same setting"),
])
def test_0_3_4_settings_with_no_equivalent_are_refused_with_what_to_do(tmp_path, contents, says):
    snapshot = tmp_path / "snap.json"
    snapshot.write_text('{"tools": []}')
    path = tmp_path / "old.toml"
    path.write_text(contents.replace("{snapshot}", str(snapshot)))
    with pytest.raises(ConfigError, match=says.replace("(", r"\(").replace(")", r"\)")):
        load({}, {}, str(path))


def test_a_gate_left_off_asks_for_nothing_and_is_accepted(tmp_path):
    path = tmp_path / "old.toml"
    path.write_text("webhook_tools_enabled = false\ncohort_tools_enabled = false\n")
    assert load({}, {"COLABHIVE_MCP_WEBHOOK_TOOLS_ENABLED": "false"}, str(path)).config
    with pytest.raises(ConfigError, match="no webhook or cohort tools"):
        load({}, {"COLABHIVE_MCP_COHORT_TOOLS_ENABLED": "1"})


def run_cli(*argv, **env):
    return subprocess.run([sys.executable, "-m", "colabhive_mcp", *argv], env=server_env(**env),
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("argv,says", [
    (["serve", "--host", "0.0.0.0"], 'set bind = "HOST:PORT"'),
    (["serve", "--port", "9000"], 'set bind = "HOST:PORT"'),
    (["serve", "--sse-path", "/x"], "the endpoint is /mcp"),
    (["--webhook-tools-enabled"], "no webhook or cohort tools"),
])
def test_0_3_4_flags_with_no_equivalent_stop_the_start_with_what_to_do(argv, says):
    result = run_cli(*argv, COLABHIVE_API_KEY=DEMO_KEY)
    assert result.returncode == 2 and says in result.stderr and result.stdout == ""
    assert len(result.stderr.splitlines()) == 1, result.stderr  # the sentence alone, no usage


def test_the_0_3_4_commands_still_work(sandbox):
    version = run_cli("version")
    assert version.returncode == 0 and version.stdout.strip() == f"colabhive-mcp {__version__}"
    checked = run_cli("test", "--api-url", sandbox.url, "--log-level", "error", COLABHIVE_API_KEY=DEMO_KEY)
    assert checked.returncode == 0 and "shown" in checked.stdout
    assert run_cli("config", "--check", "--api-url", sandbox.url, COLABHIVE_API_KEY=DEMO_KEY).returncode == 0


@pytest.mark.parametrize("how", ["flag", "variable", "old file"])
def test_a_user_who_denied_side_effects_in_0_3_4_still_gets_none_after_the_upgrade(sandbox, journal, tmp_path, how):
    """The server a 0.3.4 host configuration starts: the tool with side effects is not listed, and a
    call to it is refused before the gateway hears of it."""
    argv, env = [sys.executable, "-m", "colabhive_mcp"], {"COLABHIVE_API_KEY": DEMO_KEY}
    if how == "flag":
        argv += ["--deny-side-effects", "writes"]  # 0.3.4 hosts put its flags straight after the command
    elif how == "variable":
        env["COLABHIVE_DENY_SIDE_EFFECTS"] = "writes"
    else:
        (tmp_path / "colabhive-mcp").mkdir()
        (tmp_path / "colabhive-mcp" / "config.toml").write_text('[filter]\ndeny_side_effects = ["writes"]\n')
        env["XDG_CONFIG_HOME"] = str(tmp_path)
    peer = StdioPeer(argv + ["--api-url", sandbox.url, "--log-file", str(tmp_path / "server.log")],
                     env=server_env(**env))
    try:
        peer.initialize()
        names = {t["name"] for t in peer.request("tools/list")["result"]["tools"]}
        assert "echo" in names and "crm-create-contact" not in names
        answer = peer.request("tools/call", {"name": "crm-create-contact",
                                             "arguments": {"name": "A", "email": "a@example.com"}})
        assert answer["result"]["isError"] is True and "denied" in answer["result"]["content"][0]["text"]
    finally:
        assert peer.close() == 0
    assert not journal("invoke")
    assert "mcp.session.started" in (tmp_path / "server.log").read_text()  # --log-file: logs went there


def test_no_etag_fetches_the_manifest_whole_each_time(sandbox, journal):
    from colabhive_mcp.settings.config import Config
    from colabhive_mcp.tenants.tenant import Tenant

    for conditional in (True, False):
        tenant = Tenant(Config(api_url=sandbox.url, manifest_ttl=0, manifest_stale_while_revalidate=0,
                               manifest_etag=conditional), DEMO_KEY)  # each list asks the gateway first
        first, second = tenant.manifest.get(), tenant.manifest.get()
        assert second is first  # the same version either way: nobody is told the list changed
        tenant.close()
    asked = [e["if_none_match"] for e in journal("manifest") if not e.get("cursor")]
    assert asked[0] is None and asked[1] is not None  # with ETags: revalidated
    assert asked[2:] == [None, None]  # --no-etag: fetched whole


# A value for every setting that has 0.3.4 names, set through all of them at once (they agree): the
# filters leave only echo (each hides one action the others would show); the rest is seen below.
OLD_VALUES = {
    "allow": "echo,crm-*,hive-*,flaky-*",  # not batch-report: a stable tool no other filter hides
    "deny": "crm-*",  # an operation, a kind that is allowed
    "kinds": "tool,specialist,operation",  # hive-chat is an llm
    "min_stability": "stable",  # flaky-translate is beta
    "request_timeout": "10",  # 0.3.4 wrote whole numbers; serve's workers once saw "10.0" beside it and refused
    "manifest_etag": "true",
    "tenant_calls_per_minute": "600",
    "poll_max_interval": "0.2",
    "allowed_origins": "https://app.example.com",
    "log_frames": "true",
}
OLD_ENVIRONMENT = {
    **{f"COLABHIVE_{alias.upper()}": OLD_VALUES[f.name] for f in SETTINGS for alias in f.metadata["aliases"]},
    **{variable: "false" for variable in GATES.values()},  # 0.3.4's gates, left off: accepted
    "COLABHIVE_SYNC_TIMEOUT": "1.0",  # 0.3.4 wrote it as a float
    "COLABHIVE_POLL_MAX_INTERVAL": "",  # the test server's own setting, which would disagree with the alias
}


def test_the_test_covers_every_0_3_4_name():
    assert set(OLD_VALUES) == {f.name for f in SETTINGS if f.metadata["aliases"]}


def old_config_home(tmp_path):
    """0.3.4's own configuration file, where it kept it, in its tables."""
    (tmp_path / "colabhive-mcp").mkdir()
    (tmp_path / "colabhive-mcp" / "config.toml").write_text(
        '[filter]\ndeny_side_effects = ["billing"]\n[transport]\ncohort_tools_enabled = false\n')
    return str(tmp_path)


def test_every_0_3_4_name_takes_effect(tmp_path):
    shown = run_cli("config", **OLD_ENVIRONMENT, XDG_CONFIG_HOME=old_config_home(tmp_path))
    assert shown.returncode == 0, shown.stderr
    rows = {name: (value, source) for name, value, source in
            (re.match(r"(\S+)\s+(.*)  \[(.*)\]$", line).groups() for line in shown.stdout.splitlines())}
    for f in SETTINGS:
        if f.metadata["aliases"]:
            assert rows[f.name] == (show(f.metadata["parse"](OLD_VALUES[f.name])),
                                    f"environment COLABHIVE_{f.metadata['aliases'][0].upper()}")
    assert rows["sync_timeout"][0] == "1" and rows["deny_side_effects"][0] == "billing"
    assert rows["deny_side_effects"][1].startswith("config file")


@pytest.mark.parametrize("gunicorn_conf", [False, True], ids=["serve", "plain-gunicorn"])
def test_a_hosted_server_starts_and_serves_with_every_0_3_4_name_set(gateway_sandbox, tmp_path, gunicorn_conf):
    """Under ``serve`` (its workers get the configuration through the fork) and under plain gunicorn
    (its workers read the environment and the file again): the server answers, and the old names
    took effect in the workers."""
    from ..support.http_client import initialize, rpc

    server = HttpServer(gateway_sandbox.url, gunicorn_conf=gunicorn_conf,
                        env={**OLD_ENVIRONMENT, "XDG_CONFIG_HOME": old_config_home(tmp_path)})
    try:
        session = initialize(server.url)
        listed = rpc(server.url, "tools/list", session=session)
        names = {t["name"] for t in listed.json()["result"]["tools"] if not t["name"].startswith("colabhive__")}
        assert names == {"echo"}
        preflight = requests.options(server.url, headers={"Origin": "https://app.example.com",
                                                          "Access-Control-Request-Method": "POST"}, timeout=10)
        assert preflight.status_code == 204  # cors_origins
    finally:
        logged = server.stop()
    assert log_events(logged, "mcp.frame")  # log_jsonrpc


def test_a_call_of_a_0_3_4_built_in_tool_says_what_to_do_instead_and_does_nothing(sandbox, journal):
    """Through the official SDK client over stdio, as an agent configured for 0.3.4 would call it."""
    import anyio
    from mcp import Client, StdioServerParameters

    async def call_them():
        params = StdioServerParameters(command=sys.executable, args=["-m", "colabhive_mcp", "stdio"],
                                       env=server_env(COLABHIVE_API_URL=sandbox.url, COLABHIVE_API_KEY=DEMO_KEY))
        async with Client(params) as client:
            return [await client.call_tool(name, {}) for name in ("list_training_runs", "run_inference")]

    for result in anyio.run(call_them):
        text = result.content[0].text
        assert result.is_error and "was a built-in tool of colabhive-mcp 0.3.4" in text, text
        assert "nothing was done" in text and "upgrading.html#built-in-tools-of-0-3-4" in text
    assert journal("invoke") == []


def test_the_upgrade_page_names_each_0_3_4_built_in_tool():
    from pathlib import Path

    from colabhive_mcp.settings.upgrade import RETIRED_TOOLS, TOOLS_PAGE

    page = (Path(__file__).resolve().parents[2] / "docs" / "upgrading.rst").read_text()
    section = page.split("Built-in tools of 0.3.4\n")[1]
    assert len(RETIRED_TOOLS) == 33 and all(f"``{name}``" in section for name in RETIRED_TOOLS)
    assert TOOLS_PAGE.endswith("#built-in-tools-of-0-3-4")  # the anchor Sphinx gives that section
