"""The distribution's nginx running the project's site file (conf/nginx/colabhive-mcp.conf), as
deployed except for its addresses, paths and name (rendered by scripts/cluster.py): tests reach it
as https://localhost:PORT.

The binary is the one on PATH, else Debian's package fetched once with ``apt-get download`` and
unpacked into .cache/nginx (no root needed, nothing installed system-wide).
"""

import fcntl
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import requests

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "nginx"
sys.path.insert(0, str(ROOT / "scripts"))

from cluster import free_address, nginx_conf, render_site  # noqa: E402


def binary() -> str:
    """nginx: installed, or unpacked from the distribution's package (skips where there is no apt);
    test processes running at once fetch it once (under a lock beside it)."""
    found = shutil.which("nginx")
    if found:
        return found
    CACHE.parent.mkdir(parents=True, exist_ok=True)  # a clean clone has no .cache yet
    with open(CACHE.parent / "nginx.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (CACHE / "usr" / "sbin" / "nginx").exists():
            _fetch()
    return str(CACHE / "usr" / "sbin" / "nginx")


def _fetch() -> None:
    """Download the distribution's nginx package and unpack it into .cache/nginx."""
    if not (shutil.which("apt-get") and shutil.which("dpkg")):
        pytest.skip("nginx is not installed and there is no apt-get to fetch the distribution's package")
    with tempfile.TemporaryDirectory(dir=CACHE.parent) as download:
        fetched = subprocess.run(["apt-get", "download", "nginx"], cwd=download, capture_output=True, text=True,
                                 timeout=300)
        assert fetched.returncode == 0, "apt-get download nginx failed: " + fetched.stderr[-2000:]
        (package,) = Path(download).glob("nginx_*.deb")
        unpacked = Path(download) / "unpacked"
        extracted = subprocess.run(["dpkg", "-x", str(package), str(unpacked)], capture_output=True, text=True,
                                   timeout=120)
        assert extracted.returncode == 0, "dpkg -x failed: " + extracted.stderr[-2000:]
        shutil.rmtree(CACHE, ignore_errors=True)  # what an interrupted earlier attempt left
        unpacked.rename(CACHE)  # all at once: a failed unpacking never looks like an installed nginx


class Nginx:
    """nginx in front of ``upstreams`` (HOST:PORT of colabhive-mcp servers); ``url`` is its /mcp."""

    def __init__(self, upstreams: list[str], ipv6: bool = False) -> None:
        """``ipv6``: listen on every IPv6 address of the machine too (the same port)."""
        self.directory = Path(tempfile.mkdtemp(prefix="colabhive-nginx-"))
        self.port = int(free_address().rsplit(":", 1)[1])
        self.root = f"https://localhost:{self.port}"
        self.url = self.root + "/mcp"
        self.cert = str(self.directory / "cert.pem")  # what clients verify the TLS connection with
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                        "/CN=localhost", "-addext", "subjectAltName=DNS:localhost", "-keyout", str(self.directory / "key.pem"),
                        "-out", str(self.directory / "cert.pem")], check=True, capture_output=True, timeout=60)
        site = self.directory / "site.conf"
        text = render_site(upstreams, f"127.0.0.1:{self.port}", self.directory,
                           tls=(self.cert, str(self.directory / "key.pem")))
        if ipv6:
            text = re.sub(rf"\n(\s*)listen 127\.0\.0\.1:{self.port} ssl",
                          lambda m: f"\n{m[1]}listen [::]:{self.port} ssl;" + m[0], text)
        site.write_text(text)
        (self.directory / "nginx.conf").write_text(nginx_conf(self.directory, site))
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

    def error_log(self) -> str:
        path = self.directory / "error.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(20)
        shutil.rmtree(self.directory, ignore_errors=True)
