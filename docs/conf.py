"""Sphinx configuration for the colabhive-mcp documentation (reStructuredText, no network at build time).

Build it with ``python -m sphinx -W --keep-going -b html docs docs/_build/html``.
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))  # settings_reference: the configuration reference, from settings/config.py
sys.path.insert(0, str(HERE.parent))  # the package itself, from this checkout

from colabhive_mcp import __version__  # noqa: E402

project = "colabhive-mcp"
author = "ColabHive"
copyright = "ColabHive"
version = release = __version__

extensions = ["settings_reference"]
exclude_patterns = ["_build"]
html_theme = "alabaster"
html_title = f"colabhive-mcp {__version__}"
html_show_sourcelink = False
