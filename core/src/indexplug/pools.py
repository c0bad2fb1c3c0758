"""The thread pools the guard and fusion hand calls to, made on first use.

Importing indexplug starts no thread; a process that never calls a backend without cooperative
deadlines (or never fuses) never makes a pool.  A call abandoned at its deadline keeps running
in its pool thread; :func:`discard` is the callback that swallows its late result or error.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any


class LazyPool:
    """One process-wide :class:`ThreadPoolExecutor`, created by the first :meth:`get`."""

    def __init__(self, max_workers: int, thread_name_prefix: str) -> None:
        self.max_workers = max_workers
        self.thread_name_prefix = thread_name_prefix
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    def get(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    max_workers=self.max_workers, thread_name_prefix=self.thread_name_prefix
                )
            return self._pool


def discard(fut: Future[Any]) -> None:
    """Swallow the late result or exception of an abandoned call."""
    if not fut.cancelled():
        fut.exception()
