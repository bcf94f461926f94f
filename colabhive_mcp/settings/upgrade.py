"""What colabhive-mcp 0.3.4 called things, so that its users' settings keep working after the upgrade.

Renamed settings are aliases in the settings table (:mod:`colabhive_mcp.settings.config`). Here: where 0.3.4
kept its configuration files, how they were laid out, and the names that have no equivalent any
more, which are refused at start with what to do instead (never silently ignored).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

RETIRED = {
    "host": 'set bind = "HOST:PORT" (--bind, COLABHIVE_BIND) instead',
    "port": 'set bind = "HOST:PORT" (--bind, COLABHIVE_BIND) instead',
    "sse_path": "the endpoint is /mcp (and /sse for 2024-11-05 clients); map another path to it in nginx",
    # (a setting of the 1.0 previews: a 2026 client's closed stream is its cancel, as its revision says)
    "hang_up_keeps_after": "a 2026 client's closed stream now always cancels its call, as its revision says; "
                           "remove it",
}
# 0.3.4's own control-plane tools (webhooks, cohorts), off by default there and absent here:
# "off" asks for what happens anyway; "on" cannot be honoured.
GATES = {"webhook_tools_enabled": "COLABHIVE_MCP_WEBHOOK_TOOLS_ENABLED",
         "allow_webhook_secret_tools": "COLABHIVE_ALLOW_WEBHOOK_SECRET_TOOLS",
         "cohort_tools_enabled": "COLABHIVE_MCP_COHORT_TOOLS_ENABLED"}
TRUE = ("1", "true", "yes", "on")

# 0.3.4's built-in tools, which called the platform's control plane beside the manifest: none is a
# tool here. A call of one of these names (that the manifest does not hold) gets what to do instead.
TOOLS_PAGE = "https://docs.colabhive.com/mcp/upgrading.html#built-in-tools-of-0-3-4"
_CONSOLE = "manage this in the ColabHive console"
_TRAINING = ("train in the ColabHive console; a model you register for inference is published in your manifest "
             "and is a tool here")
_MODELS = "your registered models are tools here, one each (`colabhive-mcp tools` lists them): call the model's tool"
_COHORTS = "0.3.4's experimental cohort tools have no equivalent here"
_WEBHOOKS = "manage webhooks in the ColabHive console"
RETIRED_TOOLS = {
    **dict.fromkeys(("get_effective_data_protection", "preflight_data_protection", "get_account_preferences",
                     "set_share_hive_opt_in", "get_memory_status"), _CONSOLE),
    **dict.fromkeys(("list_trainable_models", "get_model_schema", "list_datasets", "create_dataset",
                     "create_training_run", "list_training_runs", "get_training_run", "get_training_metrics",
                     "get_training_logs", "cancel_training_run", "register_for_inference"), _TRAINING),
    **dict.fromkeys(("list_models", "list_endpoints", "get_endpoint", "run_inference"), _MODELS),
    **dict.fromkeys(("cohort_capabilities", "plan_cohort", "run_cohort", "get_cohort", "explain_cohort",
                     "cancel_cohort"), _COHORTS),
    **dict.fromkeys(("list_webhook_endpoints", "get_webhook_endpoint", "create_webhook_endpoint",
                     "update_webhook_endpoint", "delete_webhook_endpoint", "rotate_webhook_secret",
                     "test_webhook_endpoint"), _WEBHOOKS),
}


def retired_tool(name: str) -> str | None:
    """What a call of one of 0.3.4's built-in tools is told (nothing was done), else ``None``."""
    advice = RETIRED_TOOLS.get(name)
    if advice is None:
        return None
    return (f"{name!r} was a built-in tool of colabhive-mcp 0.3.4 and is not a tool of this server (nothing was "
            f"done): {advice}. See {TOOLS_PAGE}")


def config_home(environ: Mapping[str, str]) -> Path | None:
    """``$XDG_CONFIG_HOME``, else ``~/.config`` (from ``environ``'s ``HOME``)."""
    if environ.get("XDG_CONFIG_HOME"):
        return Path(environ["XDG_CONFIG_HOME"])
    return Path(environ["HOME"]) / ".config" if environ.get("HOME") else None


def default_file(environ: Mapping[str, str]) -> str | None:
    """0.3.4 read ``~/.config/colabhive-mcp/config.toml`` without being asked: so do we, if it is there."""
    home = config_home(environ)
    path = home / "colabhive-mcp" / "config.toml" if home else None
    return str(path) if path is not None and path.is_file() else None


def profile_file(name: str, environ: Mapping[str, str] | None = None) -> str:
    """The file 0.3.4's ``--profile NAME`` read: ``~/.config/colabhive-mcp/profiles/NAME.toml``."""
    home = config_home(os.environ if environ is None else environ)
    if home is None or "/" in name or name.startswith("."):
        raise ValueError(f"no profile {name!r}: use --config FILE")
    return str(home / "colabhive-mcp" / "profiles" / f"{name}.toml")


def flatten(data: dict[str, Any], settings: set[str]) -> list[tuple[str, Any, str]]:
    """0.3.4 grouped settings in tables (``[filter]``, ``[transport]``): lift any table that is not
    itself a setting's value to the top level. Each entry is ``(key, value, where)``, ``where`` being
    how a message names its place (``'allow'``, ``'allow' in [filter]``): a key given twice stays twice."""
    flat: list[tuple[str, Any, str]] = []
    for key, value in data.items():
        if isinstance(value, dict) and key not in settings:
            flat.extend((inner, item, f"{inner!r} in [{key}]") for inner, item in value.items())
        else:
            flat.append((key, value, repr(key)))
    return flat


def retired(name: str, value: Any, source: str) -> str | None:
    """Why a 0.3.4 setting with no equivalent cannot be accepted, or ``None`` when it asks for nothing."""
    if name in GATES:
        if str(value).strip().lower() not in TRUE:
            return None
        return f"{name} from {source}: this server has no webhook or cohort tools (they were 0.3.4's own); remove it"
    return f"{name} from {source} is no longer a setting: {RETIRED[name]}"


def retired_environment(environ: Mapping[str, str]) -> list[str]:
    return [problem for name, env in GATES.items() if env in environ
            for problem in [retired(name, environ[env], "environment " + env)] if problem]
