"""Deadlines: an absolute point in monotonic time that every op must finish by.

An absolute deadline (rather than a timeout per call) lets a backend split its budget across
several steps (connect, query, fetch) and lets fusion run its legs under one shared limit.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from indexplug.errors import InvalidRequest

DEFAULT_DEADLINE_S = 10.0
MAX_DEADLINE_S = 7 * 86_400.0
"""The longest deadline taken (a week): past it, waits on threads overflow the platform's
timeout and the caller most likely sent milliseconds or a typo."""


@dataclass(frozen=True, slots=True)
class Deadline:
    seconds: float
    """The full allowance the op was given, for reporting."""
    at: float
    """``time.monotonic()`` value by which the op must be done."""

    @classmethod
    def after(cls, seconds: float | None) -> Deadline:
        """A deadline ``seconds`` from now (``None``: :data:`DEFAULT_DEADLINE_S`).  Only a real
        number is taken: a string or a bool is a caller's mistake, not a duration."""
        if seconds is None:
            s = DEFAULT_DEADLINE_S
        elif isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise InvalidRequest(
                f"a deadline must be a number of seconds, got {type(seconds).__name__}",
                field="deadline_s",
            )
        else:
            s = float(seconds)
        if not (math.isfinite(s) and 0 < s <= MAX_DEADLINE_S):
            raise InvalidRequest(
                f"a deadline must be a positive number of seconds up to {MAX_DEADLINE_S:g}, "
                f"got {seconds!r}",
                field="deadline_s",
            )
        return cls(seconds=s, at=time.monotonic() + s)

    def remaining(self) -> float:
        """Seconds left, never negative."""
        return max(0.0, self.at - time.monotonic())

    def expired(self) -> bool:
        return time.monotonic() >= self.at
