"""Client profiles: the one place where known hosts' limits and quirks are accommodated.

A profile is chosen from ``clientInfo.name`` (or forced with ``client_profile``) and sets the
tool-name cap, how many tools are listed, image and text budgets, schema strictness, the
argument keys the host is known to inject, and how long the host waits for one tool call.

Host deadlines, checked against the hosts' newest sources on 2026-12-04 (docs/hosts.rst gives the
source of each; the settings host_deadline and host_deadlines override them): Claude Desktop and
claude.ai give up after 4 minutes, progress or not (their connector FAQ says 300 s; the app's own
message says 4 minutes); Claude Code aborts a call that sends no answer or progress for 300 s, and
an HTTP call at about 350 s in all; Cursor cancels at 5 minutes; n8n waits its Timeout option's
60 s; the MCP Inspector waits 60 s, restarted by progress (its 1.x line: 60 s in all); the Gemini
CLI waits 10 min; VS Code waits as long as it takes; other hosts on the TypeScript SDK wait its
default 60 s, progress or not, unless they opted into resetting the timer on progress.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from ..settings.config import Config


@dataclass(frozen=True)
class Profile:
    """What a client host takes: its name and tool caps, its budgets, schema strictness, its deadline."""

    name: str
    name_max: int = 48  # hosts prefix the server name (mcp__colabhive__…) and cap the total at 64
    max_tools: int = 0  # 0: list them all
    max_image_bytes: int = 1_048_576  # Claude Desktop refuses larger images
    max_text_chars: int = 100_000
    strict_schemas: bool = False  # no $ref/$defs/$schema, no root anyOf
    drop_arguments: tuple[str, ...] = ("toolCallId",)  # keys hosts inject that no schema asked for
    deadline: float = 60.0  # seconds the host waits for one call, whatever it hears (0: no known limit)
    progress_timer: float = 0.0  # the host's timer that each progress notification restarts (0: none)


# (substrings of a lowercased clientInfo.name, profile); first match wins
KNOWN: tuple[tuple[tuple[str, ...], Profile], ...] = (
    (("claude-code",), Profile("claude-code", deadline=350, progress_timer=300)),
    (("claude",), Profile("claude-desktop", deadline=240)),
    (("cursor",), Profile("cursor", name_max=40, max_tools=40, strict_schemas=True, deadline=300)),
    (("visual studio code", "vscode", "copilot"),
     Profile("vscode", name_max=64, max_tools=128, strict_schemas=True, deadline=0)),
    (("gemini",), Profile("gemini", strict_schemas=True, deadline=600)),
    (("n8n",), Profile("n8n", name_max=64)),
    (("inspector",), Profile("inspector", name_max=64, max_image_bytes=10_485_760, progress_timer=60)),
)
UNKNOWN = Profile("unknown")  # hosts on the TypeScript SDK: 60 s unless they reset on progress
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
    deadline = dict(config.host_deadlines).get(profile.name, config.host_deadline)
    if deadline is not None:
        overrides["deadline"] = deadline
    return replace(profile, **overrides)


def listing_shape(profile: Profile) -> tuple[int, int, bool]:
    """What of a profile changes ``tools/list``: the name cap, the tool count, schema strictness."""
    return profile.name_max, profile.max_tools, profile.strict_schemas


def lists_differently(profile: Profile, config: Config) -> bool:
    """Whether this client's ``tools/list`` is a variant of what an unknown client is shown."""
    return listing_shape(profile) != listing_shape(for_client(None, config))


@lru_cache(maxsize=16)
def lists_by_client(config: Config) -> bool:
    """Whether ``tools/list`` depends on who asks: some known host is shown a variant (``client_profile``
    is ``auto`` and the overrides leave the profiles' shapes apart)."""
    return any(lists_differently(for_client({"name": needles[0]}, config), config) for needles, _ in KNOWN)


def wait_budget(profile: Profile, progress: bool) -> float | None:
    """How long a call may wait for its result before it must answer (with a continuation if need
    be), so that it answers shortly before its host gives up; ``None``: the host sets no limit.
    ``progress``: the call reports progress (without it, a progress timer is a plain deadline)."""
    limits = [limit for limit in (profile.deadline, 0 if progress else profile.progress_timer) if limit]
    if not limits:
        return None
    cutoff = min(limits)
    return cutoff - min(10.0, max(0.15 * cutoff, min(3.0, 0.25 * cutoff)))


def heartbeat(profile: Profile, progress: bool, configured: float) -> float:
    """Seconds between progress notifications: under the host's progress timer, when it has one."""
    return min(configured, profile.progress_timer / 3) if progress and profile.progress_timer else configured
