"""The distribution's nginx running the project's site file (conf/nginx/colabhive-mcp.conf), as
deployed except for its ports, paths and name: tests reach it as https://localhost:PORT.

The binary is the one on PATH, else Debian's package fetched once with ``apt-get download`` and
unpacked into .cache/nginx (no root needed, nothing installed system-wide).
"""

import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import requests

ROOT = Path(__file__).resolve().parent.parent
SITE = ROOT / "conf" / "nginx" / "colabhive-mcp.conf"
CACHE = ROOT / ".cache" / "nginx"


def binary() -> str:
    """nginx: installed, or unpacked from the distribution's package (skips where there is no apt)."""
    found = shutil.which("nginx") or (str(CACHE / "usr" / "sbin" / "nginx")
                                      if (CACHE / "usr" / "sbin" / "nginx").exists() else None)
    if found:
        return found
    if not (shutil.which("apt-get") and shutil.which("dpkg")):
        pytest.skip("nginx is not installed and there is no apt-get to fetch the distribution's package")
    with tempfile.TemporaryDirectory() as download:
        fetched = subprocess.run(["apt-get", "download", "nginx"], cwd=download, capture_output=True, text=True,
                                 timeout=300)
        assert fetched.returncode == 0, "apt-get download nginx failed: " + fetched.stderr[-2000:]
        (package,) = Path(download).glob("nginx_*.deb")
        subprocess.run(["dpkg", "-x", str(package), str(CACHE)], check=True, timeout=120)
    return str(CACHE / "usr" / "sbin" / "nginx")


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def site(upstreams: list[str], http_port: int, https_port: int, directory: Path) -> str:
    """The project's site file with this test's upstreams, ports, certificate and log paths."""
    text = SITE.read_text()
    text = re.sub(r"(upstream colabhive_mcp \{\n)\s*server 127\.0\.0\.1:8765;",
                  lambda m: m.group(1) + "".join(f"    server {u};\n" for u in upstreams), text)
    text = re.sub(r"\n\s*listen \[::\][^\n]*", "", text)  # the test machine may have no IPv6
    text = text.replace("listen 80;", f"listen 127.0.0.1:{http_port};")
    text = re.sub(r"listen 443 ssl", f"listen 127.0.0.1:{https_port} ssl", text)
    text = text.replace("mcp.example.com", "localhost")
    text = re.sub(r"ssl_certificate +\S+;", f"ssl_certificate {directory}/cert.pem;", text)
    text = re.sub(r"ssl_certificate_key +\S+;", f"ssl_certificate_key {directory}/key.pem;", text)
    return text.replace("/var/log/nginx/colabhive-mcp.access.log", str(directory / "access.log"))


class Nginx:
    """nginx in front of ``upstreams`` (HOST:PORT of colabhive-mcp servers); ``url`` is its /mcp."""

    def __init__(self, upstreams: list[str]) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="colabhive-nginx-"))
        self.port = free_port()
        self.root = f"https://localhost:{self.port}"
        self.url = self.root + "/mcp"
        self.cert = str(self.directory / "cert.pem")  # what clients verify the TLS connection with
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                        "/CN=localhost", "-addext", "subjectAltName=DNS:localhost", "-keyout", str(self.directory / "key.pem"),
                        "-out", str(self.directory / "cert.pem")], check=True, capture_output=True, timeout=60)
        (self.directory / "site.conf").write_text(site(upstreams, free_port(), self.port, self.directory))
        temp = "".join(f"    {kind}_temp_path {self.directory}/{kind};\n"
                       for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        (self.directory / "nginx.conf").write_text(
            ("user root;\n" if os.geteuid() == 0 else "")
            + f"worker_processes 1;\npid {self.directory}/nginx.pid;\nerror_log {self.directory}/error.log warn;\n"
            f"events {{ worker_connections 4096; }}\nhttp {{\n{temp}    access_log {self.directory}/other.log;\n"
            f"    include {self.directory}/site.conf;\n}}\n")  # as the distribution's nginx.conf would
        self.command = [binary(), "-p", str(self.directory), "-c", str(self.directory / "nginx.conf")]
        self.process: subprocess.Popen | None = None

    def check(self) -> subprocess.CompletedProcess:
        """``nginx -t`` on the configuration."""
        return subprocess.run(self.command + ["-t"], capture_output=True, text=True, timeout=60)

    def start(self) -> "Nginx":
        self.process = subprocess.Popen(self.command + ["-g", "daemon off;"], stderr=subprocess.PIPE)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.process.stderr.read().decode()
            try:
                requests.get(self.root + "/healthz", verify=self.cert, timeout=2)
                return self
            except requests.ConnectionError:
                time.sleep(0.1)
        raise RuntimeError("nginx did not start")

    def access_log(self) -> str:
        path = self.directory / "access.log"
        return path.read_text() if path.exists() else ""

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(20)
        shutil.rmtree(self.directory, ignore_errors=True)
