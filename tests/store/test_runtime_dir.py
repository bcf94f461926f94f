"""The runtime directory is trusted only when it is this user's alone, and the files in it only when
they are this user's regular files: nobody else's link makes a worker write elsewhere."""

import os
import re
import subprocess
import sys
import tempfile

import pytest
from loguru import logger

from colabhive_mcp.settings.config import Config, ConfigError
from colabhive_mcp.store import counts, expiries
from colabhive_mcp.store.counts import PlacesCounts
from colabhive_mcp.store.runtime_dir import check_runtime_dir
from colabhive_mcp.store.sqlite import open_store
from colabhive_mcp.transports.http import hosting

from ..support.http_server import HttpServer

NOBODY = 65534
AS_ROOT = os.geteuid() == 0  # who may hand a file or a directory to another user


@pytest.fixture
def victim(tmp_path):
    """A file of someone else's that a planted link points at."""
    path = tmp_path / "victim"
    path.write_bytes(b"precious")
    return path


def planted(directory, victim, name=counts.FILE_NAME):
    directory.mkdir(exist_ok=True)
    (directory / name).symlink_to(victim)
    return str(directory)


def test_a_directory_others_may_write_to_is_refused_and_its_links_are_not_followed(tmp_path, victim):
    shared = planted(tmp_path / "shared", victim)
    os.chmod(shared, 0o777)
    with pytest.raises(ConfigError, match=re.escape(f"runtime directory {shared} has mode 0777: others may enter it")):
        open_store(shared)
    assert victim.read_bytes() == b"precious"  # (counts.bin written through the link: 2 MiB of zeros)


def test_a_directory_of_another_user_or_a_link_to_one_is_refused(tmp_path):
    if AS_ROOT:
        theirs, uid = tmp_path / "theirs", NOBODY
        theirs.mkdir(mode=0o700)
        os.chown(theirs, NOBODY, NOBODY)
    else:  # (only root gives a directory away: a normal user's tests take root's own)
        theirs, uid = "/", 0
    with pytest.raises(ConfigError, match=f"belongs to uid {uid}, not to this server's user"):
        open_store(str(theirs))
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere")
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    with pytest.raises(ConfigError, match="is a symbolic link"):
        open_store(str(link))
    with pytest.raises(ConfigError, match="No such file or directory"):
        open_store(str(tmp_path / "missing"))


@pytest.mark.parametrize("name", ["instance.db", "instance.db-wal", "instance.db-shm"])
def test_a_store_file_that_is_a_link_stops_the_start(tmp_path, victim, name):
    directory = planted(tmp_path / "ours", victim, name)
    os.chmod(directory, 0o700)
    with pytest.raises(ConfigError, match=re.escape(f"the instance store {directory}/instance.db cannot be used")):
        open_store(directory)
    assert victim.read_bytes() == b"precious"


@pytest.mark.parametrize("name", [counts.FILE_NAME, expiries.FILE_NAME])
def test_a_mapped_file_that_is_a_link_or_someone_elses_is_not_used(tmp_path, victim, name):
    directory = planted(tmp_path / "ours", victim, name)
    os.chmod(directory, 0o700)
    seen = []
    handler = logger.add(lambda message: seen.append(message.record["message"]), level="WARNING")
    try:
        instance = open_store(directory)
        if AS_ROOT:  # (only root can give a file away: then it is someone else's, not a link)
            os.remove(os.path.join(directory, name))
            (tmp_path / "ours" / name).write_bytes(b"")
            os.chown(os.path.join(directory, name), NOBODY, NOBODY)
        again = open_store(directory)
    finally:
        logger.remove(handler)
    assert victim.read_bytes() == b"precious"
    if name == counts.FILE_NAME:
        assert isinstance(instance._counts, PlacesCounts) and isinstance(again._counts, PlacesCounts)
        assert seen == ["counts.unavailable"] * 2
    else:
        assert instance._expiries is None and again._expiries is None and seen == ["expiries.unavailable"] * 2
    instance.put("calls", "k", 1, 60)
    assert again.get("calls", "k") == 1


def test_the_directories_serve_makes_or_systemd_gives_are_accepted(tmp_path, monkeypatch):
    made = hosting.prepare_runtime_dir(Config())  # serve's own: tempfile.mkdtemp
    try:
        assert open_store(made.runtime_dir).add("x", "y", 1, 60)
    finally:
        hosting.remove_runtime_dir()
    systemd = tmp_path / "run" / "colabhive-mcp"
    systemd.mkdir(parents=True, mode=0o700)  # RuntimeDirectory= with RuntimeDirectoryMode=0700
    monkeypatch.setenv(hosting.SYSTEMD_RUNTIME_ENV, f"{systemd}:{systemd}/metrics")
    given = hosting.prepare_runtime_dir(Config())
    assert given.runtime_dir == str(systemd)
    check_runtime_dir(given.runtime_dir)
    hosting.remove_runtime_dir()
    configured = hosting.prepare_runtime_dir(Config(runtime_dir=str(tmp_path / "new" / "dir")))
    assert oct(os.stat(configured.runtime_dir).st_mode & 0o777) == "0o700"
    hosting.remove_runtime_dir()


def test_serve_refuses_a_runtime_directory_others_may_enter_before_it_forks(tmp_path):
    open_to_all = tmp_path / "open"
    open_to_all.mkdir()
    os.chmod(open_to_all, 0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("COLABHIVE_")}
    env.update({"COLABHIVE_RUNTIME_DIR": str(open_to_all), "COLABHIVE_SESSION_SECRET": "s" * 64,
                "XDG_CONFIG_HOME": os.devnull})
    done = subprocess.run([sys.executable, "-m", "colabhive_mcp", "serve", "--api-url", "http://127.0.0.1:9"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 2, done.stderr
    assert f"runtime directory {open_to_all} has mode 0755: others may enter it, it must be 0700" in done.stderr


def test_plain_gunicorn_refuses_it_too(tmp_path):
    open_to_all = tempfile.mkdtemp(dir=tmp_path)
    os.chmod(open_to_all, 0o777)
    with pytest.raises(RuntimeError, match=re.escape(f"runtime directory {open_to_all} has mode 0777")):
        HttpServer("http://127.0.0.1:9", gunicorn_conf=True, env={"COLABHIVE_RUNTIME_DIR": open_to_all}).stop()


def test_a_state_directory_is_made_private_checked_and_never_the_runtime_directory_twice(tmp_path, monkeypatch):
    prepare_state_dir = hosting.prepare_state_dir
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    assert prepare_state_dir(Config(runtime_dir=str(runtime), state_dir=str(runtime))).state_dir is None
    made = prepare_state_dir(Config(state_dir=str(tmp_path / "state"))).state_dir
    assert made == str(tmp_path / "state") and (tmp_path / "state").stat().st_mode & 0o777 == 0o700
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o755)
    with pytest.raises(ConfigError, match="state directory .* 0755"):
        prepare_state_dir(Config(state_dir=str(shared)))
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(ConfigError, match="state directory"):  # one line, not a traceback
        prepare_state_dir(Config(state_dir=str(tmp_path / "file" / "under")))
    monkeypatch.setenv("STATE_DIRECTORY", str(tmp_path / "systemd"))
    assert prepare_state_dir(Config()).state_dir == str(tmp_path / "systemd")
