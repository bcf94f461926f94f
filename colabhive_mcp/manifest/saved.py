"""A stdio server's manifest, kept on disk from one start to the next and revalidated with its ETag.

An MCP host starts the stdio server for every session, and the manifest seldom changes in between:
the last one fetched is kept in ``$XDG_CACHE_HOME/colabhive-mcp`` (by default
``~/.cache/colabhive-mcp``), one file per gateway, account and key, named by a digest of the three
(the key itself is never written), mode 0600 in a directory of mode 0700. At the next start, the
first fetch sends its ETag, and a 304 spares the download (the pages of a 1 MB manifest). A file
no start has used for :data:`UNUSED_DAYS` days is deleted when another is written.

Beside it are the tool lists made of it (``manifest-….list-<variant>.json``: one per way of listing,
see :func:`colabhive_mcp.tenants.tenant.listing_variant`), each its count and JSON as it was sent.
While the gateway's last word on the manifest (its fetch, or a 304 since) is younger than
``manifest_ttl``, that list is the answer to the first ``tools/list`` of the next start, as a running
process's copy would be: nothing is asked or built first (the gateway is asked behind it). Older, the
copy on disk is a question to the gateway, never an answer: it is served only once the gateway says
it is current. When the gateway fails, the server answers as it would with nothing on disk; when it
refuses the key, the files are deleted. A file or directory that is not this user's alone is not
used, nor is one that cannot be read as a manifest (the next fetch writes it afresh).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import time
from pathlib import Path
from typing import Any, Mapping

from ..encoding import EncodedList, UnreadList, headed, unheaded
from ..keys import ApiKey
from ..logs import log
from ..settings.config import Config
from ..store.runtime_dir import private_dir_problems
from .version import Manifest

DIRECTORY = "colabhive-mcp"
UNUSED_DAYS = 30


def cache_home(environ: Mapping[str, str]) -> Path | None:
    """``$XDG_CACHE_HOME``, else ``~/.cache`` (from ``environ``'s ``HOME``)."""
    if environ.get("XDG_CACHE_HOME"):
        return Path(environ["XDG_CACHE_HOME"])
    return Path(environ["HOME"]) / ".cache" if environ.get("HOME") else None


class SavedManifest:
    """The file that keeps one key's manifest between starts."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def of(cls, config: Config, key: ApiKey, environ: Mapping[str, str] | None = None) -> SavedManifest | None:
        """The file for ``key`` at the configured gateway; ``None`` when the configuration keeps none (it
        is off, the manifest comes from a snapshot, or is fetched whole every time)."""
        home = cache_home(os.environ if environ is None else environ)
        if not config.manifest_cache or config.manifest_snapshot or not config.manifest_etag or home is None:
            return None
        name = hashlib.sha256(f"{config.api_url}\n{config.account_id or ''}\n{key.digest}".encode()).hexdigest()
        return cls(home / DIRECTORY / f"manifest-{name[:32]}.json")

    def load(self) -> Manifest | None:
        """The manifest saved last, if there is one this user alone could have written."""
        found = _read(self.path)
        if found is None:
            return None
        try:
            return _manifest(json.loads(found[0]))
        except ValueError:
            return None

    def listing(self, variant: str, within: float) -> tuple[str | None, UnreadList] | None:
        """The ``variant`` list made of the saved manifest, and its ETag, while the gateway's last word on
        that manifest is younger than ``within`` seconds (by the clock of the machine, which outlives a
        start); ``None`` when there is none so young (or none this user alone could have written)."""
        found = _read(self._listing_path(variant), within)
        if found is None:
            return None
        kept = unheaded(found[0])
        etag = None if kept is None else kept[0].get("etag", False)
        if kept is None or not (etag is None or isinstance(etag, str)):
            return None
        return etag, kept[1]

    def save(self, manifest: Manifest | None, listings: dict[str, tuple[str | None, EncodedList]]) -> None:
        """Keep a new ``manifest`` for the next start and the ``listings`` made of the saved one (variant:
        its ETag and the list), each written whole, then renamed over the last one (a new manifest's
        lists replace all of the old one's)."""
        directory = self.path.parent
        try:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            problems = private_dir_problems(str(directory))
            if problems:
                log.bind(path=str(directory), problem=" and ".join(problems)).warning("manifest.not_saved")
                return
            if manifest is not None:
                self._lists_go()
                self._write(self.path, json.dumps({"etag": manifest.etag, "entries": manifest.entries},
                                                  separators=(",", ":")).encode())
            for variant, (etag, listing) in listings.items():
                self._write(self._listing_path(variant), headed(listing, etag=etag))
            if manifest is not None:
                _prune(directory)
        except OSError as exc:
            log.bind(path=str(self.path), error=exc.strerror).warning("manifest.not_saved")

    def listed(self) -> bool:
        """Whether lists made of the saved manifest are kept beside it."""
        return bool(self._lists())

    def used(self) -> None:
        """The gateway said the saved manifest is current: it (and what was made of it) was used now."""
        for path in (self.path, *self._lists()):
            with contextlib.suppress(OSError):
                os.utime(path)

    def forget(self) -> None:
        """Delete the saved manifest and its lists (the gateway refused the key)."""
        self._lists_go()
        with contextlib.suppress(OSError):
            os.unlink(self.path)

    def _write(self, path: Path, body: bytes) -> None:
        temporary = path.with_name(f".{path.name}.{os.getpid()}")
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "wb") as file:
                file.write(body)
            os.replace(temporary, path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise

    def _listing_path(self, variant: str) -> Path:
        return self.path.with_name(f"{self.path.stem}.list-{variant[:32]}.json")

    def _lists(self) -> list[Path]:
        return list(self.path.parent.glob(f"{self.path.stem}.list-*.json"))

    def _lists_go(self) -> None:
        for path in self._lists():
            with contextlib.suppress(OSError):
                path.unlink()


def _read(path: Path, within: float | None = None) -> tuple[bytes, float] | None:
    """What a file holds and how old it is, if this user alone could have written it (and, given
    ``within``, it was written or used less than that many seconds ago)."""
    try:
        if private_dir_problems(str(path.parent)):
            return None
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as file:
            found = os.fstat(file.fileno())
            if not stat.S_ISREG(found.st_mode) or found.st_uid != os.geteuid() or found.st_mode & 0o077:
                return None
            age = time.time() - found.st_mtime
            if within is not None and not 0 <= age < within:
                return None
            return file.read(), age
    except OSError:
        return None


def _prune(directory: Path) -> None:
    """Delete the saved manifests no start has used for :data:`UNUSED_DAYS` days."""
    unused = time.time() - UNUSED_DAYS * 86400
    for path in directory.glob("manifest-*.json"):
        with contextlib.suppress(OSError):
            if path.lstat().st_mtime < unused:
                path.unlink()


def _manifest(data: Any) -> Manifest | None:
    """The manifest a saved file holds, if it holds one."""
    if not isinstance(data, dict) or not isinstance(data.get("entries"), list):
        return None
    entries, etag = data["entries"], data.get("etag")
    if not isinstance(etag, str) or not all(isinstance(e, dict) and isinstance(e.get("name"), str) for e in entries):
        return None
    return Manifest(tuple(entries), etag)
