"""``serve`` hands its workers their configuration through the fork, not the environment: no secret
setting reaches a process a worker or gunicorn starts, and the workers see the settings exactly as
the master resolved them (0.3.4's spellings included)."""

import os

import pytest

from ...support.http_server import HttpServer
from ...support.http_client import initialize

pytestmark = pytest.mark.slow

SECRET = "f0" * 32
RECORD_FORKS = """\
import os


def _record():
    with open(os.path.join(os.environ["FORKS_SEEN"], str(os.getpid())), "w") as fh:
        fh.write("\\n".join(f"{name}={value}" for name, value in os.environ.items()))


os.register_at_fork(after_in_child=_record)
"""


def test_a_secret_from_a_config_file_is_in_no_workers_environment(gateway_sandbox, tmp_path):
    """What a worker's ``os.environ`` holds when it forks (``/proc/<pid>/environ`` would not tell:
    it keeps what the master was started with, not what it put in its environment since)."""
    (tmp_path / "sitecustomize.py").write_text(RECORD_FORKS)
    seen = tmp_path / "forks"
    seen.mkdir()
    config = tmp_path / "config.toml"
    config.write_text(f'session_secret = "{SECRET}"\nmetrics_token = "token-{SECRET}"\n')
    server = HttpServer(gateway_sandbox.url, "--http-workers", "2", env={
        "COLABHIVE_SESSION_SECRET": "", "COLABHIVE_MCP_CONFIG": str(config),
        "PYTHONPATH": str(tmp_path), "FORKS_SEEN": str(seen)})
    try:
        assert initialize(server.url)  # the workers sign sessions with it
    finally:
        server.stop()
    environments = [path.read_text() for path in seen.iterdir()]
    assert len(environments) >= 2  # both workers
    assert sum(SECRET in text for text in environments) == 0  # (a failure here shows no environment)
    assert all(f"PROMETHEUS_MULTIPROC_DIR={os.sep}" in text for text in environments)


def test_serve_starts_with_0_3_4_spellings_of_its_settings(gateway_sandbox):
    server = HttpServer(gateway_sandbox.url, env={
        "COLABHIVE_HTTP_TIMEOUT": "10", "COLABHIVE_POLL_INTERVAL": "2", "COLABHIVE_POLL_MAX_INTERVAL": ""})
    try:  # (its workers once saw COLABHIVE_REQUEST_TIMEOUT=10.0 beside COLABHIVE_HTTP_TIMEOUT=10, and refused)
        assert initialize(server.url)
    finally:
        server.stop()
