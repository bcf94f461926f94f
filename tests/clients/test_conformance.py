"""The official MCP conformance suite against the single-tenant HTTP mode on the sandbox.

``scripts/conformance.sh`` installs the suite from the npm registry (once, into .cache/) and
runs it; ``conf/conformance-baseline.yml`` lists the only scenarios allowed to fail (resources,
prompts, completion, sampling, elicitation: features a tools gateway does not offer). A listed
scenario that starts passing fails the run too.
"""

import subprocess
from pathlib import Path

import pytest

from colabhive_mcp.sandbox import DEMO_KEY

from ..support.http_server import HttpServer

pytestmark = pytest.mark.real_clients

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "conformance.sh"


@pytest.mark.parametrize("server_args,suite_args,must_pass", [
    # every scenario, active and pending, on the default single-tenant server
    ((), ("--suite", "all"), ("json-schema-2020-12: 4 passed", "server-sse-polling: 2 passed",
                              "tools-call-with-progress: 1 passed", "dns-rebinding-protection: 2 passed")),
    # SSE polling in full: the server hands the POST stream over after 1 s; the suite resumes it by GET
    (("--sse-poll-after", "1"), ("--scenario", "server-sse-polling"), ("Passed: 3/3, 0 failed, 0 warnings",)),
], ids=["all-scenarios", "sse-polling-handover"])
def test_the_official_conformance_suite_passes(gateway_sandbox, server_args, suite_args, must_pass):
    server = HttpServer(gateway_sandbox.url, "--single-tenant", "--http-workers", "1", *server_args,
                        env={"COLABHIVE_API_KEY": DEMO_KEY})
    try:
        result = subprocess.run(["bash", str(SCRIPT), server.url, *suite_args], capture_output=True,
                                text=True, timeout=900, stdin=subprocess.DEVNULL)
    finally:
        server.stop()
    summary = result.stdout[result.stdout.find("=== SUMMARY ==="):] or result.stdout[-3000:]
    assert result.returncode == 0, summary + result.stderr[-2000:]
    for line in must_pass:
        assert line in result.stdout, summary
