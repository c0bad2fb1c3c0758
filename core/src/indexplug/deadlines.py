"""Deadlines: an absolute point in monotonic time that every op must finish by.

An absolute deadline (rather than a timeout per call) lets a backend split its budget across
several steps (connect, query, fetch) and lets fusion run its legs under one shared limit.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

DEFAULT_DEADLINE_S = 10.0


@dataclass(frozen=True, slots=True)
class Deadline:
    seconds: float
    """The full allowance the op was given, for reporting."""
    at: float
    """``time.monotonic()`` value by which the op must be done."""

    @classmethod
    def after(cls, seconds: float | None) -> Deadline:
        s = DEFAULT_DEADLINE_S if seconds is None else float(seconds)
        if not s > 0:
            raise ValueError(f"a deadline must be a positive number of seconds, got {seconds!r}")
        return cls(seconds=s, at=time.monotonic() + s)

    def remaining(self) -> float:
        """Seconds left, never negative."""
        return max(0.0, self.at - time.monotonic())

    def expired(self) -> bool:
        return time.monotonic() >= self.at
