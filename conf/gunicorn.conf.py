# gunicorn -c conf/gunicorn.conf.py 'colabhive_mcp.transports.http:create_app()'
#
# The settings come from colabhive_mcp.transports.http.hosting (the same ones `colabhive-mcp serve`
# uses), which reads the COLABHIVE_* environment (see conf/colabhive-mcp.env.example). This file runs once in
# the gunicorn master, before the workers fork: the configuration is resolved and checked here, so that a
# mistake is one line and exit status 2 (not a traceback in every worker, then a master that gives up), and
# the runtime directory prepared here (the instance store, the cancel relay) is shared by every worker of
# this instance. Hosted mode needs COLABHIVE_SESSION_SECRET.
import sys

from colabhive_mcp.logs import configure
from colabhive_mcp.settings.config import ConfigError
from colabhive_mcp.settings.sources import load
from colabhive_mcp.transports.http import hosting


def _settings() -> dict:
    """gunicorn's settings. A function: gunicorn takes any module-level name that is one of its settings
    (``config``, ``check_config``) for its own."""
    try:
        resolved = load()
        config = resolved.config
        if resolved.unknown_warning():
            print(resolved.unknown_warning(), file=sys.stderr)
        configure(config.log_level, config.log_format, file=config.log_file)  # (the master's own lines)
        hosting.prepare_metrics_dir()  # before the app's modules import prometheus_client
        from colabhive_mcp.transports.http.app import check_config, warn_about

        check_config(config)
        warn_about(config)
        return hosting.gunicorn_settings(hosting.export(config))
    except ConfigError as exc:
        print(f"colabhive-mcp: {exc}", file=sys.stderr)
        sys.exit(2)


globals().update(_settings())
