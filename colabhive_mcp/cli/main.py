"""The ``colabhive-mcp`` command line: what each command does (:mod:`.arguments` reads the line).

``colabhive-mcp`` with no command runs the stdio server (what MCP hosts launch). A mistake is one
line on stderr, and the exit code says which kind, the same in every command
(:data:`.arguments.EXIT_CODES`).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import signal
import socket
import sys
from pathlib import Path
from typing import ContextManager, Iterator, Sequence

from .. import logs, tracing
from ..keys import ApiKey, mistake, well_formed
from ..settings import upgrade
from ..settings.config import SETTINGS, Config, ConfigError
from ..settings.sources import Resolved, load
from .arguments import INTERRUPTED, NO_KEY, OK, USAGE, build_parser, command_first


def main(argv: Sequence[str] | None = None) -> int:
    line = command_first(list(sys.argv[1:] if argv is None else argv))
    try:
        args, unknown = command_line(line[0]).parse_known_args(line)
        if unknown:
            args.parser.error(f"unrecognized arguments: {' '.join(unknown)}")  # the command's help lists its own
        return args.run(args)
    except ConfigError as exc:
        print(f"colabhive-mcp: {exc}", file=sys.stderr)
        return USAGE
    except KeyboardInterrupt:  # Ctrl-C: one line, no traceback (and no second one while the process ends)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        print("\ncolabhive-mcp: stopped (Ctrl-C)", file=sys.stderr)
        return INTERRUPTED


def resolve(args: argparse.Namespace) -> Resolved:
    config_file = args.config
    if args.profile:
        try:
            config_file = upgrade.profile_file(args.profile)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    return load({f.name: getattr(args, f.name, None) for f in SETTINGS}, config_file=config_file)


def configured(args: argparse.Namespace, *, quiet: bool = False) -> Resolved:
    """The resolved configuration, with the logs set up as it says. ``quiet``: at warning, as text,
    unless a level or a format was asked for (check, tools and call print for a person: info records,
    or JSON ones, would break it up)."""
    resolved = resolve(args)
    warn_unknown(resolved)
    config = resolved.config
    level = "warning" if quiet and resolved.sources["log_level"] == "default" else config.log_level
    fmt = "text" if quiet and resolved.sources["log_format"] == "default" else config.log_format  # (for a person)
    try:
        logs.configure(level, fmt, file=config.log_file)
    except OSError as exc:
        raise ConfigError(f"log_file {config.log_file!r}: {exc.strerror}") from None
    return resolved


def warn_unknown(resolved: Resolved) -> None:
    """Say which ``COLABHIVE_`` variables are no setting (one line on stderr; near misses stopped the start)."""
    warning = resolved.unknown_warning()
    if warning:
        print(warning, file=sys.stderr)


@contextlib.contextmanager
def gateway(resolved: Resolved, sandbox: bool, *, uses_key: bool) -> Iterator[Config]:
    """The configuration to serve with; with ``sandbox``, pointed at an in-process sandbox gateway
    (and, when the command ``uses_key``, with its demo key). A configured key that is not shaped like
    ColabHive's gets a warning: a typo, or another service's key (not refused: a gateway of one's
    own may issue other keys)."""
    config = resolved.config
    if not sandbox:
        key = config.api_key
        slip = mistake(key) if uses_key and key else None
        if slip:
            print(f"colabhive-mcp: warning: the API key from {resolved.sources['api_key']}: {slip}", file=sys.stderr)
        elif uses_key and key and not (key.startswith("hive_") and well_formed(key)):
            print(f"colabhive-mcp: warning: the API key from {resolved.sources['api_key']} does not look like a "
                  "ColabHive key (hive_ then letters and digits); if the gateway rejects it, check it", file=sys.stderr)
        yield config
        return
    from ..sandbox import DEMO_KEY, Sandbox

    with Sandbox() as sandbox_gateway:
        logs.log.bind(url=sandbox_gateway.url).info("sandbox.started")
        yield config.replace(api_url=sandbox_gateway.url, api_key=DEMO_KEY if uses_key else config.api_key)


def gateway_config(args: argparse.Namespace, *, quiet: bool) -> ContextManager[Config]:
    """The configuration of a command that reaches the gateway with the configured key (the
    sandbox's demo key with ``--sandbox``)."""
    return gateway(configured(args, quiet=quiet), args.sandbox, uses_key=True)


def run_stdio(args: argparse.Namespace) -> int:
    from .. import metrics
    from ..manifest.saved import SavedManifest
    from ..protocol import Server
    from ..tenants.shared import Instance
    from ..tenants.tenant import Tenant
    from ..transports import stdio

    with gateway_config(args, quiet=False) as config:
        if not config.api_key:  # the exit code every command gives for it
            print("colabhive-mcp: no API key: set COLABHIVE_API_KEY (or pass --sandbox to try the sandbox gateway)",
                  file=sys.stderr)
            return NO_KEY
        metrics.unread()  # nothing serves them here
        key = ApiKey.of(config.api_key)
        tenant = Tenant(config, key, Instance.local(config, os.environ),
                        saved=None if args.sandbox else SavedManifest.of(config, key))
        tracing.configure()
        logs.log.bind(gateway=config.api_url, tenant=tenant.key_id).info("stdio.ready")
        stdio.serve(Server(config, list_changed=True), tenant, max_message_bytes=config.max_message_bytes, workers=config.workers)
    return OK


def run_serve(args: argparse.Namespace) -> int:
    """Resolve and check everything, the address included, before gunicorn starts: a mistake is one
    line, not a worker's traceback and a master that retries."""
    from ..transports.http import hosting

    resolved = configured(args)
    hosting.prepare_metrics_dir()  # before anything imports prometheus_client
    from ..transports.http.app import check_config, warn_about

    if args.sandbox and not _loopback(resolved.config.bind.rpartition(":")[0]):
        raise ConfigError("the sandbox serves demo keys to anyone: bind serve --sandbox to loopback (127.0.0.1)")
    _check_free(resolved.config.bind)  # before a sandbox starts or a secret is made up: their lines would come first
    with gateway(resolved, args.sandbox, uses_key=resolved.config.single_tenant) as config:
        if args.debug or args.sandbox or config.single_tenant:
            config = hosting.made_up_secret(config)
        check_config(config)
        warn_about(config)
        if args.sandbox:
            _show_sandbox(config)
        logs.log.bind(bind=config.bind, gateway=config.api_url, single_tenant=config.single_tenant,
                      workers=1 if args.debug else config.http_workers).info("http.starting")
        (hosting.run_debug if args.debug else hosting.run_gunicorn)(config)
    return OK


def _check_free(bind: str, instead: str = "--bind {host}:PORT") -> None:
    """Refuse an address something else listens on (gunicorn would retry for five seconds, two lines
    a second, then stop; Werkzeug would print its own text): bind it as they do (IPv6 when the host has
    a colon), then let it go. ``instead``: what to pass instead, said in the refusal."""
    host, _, port = bind.rpartition(":")
    address = host.strip("[]")
    try:
        with socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((address, int(port)))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(f"{bind} is in use; pass {instead.format(host=host)}") from None
        raise ConfigError(f"cannot listen on {bind}: {exc.strerror}") from None


def _show_sandbox(config: Config) -> None:
    """``serve --sandbox``: where to point a client, and with which key (plain lines: the logs may be JSON)."""
    from ..sandbox import DEMO_KEY

    print(f"colabhive-mcp: the sandbox's tools are at http://{config.bind}/mcp", file=sys.stderr)
    print(f"colabhive-mcp: no key needed (single-tenant: the server uses the demo key {DEMO_KEY})"
          if config.single_tenant else f"colabhive-mcp: send the demo key: Authorization: Bearer {DEMO_KEY}",
          file=sys.stderr)


def run_check(args: argparse.Namespace) -> int:
    from . import commands

    with gateway_config(args, quiet=True) as config:
        return commands.check(config)


def run_tools(args: argparse.Namespace) -> int:
    from . import commands

    with gateway_config(args, quiet=True) as config:
        return commands.tools(config, args.client, args.json)


def run_call(args: argparse.Namespace) -> int:
    try:
        arguments = json.loads(args.args)
    except ValueError as exc:
        raise ConfigError(f"--args is not JSON: {exc}") from None
    if not isinstance(arguments, dict):
        raise ConfigError("--args must be a JSON object")
    out = Path(args.out)  # checked before the call: a tool's run may cost, or change something
    if not out.is_dir():
        raise ConfigError(f"--out {args.out} is not a directory: make it first (nothing was called)")
    if not os.access(out, os.W_OK):
        raise ConfigError(f"--out {args.out} is not writable (nothing was called)")
    from . import commands

    with gateway_config(args, quiet=True) as config:
        return commands.call(config, args.name, arguments, args.client, out)


def run_config(args: argparse.Namespace) -> int:
    if args.check:
        return run_check(args)
    resolved = resolve(args)
    rows = resolved.describe()
    width = max(len(name) for name, _, _ in rows)
    for name, value, source in rows:
        print(f"{name:<{width}}  {value}  [{source}]")
    if resolved.unknown:
        print(f"\nnot settings, ignored: {', '.join(resolved.unknown)}")
    return OK


def run_sandbox(args: argparse.Namespace) -> int:
    from ..sandbox import serve

    if not _loopback(args.host):
        raise ConfigError(f"the sandbox accepts demo keys from anyone: bind it to loopback, not {args.host}")
    _check_free(f"{args.host}:{args.port}", "--port PORT")
    serve(host=args.host, port=args.port, quiet=args.quiet, cold_start_s=args.cold_start, page_size=args.page_size,
          conformance_tools=args.conformance_tools)
    return OK


def _loopback(host: str) -> bool:
    return host.strip("[]").lower() in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")


def run_demo(_args: argparse.Namespace) -> int:
    from .demo import main as demo

    return demo()


def command_line(command: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser, with this module's commands (and, given a ``command``, its settings only)."""
    return build_parser({"stdio": run_stdio, "serve": run_serve, "check": run_check, "tools": run_tools,
                         "call": run_call, "config": run_config, "sandbox": run_sandbox, "demo": run_demo}, command)
