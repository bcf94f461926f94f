"""Where settings come from, resolved once: flag > environment (or a systemd credential, for a
secret) > config file > default, each value checked by its setting's parser (:mod:`.config`), every
mistake named with its source; and the table ``colabhive-mcp config`` prints of them."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any, Mapping
from urllib.parse import urlsplit

from ..keys import ApiKey
from ..loopback import is_loopback
from . import upgrade
from .config import CONFIG_ENV, SETTINGS, Config, ConfigError

PREFIX = "COLABHIVE_"
NEAR = 2  # edits within which an unknown variable is taken for a mistyped setting's


@dataclass(frozen=True)
class Resolved:
    """A configuration together with where each value came from, and the environment's ``COLABHIVE_``
    variables that are no setting (nor near one: those stop the start)."""

    config: Config
    sources: Mapping[str, str]
    unknown: tuple[str, ...] = ()

    def unknown_warning(self) -> str | None:
        """One line naming the ``COLABHIVE_`` variables that are no setting (ignored), if any."""
        if not self.unknown:
            return None
        return (f"colabhive-mcp: warning: {', '.join(self.unknown)} {'is' if len(self.unknown) == 1 else 'are'} not "
                "a setting and is ignored (`colabhive-mcp config` lists the settings and their variables)")

    def describe(self) -> list[tuple[str, str, str]]:
        """(name, value, source) rows with secrets redacted, for humans."""
        rows = []
        for f in SETTINGS:
            value = getattr(self.config, f.name)
            if f.metadata["secret"] and value:
                shown = f"(set; sha256 {ApiKey.of(value).log_id})"  # no part of a secret
            else:
                shown = show(value)
            rows.append((f.name, shown, self.sources[f.name]))
        return rows


def show(value: Any) -> str:
    """A setting's value as ``colabhive-mcp config`` and the flags' help show it."""
    if isinstance(value, tuple):
        return ",".join(v if isinstance(v, str) else f"{v[0]}={v[1]:g}" for v in value) or "(none)"
    return "(unset)" if value is None else str(value)


def load(flags: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None,
         config_file: str | None = None) -> Resolved:
    """Resolve every setting from flags, the environment, systemd credentials (secrets only), a TOML
    file and defaults.

    ``flags`` maps field names to raw values (``None`` = not given). The file is ``config_file``,
    else ``$COLABHIVE_MCP_CONFIG``, else 0.3.4's ``~/.config/colabhive-mcp/config.toml`` when it
    exists; its keys are the field names (or their 0.3.4 aliases). Raises :class:`ConfigError`
    listing every invalid value at once.
    """
    flags = {k: v for k, v in (flags or {}).items() if v is not None}
    environ = os.environ if environ is None else environ
    path = config_file or environ.get(CONFIG_ENV) or upgrade.default_file(environ)
    problems: list[str] = upgrade.retired_environment(environ)
    unknown = _unknown_environment(environ, problems)
    file_values = _file_settings(path, problems) if path else {}
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for f in SETTINGS:
        found = _environment(f, environ, problems) or _credential(f, environ)
        if f.name in flags:
            raw, source = flags[f.name], "flag --" + f.name.replace("_", "-")
        elif found is not None:
            raw, source = found
        elif f.name in file_values:
            raw, source = file_values[f.name], f"config file {path}"
        else:
            values[f.name], sources[f.name] = f.default, "default"
            continue
        try:
            values[f.name] = f.metadata["parse"](raw)
            sources[f.name] = source
        except ValueError as exc:
            shown = "(secret)" if f.metadata["secret"] else repr(raw)
            problems.append(f"{f.name} = {shown} from {source}: {exc}")
    if not values.get("allow_http_gateway") and _remote_http(values.get("api_url", "")):
        problems.append(f"api_url = {values['api_url']!r} from {sources['api_url']}: a plain http:// gateway that is "
                        "not on this machine would see the key in clear; use https, or set allow_http_gateway")
    pin = values.get("manifest_pin")
    if pin and os.path.isfile(pin):  # 0.3.4 took a snapshot file here too
        problems.append(f"manifest_pin = {pin!r} from {sources['manifest_pin']} is a file: manifest_pin is an "
                        "ETag now; serve a snapshot with manifest_snapshot = PATH")
    if problems:
        raise ConfigError("invalid configuration: " + (problems[0] if len(problems) == 1 else
                                                       "\n  " + "\n  ".join(problems)))
    return Resolved(Config(**values), sources, unknown)


def known_variables() -> frozenset[str]:
    """Every environment variable this program reads that starts with ``COLABHIVE_``: the settings', their
    0.3.4 aliases', the config file's, and 0.3.4's retired switches (refused when they ask for something)."""
    names = {f.metadata["env"] for f in SETTINGS if f.metadata["env"]}
    names |= {PREFIX + alias.upper() for f in SETTINGS for alias in f.metadata["aliases"]}
    return frozenset(names | {CONFIG_ENV} | set(upgrade.GATES.values()))


def _unknown_environment(environ: Mapping[str, str], problems: list[str]) -> tuple[str, ...]:
    """The ``COLABHIVE_`` variables (in any case) that are no setting: each near a setting's is a
    problem naming it (it would be silently lost), the others are returned."""
    known = known_variables()
    unknown = []
    for name in sorted(environ):
        if not name.upper().startswith(PREFIX) or name in known:
            continue
        meant = _nearest(name.upper(), known)
        if meant is None:
            unknown.append(name)
        else:
            problems.append(f"environment {name} is not a setting: did you mean {meant}?")
    return tuple(unknown)


def _nearest(name: str, known: frozenset[str]) -> str | None:
    """The known name ``name`` is a slip of (within :data:`NEAR` edits)."""
    distances = sorted((_edits(name, other), other) for other in known)
    return distances[0][1] if distances and distances[0][0] <= NEAR else None


def _edits(a: str, b: str) -> int:
    """Levenshtein distance: insertions, deletions and substitutions that turn ``a`` into ``b``."""
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        current = [i]
        for j, y in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
        previous = current
    return previous[-1]


def _remote_http(address: str) -> bool:
    parts = urlsplit(address)
    return parts.scheme == "http" and not is_loopback(parts.hostname)


def _environment(f: dataclasses.Field, environ: Mapping[str, str], problems: list[str]) -> tuple[str, str] | None:
    """The setting's raw value and source from its variable or a 0.3.4 alias of it; two that disagree
    are a problem."""
    names = [f.metadata["env"]] if f.metadata["env"] else []
    names += [f"COLABHIVE_{alias.upper()}" for alias in f.metadata["aliases"]]
    given = [(environ[name], "environment " + name) for name in names if environ.get(name, "") != ""]
    if len({raw for raw, _ in given}) > 1:
        problems.append(f"{f.name}: {' and '.join(source for _, source in given)} disagree; keep one")
    return given[0] if given else None


def _credential(f: dataclasses.Field, environ: Mapping[str, str]) -> tuple[str, str] | None:
    """A secret setting from systemd's ``LoadCredential=`` (``session-secret`` in ``$CREDENTIALS_DIRECTORY``)."""
    directory = environ.get("CREDENTIALS_DIRECTORY")
    if not (f.metadata["secret"] and directory):
        return None
    name = f.name.replace("_", "-")
    try:
        with open(os.path.join(directory, name), encoding="utf-8") as fh:
            return fh.read().strip(), "credential " + name
    except OSError:
        return None


def _file_settings(path: str, problems: list[str]) -> dict[str, Any]:
    """The file's settings by field name: 0.3.4's tables lifted, its names mapped to today's."""
    known = {f.name for f in SETTINGS}
    aliases = {alias: f.name for f in SETTINGS for alias in f.metadata["aliases"]}
    values: dict[str, Any] = {}
    spelled: dict[str, str] = {}  # field name -> where its value came from (the key, and its table)
    for key, value, where in upgrade.flatten(_read_file(path), known):
        name = aliases.get(key, key)
        if key in upgrade.RETIRED or key in upgrade.GATES:
            problem = upgrade.retired(key, value, f"config file {path}")
            if problem:
                problems.append(problem)
        elif name not in known:
            meant = _nearest(key, frozenset(known))
            problems.append(f"{path}: unknown setting {key!r}" + (f": did you mean {meant!r}?" if meant else ""))
        elif name in values and values[name] != value:
            problems.append(f"{path}: {spelled[name]} and {where} are the same setting ({name}) with different "
                            "values; keep one")
        else:
            values[name], spelled[name] = value, where
    return values


def _read_file(path: str) -> dict[str, Any]:
    import tomllib  # only when there is a file: stdio answers initialize sooner without it

    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    return data.get("colabhive", data)
