"""What every figure states: the machine, the versions, the command."""

from __future__ import annotations

import os
import platform
import sys
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import psutil

PACKAGES = (
    "indexplug",
    "indexplug-sqlite-fts5",
    "indexplug-chroma",
    "indexplug-elastic",
    "indexplug-colbert",
    "indexplug-sentence-transformers",
    "chromadb",
    "elasticsearch",
    "bm25s",
    "rank-bm25",
    "sentence-transformers",
    "torch",
    "numpy",
    "ragatouille",
)


def versions() -> dict[str, str]:
    out: dict[str, str] = {}
    for name in PACKAGES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            continue
    import sqlite3

    out["sqlite"] = sqlite3.sqlite_version
    return out


def describe() -> dict[str, Any]:
    return {
        "cores": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "cpu": platform.processor() or platform.machine(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "versions": versions(),
    }
