"""The environment a server under test starts in: none of the machine's COLABHIVE_ settings, no
user's config file, JSON logs."""

import os


def server_env(**extra):
    """The test's environment without COLABHIVE_ settings or a user's config file, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COLABHIVE_")}
    env.update({"COLABHIVE_LOG_FORMAT": "json", "XDG_CONFIG_HOME": os.devnull, **extra})
    return env
