"""The README renders cleanly and opens with the two set-up commands CI relies on."""

from pathlib import Path

import docutils.core

ROOT = Path(__file__).resolve().parent.parent


def test_readme_is_valid_restructuredtext():
    docutils.core.publish_string((ROOT / "README.rst").read_text(), writer="null",
                                 settings_overrides={"report_level": 2, "halt_level": 2})


def test_the_test_command_in_the_readme_is_what_ci_runs():
    readme = (ROOT / "README.rst").read_text()
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert ci in readme
    assert readme.index("colabhive-mcp demo") < readme.index(ci)


def test_the_readme_builds_the_docs_with_the_command_the_development_page_gives():
    development = (ROOT / "docs" / "development.rst").read_text()
    command = next(line.strip() for line in development.splitlines() if "-m sphinx" in line)
    readme = " ".join((ROOT / "README.rst").read_text().split())
    assert command in readme
