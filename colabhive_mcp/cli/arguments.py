"""How the ``colabhive-mcp`` command line is read: its commands, their options, and the exit codes.

Every setting of :mod:`colabhive_mcp.settings.config` is a flag of the commands its scope reaches
(:data:`SCOPES`), and settings' flags may come before the command. A flag and its 0.3.4 spelling
that disagree stop the start; a setting given to a command outside its scope, or a 0.3.4 flag with
no equivalent, is refused saying what to do. A mistake is one line, never a usage dump.
"""

from __future__ import annotations

import argparse
import dataclasses
import signal
from typing import Any, Callable, Mapping, NoReturn

from .. import __version__
from ..settings import upgrade
from ..settings.config import SETTINGS, ConfigError
from ..settings.sources import show
from . import snippets

COMMANDS = ("stdio", "serve", "check", "tools", "call", "client-config", "config", "sandbox", "demo")
# 0.3.4's commands, kept working
OLD_COMMANDS = {"version": "--version", "test": "check", "sdk-stdio": "stdio", "sdk-serve": "serve"}
# 0.3.4's flags with no equivalent: refused with what to do instead
RETIRED_FLAGS = {f"--{name.replace('_', '-')}": name for name in (*upgrade.RETIRED, *upgrade.GATES)}
# the settings (by scope, config.SCOPES) each command takes as flags
SCOPES = {"stdio": ("all", "stdio"), "serve": ("all", "http"), "check": ("all",), "tools": ("all",),
          "call": ("all",), "config": ("all", "stdio", "http")}
OK, TOOL_FAILED, USAGE, NO_KEY, UNREACHABLE, KEY_REJECTED, NO_TOOLS = range(7)
INTERRUPTED = 128 + signal.SIGINT  # what a shell reports for a program ended by Ctrl-C
EXIT_CODES = {
    OK: "done",
    TOOL_FAILED: "call: the tool answered with an error (isError) or the server refused the call",
    USAGE: "the command line or the configuration is wrong (the line on stderr says what to do)",
    NO_KEY: "no API key",
    UNREACHABLE: "the gateway cannot be reached or did not give the tool list",
    KEY_REJECTED: "the gateway rejected the API key",
    NO_TOOLS: "the filters hide every action (check, tools), or call's tool is unknown or hidden",
    INTERRUPTED: "stopped by Ctrl-C (call: the call was cancelled, and the gateway asked to stop its work)",
}
FIELDS = {f.name: f for f in SETTINGS}


def _switch(f: dataclasses.Field) -> bool:
    return f.type in (bool, "bool", "bool | None")  # (None: decided by other settings)


def _spellings(f: dataclasses.Field) -> list[str]:
    """The setting's flags: today's name, then its 0.3.4 names."""
    return ["--" + name.replace("_", "-") for name in (f.name, *f.metadata["aliases"])]


# settings' flags, as they may come before the command
SWITCHES = {"--sandbox", *(flag for f in SETTINGS if _switch(f) for spelled in _spellings(f)
                           for flag in (spelled, "--no-" + spelled[2:]))}
VALUED = {"--config", "--config-path", "--profile",
          *(flag for f in SETTINGS if not _switch(f) for flag in _spellings(f))}


def command_first(argv: list[str]) -> list[str]:
    """``argv`` with its command first: settings' flags may come before it. With no command,
    ``colabhive-mcp [flags]`` is the stdio server (0.3.4's hosts put its flags straight after the
    program); 0.3.4's command names are today's; an unknown command is refused with the closest one."""
    at = 0
    while at < len(argv):
        flag, equals, _ = argv[at].partition("=")
        if flag in SWITCHES and not equals:
            at += 1
        elif flag in VALUED:
            at += 1 if equals else 2
        else:
            break
    if at >= len(argv) or argv[at].startswith("-"):
        return argv if argv[:1] in (["-h"], ["--help"], ["--version"]) else ["stdio", *argv]
    command = OLD_COMMANDS.get(argv[at], argv[at])
    if command not in (*COMMANDS, "--version"):
        import difflib

        close = difflib.get_close_matches(argv[at], [*COMMANDS, *OLD_COMMANDS], n=1)
        guess = f"; did you mean {close[0]}?" if close else ""
        Parser(prog="colabhive-mcp").exit(USAGE, f"colabhive-mcp: unknown command {argv[at]!r}{guess} "
                                                 f"(the commands: {', '.join(COMMANDS)})\n")
    return [command, *argv[:at], *argv[at + 1:]]


class Parser(argparse.ArgumentParser):
    """argparse with a mistake said in one line: the usage of sixty settings would bury it."""

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE, f"{self.prog}: {message} (`{self.prog} --help` lists the options)\n")


def build_parser(runners: Mapping[str, Callable[[argparse.Namespace], int]],
                 settings_of: str | None = None) -> argparse.ArgumentParser:
    """The parser; ``runners``: each command's function (``args.run``), by name. Every command's settings
    are flags of it, or with ``settings_of``, only that command's (the line names it: the others'
    sixty flags each are not made, which spares a start ten milliseconds)."""
    parser = Parser(prog="colabhive-mcp", description="ColabHive actions as MCP tools.",
                    epilog="Without a COMMAND: the stdio server, with the options of `colabhive-mcp stdio --help`. "
                           "Settings' flags may also come before the COMMAND.")
    parser.add_argument("--version", action="version", version=f"colabhive-mcp {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    exits = "exit codes:\n" + "\n".join(f"  {code}  {meaning}" for code, meaning in EXIT_CODES.items())

    def command(name: str, help: str, run: Any, usage: str = "%(prog)s [options]",
                **kwargs: Any) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help, description=help[0].upper() + help[1:] + ".", usage=usage,
                                  formatter_class=argparse.RawDescriptionHelpFormatter, **kwargs)
        sub.set_defaults(run=run, parser=sub)
        return sub

    def settings(sub: argparse.ArgumentParser, name: str) -> None:
        if settings_of in (None, name):
            _add_settings(sub, name)

    stdio = command("stdio", "serve MCP on stdin/stdout (the default)", runners["stdio"])
    settings(stdio, "stdio")

    serve = command("serve", "serve MCP over HTTP (hosted multi-tenant, or --single-tenant)", runners["serve"])
    serve.add_argument("--debug", action="store_true",
                       help="one process, Werkzeug's threaded server (breakpoint() works), instead of gunicorn")
    settings(serve, "serve")

    check = command("check", "why would the tools not show up? config, key, gateway, filters", runners["check"],
                    epilog=exits)
    settings(check, "check")

    tools = command("tools", "the tool list exactly as an agent sees it", runners["tools"], epilog=exits)
    tools.add_argument("--json", action="store_true", help="the MCP tool definitions as JSON")
    tools.add_argument("--client", default="colabhive-cli",
                       help="clientInfo.name to present (picks the profile; default: %(default)s)")
    settings(tools, "tools")

    call = command("call", "run one tool through the same code path as an agent", runners["call"],
                   usage="%(prog)s NAME [--args JSON] [options]", epilog=exits)
    call.add_argument("name", metavar="NAME", help="the tool's name, as `colabhive-mcp tools` lists it")
    call.add_argument("--args", default="{}", metavar="JSON",
                      help="the tool's arguments as a JSON object (default: %(default)s)")
    call.add_argument("--client", default="colabhive-cli",
                      help="clientInfo.name to present (picks the profile; default: %(default)s)")
    call.add_argument("--out", default=".", metavar="DIR",
                      help="an existing directory where images and audio are saved (default: the current one)")
    settings(call, "call")

    snippet = command("client-config", "the snippet to paste into an MCP client's configuration", snippets.run,
                      usage="%(prog)s CLIENT [--url URL | --sandbox] [--release]")
    snippets.add_arguments(snippet)

    config = command("config", "print the resolved configuration and where each value came from", runners["config"])
    config.add_argument("--show", action="store_true", help="print it (the default)")
    config.add_argument("--check", action="store_true", help="check it with the gateway instead (as `check` does)")
    settings(config, "config")

    sandbox = command("sandbox", "run the sandbox Builder Gateway (demo keys, no account)", runners["sandbox"])
    sandbox.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: %(default)s)")
    sandbox.add_argument("--port", type=int, default=8600, help="the port to listen on (default: %(default)s)")
    sandbox.add_argument("--cold-start", type=float, default=4.0, metavar="SECONDS",
                         help="how long the cold-summarizer model takes to load (default: %(default)s)")
    sandbox.add_argument("--page-size", type=int, default=8, metavar="N",
                         help="manifest entries per page (default: %(default)s)")
    sandbox.add_argument("--quiet", action="store_true", help="do not log each request")
    sandbox.add_argument("--conformance-tools", action="store_true",
                         help="also publish the tools the official MCP conformance suite calls (test_*)")

    command("demo", "watch an MCP session against the sandbox gateway", runners["demo"])
    return parser


def _add_settings(parser: argparse.ArgumentParser, command: str) -> None:
    """The settings of ``command``'s scope as flags; the others are refused, saying which command takes them."""
    parser.add_argument("--config", "--config-path", metavar="FILE",
                        help="TOML configuration file (default: $COLABHIVE_MCP_CONFIG, else "
                             "~/.config/colabhive-mcp/config.toml when it exists)")
    parser.add_argument("--profile", metavar="NAME", help="the file ~/.config/colabhive-mcp/profiles/NAME.toml "
                                                          "as the configuration file (as in 0.3.4)")
    parser.add_argument("--sandbox", action="store_true",
                        help="start the sandbox gateway in-process and use it with a demo key")
    group = parser.add_argument_group("settings (flag > environment > config file > default)")
    for f in SETTINGS:
        if f.metadata["scope"] not in SCOPES[command]:
            elsewhere = [c for c, scopes in SCOPES.items() if f.metadata["scope"] in scopes and c != "config"]
            flags = [flag for spelled in _spellings(f) for flag in (spelled, "--no-" + spelled[2:])[:1 + _switch(f)]]
            group.add_argument(*flags, action=_Elsewhere, nargs="?", help=argparse.SUPPRESS, dest=f"elsewhere_{f.name}",
                               const=elsewhere[0])
        elif _switch(f):
            group.add_argument(*_spellings(f), dest=f.name, action=_Switch, default=None, help=_help(f))
        else:
            group.add_argument(*_spellings(f), dest=f.name, action=_Value, default=None,
                               metavar=f.metadata["metavar"] or "N", help=_help(f))
    for flag, name in RETIRED_FLAGS.items():
        group.add_argument(flag, action=_Retired, nargs="?", help=argparse.SUPPRESS, dest=f"retired_{name}")


def _help(f: dataclasses.Field) -> str:
    shown = show(f.default)
    default = "" if f.default is None else f" (default: {'none' if shown == '(none)' else shown})"
    env = f" [${f.metadata['env']}]" if f.metadata["env"] else ""
    return (f.metadata["help"] + default + env).replace("%", "%%")


def _given(namespace: argparse.Namespace, name: str, flag: str, value: Any) -> None:
    """Note the flag that gave a setting its value: today's and 0.3.4's spelling of one setting that
    disagree are refused (one spelling given twice is argparse's: the last wins)."""
    given = vars(namespace).setdefault("given_flags", {})
    earlier = given.get(name)
    if earlier is not None and earlier[0] != flag and _parsed(name, earlier[1]) != _parsed(name, value):
        raise ConfigError(f"invalid configuration: {name}: flag {earlier[0]} and flag {flag} disagree; keep one")
    given[name] = (flag, value)


def _parsed(name: str, raw: Any) -> Any:
    try:
        return FIELDS[name].metadata["parse"](raw)
    except ValueError:
        return raw


class _Value(argparse.Action):
    """A setting's flag that takes a value."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        _given(namespace, self.dest, option_string or "", values)
        setattr(namespace, self.dest, values)


class _Switch(argparse.BooleanOptionalAction):
    """A boolean setting's flag, ``--name`` or ``--no-name``."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        flag = option_string or ""
        _given(namespace, self.dest, flag.replace("--no-", "--", 1), not flag.startswith("--no-"))
        super().__call__(parser, namespace, values, option_string)


class _Elsewhere(argparse.Action):
    """A setting of another command's scope (``const``): refused, saying where it goes."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        raise ConfigError(f"{option_string} is a setting of `colabhive-mcp {self.const}`; leave it out of "
                          f"`{parser.prog}`")


class _Retired(argparse.Action):
    """A 0.3.4 flag with no equivalent: refused, saying what to do instead."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        name = RETIRED_FLAGS[option_string or ""]
        problem = upgrade.retired(name, "true" if values is None else values, f"flag {option_string}")
        if problem:
            raise ConfigError(problem)
