"""Setting values: text from a flag or a variable, or a TOML value, in; a typed value out.

Each parser raises ``ValueError`` with a short reason, which :func:`colabhive_mcp.settings.sources.load`
reports with the setting's name and where the value came from.
"""

from __future__ import annotations

from typing import Any, Callable
from urllib.parse import urlsplit

from ..loopback import is_loopback

API_PREFIX = "/api/builder/v1"


def text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("expected a string")
    return value.strip()


def number(kind: type, low: float, high: float) -> Callable[[Any], Any]:
    def parse(value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError("expected a number")
        try:
            number = kind(float(value)) if kind is int and float(value).is_integer() else kind(value)
        except (TypeError, ValueError, OverflowError):
            raise ValueError(f"expected {'a whole number' if kind is int else 'a number'}") from None
        if not low <= number <= high:
            raise ValueError(f"must be between {low:g} and {high:g}")
        return number

    return parse


def boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    given = str(value).strip().lower()
    if given in ("1", "true", "yes", "on"):
        return True
    if given in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected true or false")


def words(value: Any) -> tuple[str, ...]:
    """A list: comma-separated text, or a TOML array of strings."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not all(isinstance(i, str) for i in items):
        raise ValueError("expected a comma-separated list")
    return tuple(i.strip() for i in items if i.strip())


def seconds_by_name(low: float, names: tuple[str, ...] = ()) -> Callable[[Any], tuple[tuple[str, float], ...]]:
    """``NAME=SECONDS`` pairs, e.g. ``slow=900,batch=3600`` (text or a TOML table); ``names``: the
    names allowed (any, when empty)."""
    return by_name(float, low, 86400, "SECONDS", "slow=900,batch=3600", names)


def by_name(kind: type, low: float, high: float, unit: str, example: str,
            names: tuple[str, ...] = ()) -> Callable[[Any], tuple[tuple[str, Any], ...]]:
    """``NAME=NUMBER`` pairs of ``kind`` from ``low`` to ``high`` (text or a TOML table), as ``example``
    shows them; ``names``: the names allowed (any, when empty)."""
    def parse(value: Any) -> tuple[tuple[str, Any], ...]:
        pairs = value.items() if isinstance(value, dict) else [p.split("=", 1) for p in words(value)]
        try:
            parsed = tuple((str(k).strip(), kind(v)) for k, v in pairs)
        except (TypeError, ValueError):
            raise ValueError(f"expected NAME={unit} pairs, e.g. {example}") from None
        if any(not k or not low <= v <= high for k, v in parsed):
            raise ValueError(f"each NAME={unit} needs a name and {low:g} to {high:g}")
        unknown = [k for k, _ in parsed if names and k not in names]
        if unknown:
            raise ValueError(f"unknown {', '.join(unknown)}: use {', '.join(names)}")
        return parsed

    return parse


def choice(*options: str) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        given = text(value).lower()
        if given not in options:
            raise ValueError(f"must be one of {', '.join(options)}")
        return given

    return parse


def address(value: Any) -> str:
    """An http(s) URL with no query or fragment."""
    given = text(value).rstrip("/")
    parts = urlsplit(given)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError("expected an http(s) URL such as https://api.colabhive.com")
    if parts.query or parts.fragment:
        raise ValueError("must not carry a query or fragment")
    return given


def url(value: Any) -> str:
    """The gateway's base URL: the Builder Gateway's prefix is added to a bare host."""
    given = address(value)
    return given if urlsplit(given).path not in ("", "/") else given + API_PREFIX


def public_address(value: Any) -> str:
    """The public URL of ``/mcp``: https (or http to this machine, for tests), ending in ``/mcp``."""
    given = address(value)
    parts = urlsplit(given)
    if parts.path != "/mcp":
        raise ValueError("must end in /mcp (the server's endpoint), e.g. https://mcp.colabhive.com/mcp")
    if parts.scheme != "https" and not is_loopback(parts.hostname):
        raise ValueError("must be https (plain http only on this machine, for tests)")
    return given


def bind(value: Any) -> str:
    host, sep, port = text(value).rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError("expected HOST:PORT, e.g. 127.0.0.1:8765")
    return f"{host}:{port}"


def secret(value: Any) -> str:
    given = text(value)
    if len(given) < 32:
        raise ValueError("must be at least 32 characters (e.g. 64 hex digits)")
    return given
