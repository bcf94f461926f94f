"""Shared fixtures: a real sandbox gateway on loopback, and tenants/servers pointed at it."""

import secrets

import pytest

from colabhive_mcp.protocol import Server
from colabhive_mcp.sandbox import DEMO_KEY, Sandbox
from colabhive_mcp.settings.config import Config
from colabhive_mcp.tenants.tenant import Tenant


@pytest.fixture(autouse=True)
def cache_home(tmp_path_factory, monkeypatch):
    """Each test's own ``XDG_CACHE_HOME`` and ``XDG_STATE_HOME``: a stdio server it starts finds no manifest
    saved by another test's (they share the session's sandbox, hence its URL and ETags), nor what another
    spent (the demo keys are everyone's)."""
    home = tmp_path_factory.mktemp("cache")
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))
    return home


@pytest.fixture(scope="session")
def gateway_sandbox():
    with Sandbox(cold_start_s=3.0, page_size=4, conformance_tools=True) as sandbox:
        yield sandbox


@pytest.fixture
def sandbox(gateway_sandbox):
    """The session's sandbox, reset (catalogue, faults, journal, cold models) for each test."""
    gateway_sandbox.reset()
    yield gateway_sandbox
    gateway_sandbox.reset()


@pytest.fixture
def config(sandbox):
    return Config(api_url=sandbox.url, api_key=DEMO_KEY, poll_initial=0.05, poll_max_interval=0.3, retries=1)


@pytest.fixture
def tenant(config):
    tenant = Tenant(config, config.api_key)
    yield tenant
    tenant.close()


@pytest.fixture
def server(config):
    return Server(config)


@pytest.fixture
def journal(sandbox):
    """``journal(route=None)``: the sandbox's recorded gateway requests, optionally of one route."""
    return lambda route=None: [e for e in sandbox.journal_entries() if route is None or e["route"] == route]


class Trace:
    """A test's own W3C trace context: send ``headers`` with its call, and ``journal(route)`` holds only the
    gateway requests made for that call (the server passes the context on to every one of them)."""

    def __init__(self, journal):
        self.parent = f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"
        self.headers = {"traceparent": self.parent}
        self._journal = journal

    def journal(self, route=None):
        return [e for e in self._journal(route) if e["traceparent"] == self.parent]


@pytest.fixture
def own_trace(journal):
    """This test's call, told apart from what a server shared with earlier tests still does for them (a
    task polling on, a call being cancelled): waiting for *a* poll is not waiting for this call's."""
    return Trace(journal)


@pytest.fixture(scope="session")
def hosted(gateway_sandbox):
    """A hosted (multi-tenant) server under gunicorn with two workers, on the session's sandbox."""
    from .support.http_server import HttpServer

    server = HttpServer(gateway_sandbox.url, "--http-workers", "2")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def live(hosted):
    """The hosted server with a keep-alive client and one session per legacy version (HTTP fuzzing)."""
    from .support.fuzzing import Live

    return Live(hosted)


@pytest.fixture
def serving(live, request):
    """The live server; after the test it must still serve normal requests and, unless the test
    failed already, have logged no unhandled exception."""
    mark, failed = len(live.server.lines), request.session.testsfailed
    yield live
    live.assert_still_serving(mark if request.session.testsfailed == failed else None)


@pytest.fixture(scope="session")
def ts_sdk():
    """``ts_sdk(script, scenario)``: run a tests/ Node script with the official TypeScript SDK (installed
    once from the npm registry) and return its JSON lines."""
    from .support import ts_sdk

    ts_sdk.install()
    return ts_sdk.run


@pytest.fixture(scope="session", autouse=True)
def quiet_once_the_session_ends():
    """Threads that outlive their tests (a detached call's janitor, at the end of its grace period)
    may log once pytest has closed the stream loguru writes to: from then on, records are dropped."""
    yield
    from loguru import logger

    logger.remove()


@pytest.fixture
def warnings():
    """The messages of the warnings logged during the test."""
    from loguru import logger

    seen = []
    handler = logger.add(lambda message: seen.append(message.record["message"]), level="WARNING")
    yield seen
    logger.remove(handler)


@pytest.fixture
def hostile(sandbox):
    """The sandbox serving the hostile manifest as well as its own catalogue."""
    from .support.hostile_manifest import HOSTILE

    for slug, schema, _arguments, result, output in HOSTILE:
        entry = {"name": slug, "description": f"hostile {slug[:20]}", "inputSchema": schema, "sideEffects": []}
        if output:
            entry["outputSchema"] = output
        sandbox.add_action(entry, result=result)
    return sandbox
