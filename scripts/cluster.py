"""colabhive-mcp scaled out on one machine: N instances behind the real nginx and the shipped site.

    python scripts/cluster.py --instances 2 --listen 127.0.0.1:8080 --api-url https://api.colabhive.com
    python scripts/cluster.py --sandbox                # on the embedded sandbox gateway, no account

Starts N ``colabhive-mcp serve`` instances (each with its default workers and a runtime directory
of its own, all with one session secret) and the system's nginx (``nginx`` on PATH, or
``--nginx``) running ``conf/nginx/colabhive-mcp.conf`` rendered for plain HTTP on the listen
address, in a temporary directory. When ``/healthz`` answers through nginx it prints one JSON line
(``url``, ``instances``: each instance's own address) and serves until SIGTERM or Ctrl-C, then stops
everything. ``COLABHIVE_*`` variables in the environment reach every instance.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
SITE = ROOT / "conf" / "nginx" / "colabhive-mcp.conf"
TEMP_KINDS = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")


def render_site(upstreams: list[str], listen: str, directory: Path, tls: tuple[str, str] | None = None) -> str:
    """The shipped site with these instances, listening on ``listen`` (plain HTTP, or TLS with
    ``tls`` = (certificate, key) for the name ``localhost``), logging into ``directory``."""
    text = SITE.read_text()
    servers = "".join(f"    server {upstream};\n" for upstream in upstreams)
    text = re.sub(r"(upstream colabhive_mcp \{\n(?:\s*#[^\n]*\n)*)\s*server 127\.0\.0\.1:8765;\n\s*# server [^\n]*\n",
                  lambda m: m.group(1) + servers, text)
    text = text.replace("/var/log/nginx/colabhive-mcp.access.log", str(directory / "access.log"))
    text = re.sub(r"\n\s*listen \[::\][^\n]*", "", text)  # the machine may have no IPv6
    if tls is not None:
        text = text.replace("listen 80;", f"listen {free_address()};").replace("mcp.example.com", "localhost")
        text = re.sub(r"listen 443 ssl", f"listen {listen} ssl", text)
        text = re.sub(r"ssl_certificate +\S+;", f"ssl_certificate {tls[0]};", text)
        return re.sub(r"ssl_certificate_key +\S+;", f"ssl_certificate_key {tls[1]};", text)
    blocks = re.split(r"\n(?=(?:# [^\n]*\n)*server \{)", text)  # the redirect, the TLS refusal, the site
    site = blocks[-1]
    site = re.sub(r"listen 443 ssl[^;]*;", f"listen {listen} default_server;", site)
    site = re.sub(r"\n\s*(?:ssl_[a-z_]+|add_header Strict-Transport-Security)[^\n]*", "", site)
    site = site.replace("server_name mcp.example.com;", "server_name _;")
    return "\n".join(block for block in blocks[:-1] if "server {" not in block) + "\n" + site


def nginx_conf(directory: Path, site: Path) -> str:
    """A whole nginx.conf around the site (what the distribution's /etc/nginx/nginx.conf provides)."""
    temp = "".join(f"    {kind}_temp_path {directory}/{kind};\n" for kind in TEMP_KINDS)
    return (("user root;\n" if os.geteuid() == 0 else "")
            + f"worker_processes 2;\npid {directory}/nginx.pid;\nerror_log {directory}/error.log warn;\n"
            f"events {{ worker_connections 4096; }}\n"
            f"http {{\n{temp}    access_log {directory}/other.log;\n    include {site};\n}}\n")


def free_address() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


def wait_until_healthy(url: str, process: subprocess.Popen, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"{what} exited with status {process.returncode}")
        try:
            if requests.get(url, timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.1)
    raise SystemExit(f"{what} did not become healthy within {timeout:g} s")


class Cluster:
    """The instances and nginx; :meth:`stop` ends them all and removes the temporary directory."""

    def __init__(self, instances: int, listen: str, api_url: str, nginx: str) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="colabhive-cluster-"))
        self.listen = listen
        self.url = f"http://{listen}/mcp"
        self.addresses = [free_address() for _ in range(instances)]
        self.processes: list[subprocess.Popen] = []
        environ = dict(os.environ)
        environ.setdefault("COLABHIVE_SESSION_SECRET", secrets.token_hex(32))  # one for every instance
        for number, address in enumerate(self.addresses):
            runtime = self.directory / f"instance-{number}"
            runtime.mkdir(mode=0o700)
            self.processes.append(subprocess.Popen(
                [sys.executable, "-m", "colabhive_mcp", "serve", "--bind", address, "--api-url", api_url],
                env={**environ, "COLABHIVE_RUNTIME_DIR": str(runtime)}))
        site = self.directory / "site.conf"
        site.write_text(render_site(self.addresses, listen, self.directory))
        (self.directory / "nginx.conf").write_text(nginx_conf(self.directory, site))
        self.nginx = [nginx, "-p", str(self.directory), "-c", str(self.directory / "nginx.conf")]

    def start(self) -> None:
        for address, process in zip(self.addresses, self.processes):
            wait_until_healthy(f"http://{address}/healthz", process, f"the instance on {address}")
        checked = subprocess.run(self.nginx + ["-t"], capture_output=True, text=True)
        if checked.returncode != 0:
            raise SystemExit("nginx refused the rendered site:\n" + checked.stderr)
        self.processes.append(subprocess.Popen(self.nginx + ["-g", "daemon off;"]))
        wait_until_healthy(f"http://{self.listen}/healthz", self.processes[-1], "nginx")

    def stop(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
        shutil.rmtree(self.directory, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instances", type=int, default=2)
    parser.add_argument("--listen", default="127.0.0.1:8080", help="HOST:PORT nginx listens on (plain HTTP)")
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--api-url", help="the Builder Gateway")
    target.add_argument("--sandbox", action="store_true", help="start the embedded sandbox gateway")
    parser.add_argument("--nginx", default=shutil.which("nginx") or "nginx", help="the nginx binary")
    args = parser.parse_args()
    sandbox = None
    if args.sandbox:
        sys.path.insert(0, str(ROOT))
        from colabhive_mcp.sandbox import Sandbox

        sandbox = Sandbox().start()
    cluster = Cluster(args.instances, args.listen, sandbox.url if sandbox else args.api_url, args.nginx)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # -> finally
    try:
        cluster.start()
        print(json.dumps({"url": cluster.url, "instances": [f"http://{a}/mcp" for a in cluster.addresses]}),
              flush=True)
        while all(process.poll() is None for process in cluster.processes):
            time.sleep(0.5)
        return 1  # a part of it died
    except KeyboardInterrupt:
        return 0
    finally:
        cluster.stop()
        if sandbox is not None:
            sandbox.stop()


if __name__ == "__main__":
    sys.exit(main())
