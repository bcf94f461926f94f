"""The instance's runtime directory, where its workers keep what they share (the instance store,
the counts, cancellations relayed between workers).

It is trusted only when it is this user's and nobody else's (mode 0700, not a symbolic link), and
the files in it only when they are this user's regular files: a directory another user can write to
could hold links that make the workers write elsewhere. (:func:`private_dir_problems` judges any
directory kept private so: a stdio server's saved manifests are kept in one too.)
"""

from __future__ import annotations

import os
import stat

from ..settings.config import ConfigError


def check_runtime_dir(directory: str, name: str = "runtime directory",
                      holds: str = "the instance keeps its shared state there") -> None:
    """Raise :class:`ConfigError` unless ``directory`` is a directory (not a symbolic link) of this
    process's user that nobody else may enter; the message calls it ``name``, which ``holds`` what."""
    try:
        problems = private_dir_problems(directory)
    except OSError as exc:
        raise ConfigError(f"{name} {directory}: {exc.strerror}") from None
    if problems:
        raise ConfigError(f"{name} {directory} {' and '.join(problems)}; {holds} and trusts nobody else's: use a "
                          "directory of its own")


def private_dir_problems(directory: str) -> list[str]:
    """Why ``directory`` is not a directory (nor a symbolic link) of this process's user that nobody
    else may enter; empty when it is. Raises ``OSError`` when it cannot be looked at."""
    found = os.lstat(directory)
    problems = []
    if not stat.S_ISDIR(found.st_mode):
        problems.append("is a symbolic link" if stat.S_ISLNK(found.st_mode) else "is not a directory")
    if found.st_uid != os.geteuid():
        problems.append(f"belongs to uid {found.st_uid}, not to this server's user (uid {os.geteuid()})")
    if stat.S_IMODE(found.st_mode) & 0o077:
        problems.append(f"has mode {stat.S_IMODE(found.st_mode):04o}: others may enter it, it must be 0700")
    return problems
