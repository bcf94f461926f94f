"""The documentation: the Sphinx site builds with warnings as errors, its configuration reference is
generated from the settings table (so a new setting is in it without anyone writing it), the README
renders cleanly, every install command is pinned or from a checkout, and the hosts' deadlines the
docs state are the ones profiles.py applies."""

import dataclasses
import html
import io
import re
import subprocess
import sys
from pathlib import Path

import docutils.core
import pytest
from sphinx.cmd.build import build_main  # the `test` extra installs Sphinx

from colabhive_mcp.catalog import profiles
from colabhive_mcp.settings import config
from colabhive_mcp.settings.parsers import number

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
sys.path.insert(0, str(DOCS / "_ext"))

import settings_reference  # noqa: E402

pytestmark = pytest.mark.slow


def entry_text(page: str, anchor: str) -> str:
    """What the reference says about one setting: its entry's text, from its anchor to the next one."""
    start = page.index(f'id="{anchor}"')
    end = page.find('id="setting-', start + 1)
    chunk = page[start:end if end != -1 else page.index("</dl>\n</section>", start)]
    return html.unescape(re.sub(r"<[^>]+>", "", chunk.split(">", 1)[1]))


def sphinx_build(out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-E", "-b", "html", str(DOCS),
                           str(out)], capture_output=True, text=True, timeout=300, cwd=ROOT)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("docs-html")
    built = sphinx_build(out)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-5000:]
    assert "warning" not in built.stderr.lower(), built.stderr[-5000:]
    return out


def test_the_docs_build_with_warnings_as_errors(site):
    for page in ("index", "readme", "architecture", "hosts", "configuration", "operations", "reliability",
                 "performance", "protocol", "sandbox", "upgrading", "development"):
        assert (site / f"{page}.html").is_file(), page
    assert (site / "_images" / "topologies.svg").is_file()  # the topologies' picture, written by hand
    assert 'src="_images/topologies.svg"' in (site / "architecture.html").read_text()


def test_the_configuration_reference_lists_every_setting_as_the_code_has_it(site):
    page = (site / "configuration.html").read_text()
    anchors = re.findall(r'id="setting-([a-z0-9-]+)"', page)
    assert anchors == [f.name.replace("_", "-") for f in config.SETTINGS]  # all, in the table's order
    for f in config.SETTINGS:
        row = settings_reference.describe(f)
        entry = entry_text(page, row["anchor"])
        assert row["flags"][0] in entry and f"default:{row['default']}" in entry.replace("\n", ""), f.name
        if f.metadata["env"]:
            assert f.metadata["env"] in entry, f.name
        for alias in f.metadata["aliases"]:
            assert f"COLABHIVE_{alias.upper()}" in entry and f"--{alias.replace('_', '-')}" in entry, f.name
    # the defaults the hand-written table once got wrong come from the code now
    assert settings_reference.describe(config.Config.__dataclass_fields__["tool_name_max"])["default"] == "0"
    assert settings_reference.describe(config.Config.__dataclass_fields__["http_long_requests"])["default"] == "unset"


def test_a_setting_added_to_the_table_is_in_the_next_build(tmp_path, monkeypatch):
    @dataclasses.dataclass(frozen=True)
    class Added:
        brand_new_knob: int = config._setting(7, number(int, 0, 9), "a setting nobody documented by hand",
                                              env="COLABHIVE_BRAND_NEW_KNOB", aliases=("old_knob",))

    monkeypatch.setattr(config, "SETTINGS", config.SETTINGS + dataclasses.fields(Added))
    out = tmp_path / "html"
    assert build_main(["-W", "--keep-going", "-E", "-q", "-b", "html", str(DOCS), str(out)]) == 0
    page = (out / "configuration.html").read_text()
    entry = entry_text(page, "setting-brand-new-knob").replace("\n", "")
    for text in ("A setting nobody documented by hand.", "--brand-new-knob N", "COLABHIVE_BRAND_NEW_KNOB",
                 "file key:brand_new_knob", "--old-knob", "COLABHIVE_OLD_KNOB", "default:7"):
        assert text in entry, text


def test_the_reference_says_each_kind_of_setting_as_a_user_writes_it():
    fields = config.Config.__dataclass_fields__
    assert settings_reference.describe(fields["read_only"])["flags"] == ["--read-only", "--no-read-only"]
    assert settings_reference.describe(fields["allow"])["default"] == "*"
    assert settings_reference.describe(fields["deny"])["default"] == "empty"
    assert settings_reference.describe(fields["manifest_ttl"])["default"] == "60"
    assert settings_reference.describe(fields["max_message_bytes"])["default"] == "4194304 (4 MiB)"
    secret = settings_reference.describe(fields["session_secret"])
    assert secret["secret"] and secret["credential"] == "session-secret"


def test_the_readme_renders_without_a_warning():
    warnings = io.StringIO()
    docutils.core.publish_string((ROOT / "README.rst").read_text(), writer="null",
                                 settings_overrides={"report_level": 2, "warning_stream": warnings})
    assert warnings.getvalue() == ""


UNPINNED = re.compile(r"(?:pipx?|uv(?: pip)?) install (?:-\S+ )*['\"]?colabhive-mcp(?![\w.-]*(?:\[[^\]]*\])?==)"
                      r"|uvx colabhive-mcp(?!@)")


SHIPPED_TEXT = ["README.rst", *sorted(p.relative_to(ROOT).as_posix() for p in [
    *DOCS.glob("*.rst"), *(ROOT / "conf").rglob("*"), *(ROOT / "scripts").glob("*.py")] if p.is_file())]


@pytest.mark.parametrize("path", SHIPPED_TEXT)
def test_every_install_command_is_pinned_or_from_a_checkout(path):
    """The package index's unpinned colabhive-mcp is 0.3.4, another package: no page, configuration file or
    script may install it."""
    text = (ROOT / path).read_text()
    assert not UNPINNED.findall(text), UNPINNED.findall(text)
    assert UNPINNED.search("pip install colabhive-mcp") and UNPINNED.search("uvx colabhive-mcp --version")
    assert not UNPINNED.search("pip install 'colabhive-mcp[otel]==1.0.0'")


@pytest.mark.parametrize("name", sorted(profiles.NAMES))
def test_the_hosts_deadlines_in_the_docs_are_the_profiles(name):
    """docs/hosts.rst states, for each profile, the deadline and progress timer profiles.py applies."""
    profile = profiles.NAMES[name]
    said = "no deadline" if not profile.deadline else f"deadline {profile.deadline:g} s"
    if profile.progress_timer:
        said += f", progress timer {profile.progress_timer:g} s"
    assert f"(``{name}``): {said} (" in (DOCS / "hosts.rst").read_text()
