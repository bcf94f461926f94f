"""client-config: snippets in each client's documented shape that start what is installed on this machine."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from colabhive_mcp import __version__
from colabhive_mcp.cli.demo import StdioPeer

from ..support.environ import server_env

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = ["claude-desktop", "cursor", "claude-code", "n8n", "vscode"]
HOSTED = "https://mcp.example.com/mcp"
SECRET = "hive_secret_of_the_user_01"  # in the environment of every run: no snippet may print it
RELEASE = ["uvx", f"colabhive-mcp@{__version__}"]


def client_config(*args, cwd=ROOT, pythonpath=None):
    """``python -m colabhive_mcp client-config ARGS``: the snippet (parsed unless it is a command line)."""
    env = server_env(COLABHIVE_API_KEY=SECRET)
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(pythonpath), env.get("PYTHONPATH")) if p)
    done = subprocess.run([sys.executable, "-m", "colabhive_mcp", "client-config", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert SECRET not in done.stdout + done.stderr
    return done.stdout if done.stdout.startswith("claude ") else json.loads(done.stdout)


def stdio_command(snippet):
    """The command line a stdio snippet (Claude Desktop's, Cursor's, VS Code's) starts."""
    server = (snippet.get("mcpServers") or snippet["servers"])["colabhive"]
    return [server["command"], *server["args"]]


def installed_like_from_the_index(tmp_path, origin=None):
    """This package installed under ``tmp_path`` as pip installs a wheel: a site directory with the
    package and a dist-info whose RECORD lists its files and the console script in ``bin/``, plus a
    PEP 610 direct_url.json when ``origin`` says it did not come from an index."""
    site, bin_dir = tmp_path / "lib" / "site", tmp_path / "bin"
    shutil.copytree(ROOT / "colabhive_mcp", site / "colabhive_mcp", ignore=shutil.ignore_patterns("__pycache__"))
    bin_dir.mkdir()
    (bin_dir / "colabhive-mcp").write_text(f"#!{sys.executable}\n")
    info = site / f"colabhive_mcp-{__version__}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: colabhive-mcp\nVersion: {__version__}\n")
    files = [p.relative_to(site).as_posix() for p in (site / "colabhive_mcp").rglob("*") if p.is_file()]
    files += ["../../bin/colabhive-mcp", f"{info.name}/METADATA", f"{info.name}/RECORD"]
    if origin is not None:
        (info / "direct_url.json").write_text(json.dumps(origin))
        files.append(f"{info.name}/direct_url.json")
    (info / "RECORD").write_text("".join(f"{f},,\n" for f in files))
    return site, bin_dir / "colabhive-mcp"


def test_this_checkouts_editable_install_is_started_by_its_own_command_and_it_works(tmp_path):
    assert '"editable": true' in subprocess.run(  # the installation the tests run in: a PEP 610 editable one
        [sys.executable, "-c", "from importlib.metadata import distribution as d; "
                               "print(d('colabhive-mcp').read_text('direct_url.json'))"],
        cwd=tmp_path, capture_output=True, text=True).stdout
    command = str(Path(sys.executable).parent / "colabhive-mcp")
    # from the checkout, where its .egg-info (no direct_url.json) shadows the installed metadata
    assert stdio_command(client_config("cursor", cwd=ROOT)) == [command]
    assert stdio_command(client_config("claude-desktop", "--sandbox", cwd=tmp_path)) == [command, "--sandbox"]
    peer = StdioPeer(stdio_command(client_config("vscode", "--sandbox", cwd=tmp_path)), env=server_env(),
                     cwd=str(tmp_path))
    try:  # what the client would start: this installation, serving
        assert peer.initialize()["result"]["serverInfo"]["version"] == __version__
        assert "hive-chat" in {t["name"] for t in peer.request("tools/list")["result"]["tools"]}
    finally:
        assert peer.close() == 0


def test_a_copy_that_is_not_installed_says_so_beside_its_snippet(tmp_path):
    """A copy Python finds only by PYTHONPATH or the working directory: the snippet runs it with ``-m``,
    which works only where Python finds it, and stderr says to install it."""
    shutil.copytree(ROOT / "colabhive_mcp", tmp_path / "colabhive_mcp", ignore=shutil.ignore_patterns("__pycache__"))
    env = {**server_env(), "PYTHONPATH": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "colabhive_mcp", "client-config", "cursor"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert stdio_command(json.loads(done.stdout))[:3] == [sys.executable, "-m", "colabhive_mcp"]
    assert "is not installed here" in done.stderr and "pip install -e ." in done.stderr
    installed = client_config("cursor")  # this checkout's editable install: its own script, no such word
    assert stdio_command(installed)[0].endswith("colabhive-mcp")


def test_a_release_from_the_index_is_started_as_the_pinned_release(tmp_path):
    site, _ = installed_like_from_the_index(tmp_path)
    assert stdio_command(client_config("claude-desktop", cwd=tmp_path, pythonpath=site)) == RELEASE
    assert stdio_command(client_config("vscode", "--sandbox", cwd=tmp_path, pythonpath=site)) == [*RELEASE, "--sandbox"]
    assert client_config("claude-code", cwd=tmp_path, pythonpath=site).endswith(" -- " + " ".join(RELEASE) + "\n")


def test_a_wheel_file_install_is_started_by_the_script_its_record_lists(tmp_path):
    site, script = installed_like_from_the_index(tmp_path, {"url": "file:///tmp/colabhive_mcp.whl", "archive_info": {}})
    assert stdio_command(client_config("cursor", cwd=tmp_path, pythonpath=site)) == [str(script)]


def test_release_pins_the_index_release_whatever_is_installed():
    assert stdio_command(client_config("cursor", "--release")) == RELEASE


@pytest.mark.parametrize("client", CLIENTS)
def test_the_local_snippet_has_the_clients_documented_shape(client):
    snippet = client_config(client)
    command = str(Path(sys.executable).parent / "colabhive-mcp")
    if client == "claude-code":  # options, the name, then the server's command after --
        assert snippet.strip() == (f'claude mcp add --transport stdio --env COLABHIVE_API_KEY="$COLABHIVE_API_KEY" '
                                   f"colabhive -- {command}")
    elif client == "n8n":  # n8n reaches MCP over HTTP: the single-tenant server on this machine
        (node,) = snippet["nodes"]
        assert node["type"] == "@n8n/n8n-nodes-langchain.mcpClientTool"
        assert node["parameters"] == {"endpointUrl": "http://127.0.0.1:8765/mcp", "serverTransport": "httpStreamable",
                                      "authentication": "none"}
        assert f"{command} serve --single-tenant" in node["notes"]
    elif client == "vscode":  # servers + type stdio; the key from a password input
        server = snippet["servers"]["colabhive"]
        assert server["type"] == "stdio" and server["env"] == {"COLABHIVE_API_KEY": "${input:colabhive-api-key}"}
        assert snippet["inputs"] == [{"type": "promptString", "id": "colabhive-api-key",
                                      "description": "ColabHive API key", "password": True}]
    else:
        server = snippet["mcpServers"]["colabhive"]
        assert set(server) == {"command", "args", "env"}
        key = "${env:COLABHIVE_API_KEY}" if client == "cursor" else "hive_..."  # Claude Desktop expands nothing
        assert server["env"] == {"COLABHIVE_API_KEY": key}


@pytest.mark.parametrize("client", CLIENTS)
def test_the_sandbox_snippet_runs_the_server_on_the_sandbox_and_needs_no_key(client):
    snippet = client_config(client, "--sandbox")
    text = snippet if isinstance(snippet, str) else json.dumps(snippet)
    assert "COLABHIVE_API_KEY" not in text and "hive_" not in text and "inputs" not in text
    if client == "claude-code":
        assert text.strip().endswith("colabhive-mcp --sandbox")
    elif client == "n8n":
        assert "serve --single-tenant --sandbox" in snippet["nodes"][0]["notes"]
    else:
        assert stdio_command(snippet)[-1] == "--sandbox"


@pytest.mark.parametrize("client", CLIENTS)
def test_the_hosted_snippet_is_what_the_client_expands_and_carries_no_key(client):
    snippet = client_config(client, "--url", HOSTED)
    if client == "cursor":  # Cursor's mcp.json interpolation
        assert snippet == {"mcpServers": {"colabhive": {
            "url": HOSTED, "headers": {"Authorization": "Bearer ${env:COLABHIVE_API_KEY}"}}}}
    elif client == "vscode":  # .vscode/mcp.json: an input, used in the server's headers
        (prompt,) = snippet["inputs"]
        assert prompt["type"] == "promptString" and prompt["password"] is True
        assert snippet["servers"] == {"colabhive": {
            "type": "http", "url": HOSTED, "headers": {"Authorization": f"Bearer ${{input:{prompt['id']}}}"}}}
    elif client == "claude-code":  # the shell fills in the key
        assert snippet.strip() == (f"claude mcp add --transport http colabhive {HOSTED} "
                                   '--header "Authorization: Bearer $COLABHIVE_API_KEY"')
    elif client == "claude-desktop":  # mcp-remote, no space inside args, the header's value from env
        server = snippet["mcpServers"]["colabhive"]
        assert server["command"] == "npx" and server["args"] == ["-y", "mcp-remote", HOSTED, "--header",
                                                                 "Authorization:${AUTH_HEADER}"]
        assert server["env"] == {"AUTH_HEADER": "Bearer hive_..."}  # a placeholder: Claude Desktop expands nothing
    else:  # the MCP Client Tool node's parameters, the key in a Bearer Auth credential
        (node,) = snippet["nodes"]
        assert node["type"] == "@n8n/n8n-nodes-langchain.mcpClientTool"
        assert node["parameters"] == {"endpointUrl": HOSTED, "serverTransport": "httpStreamable",
                                      "authentication": "bearerAuth"}


def test_a_hosted_snippet_refuses_the_local_servers_options():
    for option in ("--sandbox", "--release"):
        done = subprocess.run([sys.executable, "-m", "colabhive_mcp", "client-config", "cursor", "--url", HOSTED,
                               option], cwd=ROOT, env=server_env(), capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and "--url is the hosted one" in done.stderr


def link_of(*args):
    """``client-config ARGS --link``: its answer (the key is set, and must not appear)."""
    done = subprocess.run([sys.executable, "-m", "colabhive_mcp", "client-config", *args, "--link"], cwd=ROOT,
                          env=server_env(COLABHIVE_API_KEY=SECRET), capture_output=True, text=True, timeout=60)
    assert SECRET not in done.stdout + done.stderr
    return done


@pytest.mark.parametrize("where", [(), ("--sandbox",), ("--url", "https://mcp.example.com/mcp")],
                         ids=["local", "sandbox", "hosted"])
def test_the_install_links_carry_exactly_the_snippets_server_and_never_a_key(where):
    import base64
    from urllib.parse import parse_qs, unquote, urlsplit

    for client in ("vscode", "cursor"):
        snippet = client_config(client, *where)
        shown = link_of(client, *where)
        assert shown.returncode == 0 and len(shown.stdout.splitlines()) == 1, shown.stderr
        link = shown.stdout.strip()
        if client == "vscode":
            assert link.startswith("vscode:mcp/install?")
            server = json.loads(unquote(link.split("?", 1)[1]))
            assert server.pop("name") == "colabhive" and server.pop("inputs", None) == snippet.get("inputs")
            assert server == snippet["servers"]["colabhive"]
        else:
            parts = urlsplit(link)
            assert (parts.scheme, parts.netloc, parts.path) == ("cursor", "anysphere.cursor-deeplink", "/mcp/install")
            query = parse_qs(parts.query)
            assert query["name"] == ["colabhive"]
            assert json.loads(base64.b64decode(query["config"][0])) == snippet["mcpServers"]["colabhive"]
    refused = link_of("n8n")
    assert refused.returncode == 2 and "n8n has no install links" in refused.stderr
