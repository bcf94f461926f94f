"""Configuration precedence, validation and redacted description."""

import pytest

from colabhive_mcp.settings.config import API_PREFIX, Config, ConfigError
from colabhive_mcp.settings.sources import load


def test_precedence_is_flag_then_environment_then_file_then_default(tmp_path):
    config_file = tmp_path / "colabhive.toml"
    config_file.write_text('manifest_ttl = 30\npoll_max_wait = 12\nsync_timeout = 3\ndeny = ["a*", "b"]\n')
    environ = {"COLABHIVE_MANIFEST_TTL": "20", "COLABHIVE_POLL_MAX_WAIT": "15"}
    resolved = load({"manifest_ttl": "10"}, environ, str(config_file))
    config, sources = resolved.config, resolved.sources
    assert config.manifest_ttl == 10.0 and sources["manifest_ttl"] == "flag --manifest-ttl"
    assert config.poll_max_wait == 15.0 and sources["poll_max_wait"] == "environment COLABHIVE_POLL_MAX_WAIT"
    assert config.sync_timeout == 3 and sources["sync_timeout"].startswith("config file")
    assert config.deny == ("a*", "b")
    assert config.retries == 3 and sources["retries"] == "default"


def test_config_file_from_environment_and_section(tmp_path):
    config_file = tmp_path / "c.toml"
    config_file.write_text('[colabhive]\nread_only = true\n')
    config = load({}, {"COLABHIVE_MCP_CONFIG": str(config_file)}).config
    assert config.read_only is True


def test_every_bad_value_is_reported_with_its_source(tmp_path):
    environ = {"COLABHIVE_MANIFEST_TTL": "soon", "COLABHIVE_MIN_STABILITY": "rock-solid",
               "COLABHIVE_API_URL": "ftp://x"}
    with pytest.raises(ConfigError) as caught:
        load({"retries": "-1", "read_only": None}, environ)
    text = str(caught.value)
    assert "manifest_ttl = 'soon' from environment COLABHIVE_MANIFEST_TTL: expected a number" in text
    assert "min_stability" in text and "must be one of experimental, beta, stable" in text
    assert "retries = '-1' from flag --retries: must be between 0 and 10" in text
    assert "api_url" in text


def test_unknown_file_keys_and_bad_toml_are_errors(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("manifest_tll = 3\n")
    with pytest.raises(ConfigError, match="unknown setting 'manifest_tll': did you mean 'manifest_ttl'\\?"):
        load({}, {}, str(bad))
    bad.write_text("this is not toml")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load({}, {}, str(bad))
    with pytest.raises(ConfigError, match="cannot read config file"):
        load({}, {}, str(tmp_path / "missing.toml"))


def test_api_url_gets_the_builder_prefix_only_when_it_has_no_path():
    assert load({"api_url": "https://api.colabhive.com/"}, {}).config.api_url == "https://api.colabhive.com" + API_PREFIX
    assert load({"api_url": "http://127.0.0.1:9/x/v1"}, {}).config.api_url == "http://127.0.0.1:9/x/v1"


def test_describe_never_shows_the_key():
    key = "hive_live_0123456789abcdef"
    resolved = load({}, {"COLABHIVE_API_KEY": key})
    rows = {name: (value, source) for name, value, source in resolved.describe()}
    value, source = rows["api_key"]
    assert key not in value and "sha256" in value and source == "environment COLABHIVE_API_KEY"


def test_secret_values_are_not_echoed_in_errors():
    with pytest.raises(ConfigError) as caught:
        load({"api_key": 12345}, {})
    assert "12345" not in str(caught.value) and "(secret)" in str(caught.value)


def test_the_example_config_file_names_every_setting_with_its_default(tmp_path):
    from pathlib import Path

    from colabhive_mcp.settings.config import SETTINGS

    example = Path(__file__).resolve().parents[2] / "conf" / "colabhive-mcp.example.toml"
    uncommented = tmp_path / "all.toml"
    uncommented.write_text("\n".join(line[2:] for line in example.read_text().splitlines()
                                     if line.startswith("# ") and " = " in line))
    resolved = load({}, {}, str(uncommented))
    for f in SETTINGS:
        if f.metadata["secret"]:
            continue
        assert resolved.sources[f.name].startswith("config file"), f"{f.name} is missing from the example"
        if f.default is not None:
            assert getattr(resolved.config, f.name) == f.default


def test_the_hosted_environment_example_is_valid_and_has_no_key():
    from pathlib import Path

    example = Path(__file__).resolve().parents[2] / "conf" / "colabhive-mcp.env.example"
    environ = dict(line.split("=", 1) for line in example.read_text().splitlines()
                   if line and not line.startswith("#"))
    config = load({}, environ).config
    assert config.api_key is None and not config.single_tenant
    assert config.bind == "127.0.0.1:8765" and config.allowed_hosts == ("mcp.example.com",)
    assert config.http_threads == Config().http_threads  # the example says what the default is


def test_waits_per_kind_or_latency_class(tmp_path):
    config = load({"poll_max_wait_by": "slow=900, batch=3600"}, {}).config
    assert config.poll_max_wait_by == (("slow", 900.0), ("batch", 3600.0))
    config_file = tmp_path / "c.toml"
    config_file.write_text("[poll_max_wait_by]\nllm = 60\n")
    assert load({}, {}, str(config_file)).config.poll_max_wait_by == (("llm", 60.0),)
    with pytest.raises(ConfigError, match="NAME=SECONDS"):
        load({"poll_max_wait_by": "slow"}, {})
    with pytest.raises(ConfigError, match="1 to 86400"):
        load({"poll_max_wait_by": "slow=0"}, {})


def test_secrets_come_from_systemd_credentials_when_the_environment_has_none(tmp_path):
    secret = "ab" * 32
    (tmp_path / "session-secret").write_text(secret + "\n")
    (tmp_path / "bind").write_text("0.0.0.0:1")  # not a secret: never read from there
    environ = {"CREDENTIALS_DIRECTORY": str(tmp_path)}
    resolved = load(environ=environ)
    assert resolved.config.session_secret == secret and resolved.sources["session_secret"] == "credential session-secret"
    assert resolved.config.bind == "127.0.0.1:8765" and resolved.config.metrics_token is None
    given = load(environ={**environ, "COLABHIVE_SESSION_SECRET": "cd" * 32}).config.session_secret
    assert given == "cd" * 32  # the environment wins
    assert secret not in " ".join(value for _, value, _ in resolved.describe())


def test_two_spellings_of_one_setting_in_a_file_are_named_as_written(tmp_path):
    path = tmp_path / "old.toml"
    path.write_text("use_etag = false\n[filter]\netag = true\n")
    with pytest.raises(ConfigError) as caught:
        load({}, {}, str(path))
    assert "'use_etag' and 'etag' in [filter] are the same setting (manifest_etag)" in str(caught.value)
    path.write_text("use_etag = false\netag = false\n")  # the same value twice: no problem
    assert load({}, {}, str(path)).config.manifest_etag is False


def test_one_key_at_the_top_and_in_a_0_3_4_table_with_different_values_is_an_error(tmp_path):
    path = tmp_path / "both.toml"
    path.write_text('deny = ["a-*"]\n[filter]\ndeny = ["b-*"]\n')  # the later one used to win, silently
    with pytest.raises(ConfigError) as caught:
        load({}, {}, str(path))
    assert "'deny' and 'deny' in [filter] are the same setting (deny) with different values" in str(caught.value)


def test_one_problem_is_one_line():
    with pytest.raises(ConfigError) as caught:
        load({"retries": "-1"}, {})
    assert str(caught.value) == "invalid configuration: retries = '-1' from flag --retries: must be between 0 and 10"


def test_each_setting_has_a_scope_and_http_settings_say_so():
    from colabhive_mcp.settings.config import SCOPES, SETTINGS

    scopes = {f.name: f.metadata["scope"] for f in SETTINGS}
    assert set(scopes.values()) == set(SCOPES)
    assert all(f.metadata["scope"] == "http" for f in SETTINGS if f.metadata["help"].startswith("HTTP:"))
    assert scopes["bind"] == scopes["http_workers"] == scopes["rejected_key_ttl"] == "http"
    assert scopes["workers"] == "stdio" and scopes["deny"] == scopes["log_level"] == "all"


def test_the_example_config_file_is_what_the_script_writes():
    import runpy
    from pathlib import Path

    script = runpy.run_path(str(Path(__file__).resolve().parents[2] / "scripts" / "example_config.py"))
    assert script["EXAMPLE"].read_text() == script["render"](), "run python scripts/example_config.py"


def test_an_environment_variable_near_a_settings_is_refused_naming_it_and_others_are_listed():
    from colabhive_mcp.settings.sources import known_variables

    with pytest.raises(ConfigError, match="environment COLABHIVE_MANIFEST_TLL is not a setting: did you mean "
                                          "COLABHIVE_MANIFEST_TTL\\?"):
        load(environ={"COLABHIVE_MANIFEST_TLL": "60"})
    resolved = load(environ={"COLABHIVE_MCP_CONFIG_DIR_X": "1", "COLABHIVE_ALLOW_TOOLS": "a*", "OTHER": "1"})
    assert resolved.unknown == ("COLABHIVE_MCP_CONFIG_DIR_X",)  # a 0.3.4 alias is a setting; OTHER is not ours
    assert {"COLABHIVE_API_KEY", "COLABHIVE_ALLOW_TOOLS", "COLABHIVE_MCP_CONFIG"} <= known_variables()
    assert load(environ={}).unknown == () and load(environ={}).unknown_warning() is None
