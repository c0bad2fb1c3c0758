"""Where indexes live: ``INDEXPLUG_HOME``, else the platform's user data folder."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs


def home_dir() -> Path:
    env = os.environ.get("INDEXPLUG_HOME")
    path = Path(env).expanduser() if env else Path(platformdirs.user_data_dir("indexplug"))
    return path


def backend_home(backend: str) -> Path:
    """The folder a backend keeps its files in (created on demand by the backend)."""
    return home_dir() / backend
