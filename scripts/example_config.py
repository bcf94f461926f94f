"""Write conf/colabhive-mcp.example.toml from the settings table (run after adding a setting)."""

import argparse
from pathlib import Path

from colabhive_mcp.settings.config import SETTINGS

HEADER = """\
# colabhive-mcp configuration (TOML). Point COLABHIVE_MCP_CONFIG or --config at this file.
# Precedence: command-line flag > environment variable > this file > default.
# Secrets (the API key, the session secret) belong in the environment, not in a file.
"""
EXAMPLE = Path(__file__).resolve().parent.parent / "conf" / "colabhive-mcp.example.toml"


def toml_value(field) -> str:
    default = field.default if field.default is not None else field.metadata["example"]
    if isinstance(default, tuple):
        return "[" + ", ".join(f'"{v}"' for v in default) + "]"
    if isinstance(default, bool) or (default is None and "bool" in str(field.type)):
        return str(bool(default)).lower()
    if isinstance(default, str) or default is None:
        return f'"{default or ""}"'
    return repr(default)


def render() -> str:
    lines = [HEADER]
    for field in SETTINGS:
        if field.metadata["secret"]:
            continue
        lines.append(f"# {field.metadata['help']} (${field.metadata['env']})")
        lines.append(f"# {field.name} = {toml_value(field)}\n")
    return "\n".join(lines)


def main() -> None:
    argparse.ArgumentParser(description=__doc__).parse_args()
    EXAMPLE.write_text(render())


if __name__ == "__main__":
    main()
