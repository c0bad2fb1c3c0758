"""Timing helpers the worker and the paired harness share: percentiles and timed indexing."""

from __future__ import annotations

import time
from typing import Any


def pct(samples: list[float], q: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def index_all(runner: Any, batches: Any) -> float:
    """Index every batch of ``batches()`` and finish; the seconds the runner's own calls took.

    Only the system's calls are timed: a synthetic corpus is generated batch by batch (not
    held in memory, which would swell the peak), and that generation is not the system's work.
    """
    took = 0.0
    for batch in batches():
        t0 = time.perf_counter()
        runner.index(batch)
        took += time.perf_counter() - t0
    t0 = time.perf_counter()
    runner.finish()
    return took + time.perf_counter() - t0
