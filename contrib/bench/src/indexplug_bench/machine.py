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


def processor() -> str:
    """The processor's model name (``lscpu``'s *Model name*), where Linux says it."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe() -> dict[str, Any]:
    return {
        "cores": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "cpu": processor(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "versions": versions(),
    }


def cpu_clock() -> tuple[float, float]:
    """``(stolen, total)`` CPU seconds of the whole machine so far.

    On a virtual machine the host may run other guests on "our" cores: the time it takes away
    (*steal*) slows every wall-clock figure without showing in the load average, and it comes
    and goes (0% and 20% minutes apart on this project's machine).  A row states its share so
    a reader can tell a slow system from a slow moment.
    """
    t = psutil.cpu_times()
    # guest time is already counted in user time
    total = sum(t) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)
    return getattr(t, "steal", 0.0), total


def steal_pct(start: tuple[float, float], end: tuple[float, float]) -> float | None:
    """The share (percent) of the machine's CPU time stolen between two :func:`cpu_clock`."""
    total = end[1] - start[1]
    if total <= 0:
        return None
    return round(100.0 * (end[0] - start[0]) / total, 1)
