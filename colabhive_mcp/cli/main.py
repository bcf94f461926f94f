"""The ``colabhive-mcp`` command line.

``colabhive-mcp`` with no subcommand runs the stdio server (what MCP hosts launch).
Every setting of :mod:`colabhive_mcp.config` is also a flag of the server commands.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path
from typing import Any, Iterator, Sequence

from .. import __version__, logs, tracing, upgrade
from ..config import SETTINGS, Config, ConfigError, Resolved, load

CLIENTS = ("claude-desktop", "cursor", "claude-code", "n8n", "vscode")
COMMANDS = ("stdio", "serve", "check", "tools", "call", "client-config", "config", "sandbox", "demo")
# 0.3.4's commands, kept working
OLD_COMMANDS = {"version": "--version", "test": "check", "sdk-stdio": "stdio", "sdk-serve": "serve"}
# 0.3.4's flags with no equivalent: refused with what to do instead
RETIRED_FLAGS = {f"--{name.replace('_', '-')}": name for name in (*upgrade.RETIRED, *upgrade.GATES)}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in OLD_COMMANDS:
        argv[0] = OLD_COMMANDS[argv[0]]
    if not argv or (argv[0] not in COMMANDS and argv[0] not in ("-h", "--help", "--version")):
        argv.insert(0, "stdio")  # `colabhive-mcp [flags]` is the stdio server
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except ConfigError as exc:
        print(f"colabhive-mcp: {exc}", file=sys.stderr)
        return 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="colabhive-mcp", description="ColabHive actions as MCP tools.")
    parser.add_argument("--version", action="version", version=f"colabhive-mcp {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    stdio = commands.add_parser("stdio", help="serve MCP on stdin/stdout (the default)")
    _add_settings(stdio)
    stdio.set_defaults(run=run_stdio)

    serve = commands.add_parser("serve", help="serve MCP over HTTP (hosted multi-tenant, or --single-tenant)")
    serve.add_argument("--debug", action="store_true",
                       help="one process, Werkzeug's threaded server (breakpoint() works), instead of gunicorn")
    _add_settings(serve)
    serve.set_defaults(run=run_serve)

    check = commands.add_parser("check", help="why would the tools not show up? config, key, gateway, filters")
    _add_settings(check)
    check.set_defaults(run=run_check)

    tools = commands.add_parser("tools", help="the tool list exactly as an agent sees it")
    tools.add_argument("--json", action="store_true", help="the MCP tool definitions as JSON")
    tools.add_argument("--client", default="colabhive-cli", help="clientInfo.name to present (picks the profile)")
    _add_settings(tools)
    tools.set_defaults(run=run_tools)

    call = commands.add_parser("call", help="run one tool through the same code path as an agent")
    call.add_argument("name")
    call.add_argument("--args", default="{}", metavar="JSON", help="the tool's arguments as a JSON object")
    call.add_argument("--client", default="colabhive-cli", help="clientInfo.name to present (picks the profile)")
    call.add_argument("--out", default=".", metavar="DIR", help="where images and audio are saved")
    _add_settings(call)
    call.set_defaults(run=run_call)

    snippet = commands.add_parser("client-config", help="the snippet to paste into an MCP client's configuration")
    snippet.add_argument("client", choices=CLIENTS)
    snippet.add_argument("--url", help="the hosted service's MCP URL (default: the local stdio server)")
    snippet.set_defaults(run=run_client_config)

    config = commands.add_parser("config", help="print the resolved configuration and where each value came from")
    config.add_argument("--show", action="store_true", help="print it (the default)")
    config.add_argument("--check", action="store_true", help="check it with the gateway instead (as `check` does)")
    _add_settings(config)
    config.set_defaults(run=run_config)

    sandbox = commands.add_parser("sandbox", help="run the sandbox Builder Gateway (demo keys, no account)")
    sandbox.add_argument("--host", default="127.0.0.1")
    sandbox.add_argument("--port", type=int, default=8600)
    sandbox.add_argument("--cold-start", type=float, default=4.0, metavar="SECONDS",
                         help="how long the cold-summarizer model takes to load")
    sandbox.add_argument("--page-size", type=int, default=8, metavar="N", help="manifest entries per page")
    sandbox.add_argument("--quiet", action="store_true", help="do not log each request")
    sandbox.add_argument("--conformance-tools", action="store_true",
                         help="also publish the tools the official MCP conformance suite calls (test_*)")
    sandbox.set_defaults(run=run_sandbox)

    demo = commands.add_parser("demo", help="watch an MCP session against the sandbox gateway")
    demo.set_defaults(run=run_demo)
    return parser


def _add_settings(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", "--config-path", metavar="FILE",
                        help="TOML configuration file (default: $COLABHIVE_MCP_CONFIG, else "
                             "~/.config/colabhive-mcp/config.toml when it exists)")
    parser.add_argument("--profile", metavar="NAME", help="the file ~/.config/colabhive-mcp/profiles/NAME.toml "
                                                          "as the configuration file (as in 0.3.4)")
    parser.add_argument("--sandbox", action="store_true",
                        help="start the sandbox gateway in-process and use it with a demo key")
    group = parser.add_argument_group("settings (flag > environment > config file > default)")
    for f in SETTINGS:
        flags = ["--" + name.replace("_", "-") for name in (f.name, *f.metadata["aliases"])]
        env = f" [${f.metadata['env']}]" if f.metadata["env"] else ""
        if f.type in (bool, "bool"):
            group.add_argument(*flags, dest=f.name, action=argparse.BooleanOptionalAction, default=None,
                               help=f.metadata["help"] + env)
        else:
            group.add_argument(*flags, dest=f.name, default=None, metavar=f.metadata["metavar"] or "N",
                               help=f.metadata["help"] + env)
    for flag, name in RETIRED_FLAGS.items():
        group.add_argument(flag, action=_Retired, nargs="?", help=argparse.SUPPRESS, dest=f"retired_{name}")


class _Retired(argparse.Action):
    """A 0.3.4 flag with no equivalent: refused, saying what to do instead."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        name = RETIRED_FLAGS[option_string or ""]
        problem = upgrade.retired(name, "true" if values is None else values, f"flag {option_string}")
        if problem:
            parser.error(problem)


def resolve(args: argparse.Namespace) -> Resolved:
    config_file = args.config
    if args.profile:
        try:
            config_file = upgrade.profile_file(args.profile)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    return load({f.name: getattr(args, f.name) for f in SETTINGS}, config_file=config_file)


@contextlib.contextmanager
def gateway_config(args: argparse.Namespace, *, demo_key: bool) -> Iterator[Config]:
    """The configuration to serve with; with ``--sandbox``, pointed at an in-process sandbox
    (and, when ``demo_key``, using its first demo key)."""
    resolved = resolve(args)
    config = resolved.config
    try:
        logs.configure(config.log_level, config.log_format, file=config.log_file)
    except OSError as exc:
        raise ConfigError(f"log_file {config.log_file!r}: {exc.strerror}") from None
    if not args.sandbox:
        yield config
        return
    from ..sandbox import DEMO_KEY, Sandbox

    with Sandbox() as sandbox:
        logs.log.bind(url=sandbox.url).info("sandbox.started")
        yield config.replace(api_url=sandbox.url, api_key=DEMO_KEY if demo_key else config.api_key)


def run_stdio(args: argparse.Namespace) -> int:
    from ..protocol import Server
    from ..tenant import Tenant
    from ..transports import stdio

    with gateway_config(args, demo_key=True) as config:
        if not config.api_key:
            raise ConfigError("no API key: set COLABHIVE_API_KEY (or pass --sandbox to try the sandbox gateway)")
        tenant = Tenant(config, config.api_key)
        tracing.configure()
        logs.log.bind(gateway=config.api_url, tenant=tenant.key_id).info("stdio.ready")
        stdio.serve(Server(config, list_changed=True), tenant, max_message_bytes=config.max_message_bytes, workers=config.workers)
    return 0


def run_serve(args: argparse.Namespace) -> int:
    from ..transports.http import hosting

    hosting.prepare_metrics_dir()  # before anything imports prometheus_client
    from ..transports.http.app import check_config

    if args.sandbox and not _loopback(resolve(args).config.bind.rpartition(":")[0]):
        raise ConfigError("the sandbox serves demo keys to anyone: bind serve --sandbox to loopback (127.0.0.1)")
    with gateway_config(args, demo_key=bool(args.single_tenant)) as config:
        if args.debug or args.sandbox or config.single_tenant:
            config = hosting.made_up_secret(config)
        check_config(config)
        logs.log.bind(bind=config.bind, gateway=config.api_url, single_tenant=config.single_tenant,
                      workers=1 if args.debug else config.http_workers).info("http.starting")
        (hosting.run_debug if args.debug else hosting.run_gunicorn)(config)
    return 0


def run_check(args: argparse.Namespace) -> int:
    from . import commands

    with gateway_config(args, demo_key=True) as config:
        return commands.check(config)


def run_tools(args: argparse.Namespace) -> int:
    from . import commands

    with gateway_config(args, demo_key=True) as config:
        return commands.tools(config, args.client, args.json)


def run_call(args: argparse.Namespace) -> int:
    try:
        arguments = json.loads(args.args)
    except ValueError as exc:
        raise ConfigError(f"--args is not JSON: {exc}") from None
    if not isinstance(arguments, dict):
        raise ConfigError("--args must be a JSON object")
    from . import commands

    with gateway_config(args, demo_key=True) as config:
        return commands.call(config, args.name, arguments, args.client, Path(args.out))


def run_client_config(args: argparse.Namespace) -> int:
    from . import commands

    return commands.client_config(args.client, args.url)


def run_config(args: argparse.Namespace) -> int:
    if args.check:
        return run_check(args)
    resolved = resolve(args)
    rows = resolved.describe()
    width = max(len(name) for name, _, _ in rows)
    for name, value, source in rows:
        print(f"{name:<{width}}  {value}  [{source}]")
    return 0


def run_sandbox(args: argparse.Namespace) -> int:
    from ..sandbox import serve

    if not _loopback(args.host):
        raise ConfigError(f"the sandbox accepts demo keys from anyone: bind it to loopback, not {args.host}")
    serve(host=args.host, port=args.port, quiet=args.quiet, cold_start_s=args.cold_start, page_size=args.page_size,
          conformance_tools=args.conformance_tools)
    return 0


def _loopback(host: str) -> bool:
    return host.strip("[]").lower() in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")


def run_demo(_args: argparse.Namespace) -> int:
    from .demo import main as demo

    return demo()
