"""Where indexes live: ``INDEXPLUG_HOME``, else the platform's user data folder."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import platformdirs


def home_dir() -> Path:
    env = os.environ.get("INDEXPLUG_HOME")
    path = Path(env).expanduser() if env else Path(platformdirs.user_data_dir("indexplug"))
    return path


def backend_home(backend: str) -> Path:
    """The folder a backend keeps its files in (created on demand by the backend)."""
    return home_dir() / backend


def folder_problem(path: Path) -> str | None:
    """Why indexes cannot be kept in the folder ``path`` (None if they can, so far as its
    ancestors tell): the nearest of ``path`` and its ancestors that exists is not a folder (an
    ``INDEXPLUG_HOME`` pointing at a file).  Such a home reads as holding nothing, so each
    index on it would pass for an empty one: the guard reports it as unavailable instead."""
    for p in (path, *path.parents):
        try:
            st = p.stat()
        except FileNotFoundError:
            continue
        except OSError as exc:  # a file in the path (ENOTDIR), no permission, a loop
            if exc.errno == errno.ENOTDIR:
                continue
            return f"the index folder {path} cannot be reached: {exc.strerror or exc}"
        if stat.S_ISDIR(st.st_mode):
            return None
        return (
            f"the index folder {path} cannot be made: {p} is a file, not a folder "
            "(check INDEXPLUG_HOME)"
        )
    return None
