"""Client profiles: the one place where known hosts' limits and quirks are accommodated.

A profile is chosen from ``clientInfo.name`` (or forced with ``client_profile``) and sets the
tool-name cap, how many tools are listed, image and text budgets, schema strictness, and the
argument keys the host is known to inject.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from .config import Config


@dataclass(frozen=True)
class Profile:
    name: str
    name_max: int = 48  # hosts prefix the server name (mcp__colabhive__…) and cap the total at 64
    max_tools: int = 0  # 0: list them all
    max_image_bytes: int = 1_048_576  # Claude Desktop refuses larger images
    max_text_chars: int = 100_000
    strict_schemas: bool = False  # no $ref/$defs/$schema, no root anyOf
    drop_arguments: tuple[str, ...] = ("toolCallId",)  # keys hosts inject that no schema asked for


# (substrings of a lowercased clientInfo.name, profile); first match wins
KNOWN: tuple[tuple[tuple[str, ...], Profile], ...] = (
    (("claude-code",), Profile("claude-code")),
    (("claude",), Profile("claude-desktop")),
    (("cursor",), Profile("cursor", name_max=40, max_tools=40, strict_schemas=True)),
    (("visual studio code", "vscode", "copilot"), Profile("vscode", name_max=64, max_tools=128, strict_schemas=True)),
    (("gemini",), Profile("gemini", strict_schemas=True)),
    (("n8n",), Profile("n8n", name_max=64)),
    (("inspector",), Profile("inspector", name_max=64, max_image_bytes=10_485_760)),
)
UNKNOWN = Profile("unknown")
NAMES = {profile.name: profile for _, profile in KNOWN} | {UNKNOWN.name: UNKNOWN}


def for_client(client_info: Any, config: Config) -> Profile:
    """The profile for this client, with the configuration's overrides applied."""
    name = client_info.get("name") if isinstance(client_info, dict) else None
    return _resolve(name if isinstance(name, str) else "", config)


@lru_cache(maxsize=256)
def _resolve(client_name: str, config: Config) -> Profile:
    if config.client_profile != "auto":
        profile = NAMES[config.client_profile]
    else:
        lowered = client_name.lower()
        profile = next((p for needles, p in KNOWN if any(n in lowered for n in needles)), UNKNOWN)
    overrides = {field: getattr(config, field) for field in ("max_tools", "max_image_bytes", "max_text_chars",
                                                             "drop_arguments") if getattr(config, field) is not None}
    if config.tool_name_max:
        overrides["name_max"] = config.tool_name_max
    return replace(profile, **overrides)
