"""One writer per index at a time, across threads and processes, bounded by the op's deadline.

Writes stage files and then replace a manifest; two writers staging from the same generation
would each commit a manifest missing the other's segment.  So every write holds the index's lock
from reading the generation it builds on until it commits.  Within a process a
:class:`threading.Lock` per index orders threads; across processes ``flock`` on a lock file
outside the index folder (so dropping an index never deletes a lock another process holds).
Readers never take it.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from indexplug.deadlines import Deadline

from indexplug_colbert.engines.base import DeadlineExceeded

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: threads only
    fcntl = None  # type: ignore[assignment]

CROSS_PROCESS = fcntl is not None
"""Whether writers in different processes are serialised (claims ``multiprocess_writers``)."""
POLL_S = 0.005
WAITING = "the index's write lock was free (another writer held it)"

_registry_lock = threading.Lock()
_thread_locks: dict[str, threading.Lock] = {}


def _thread_lock(path: Path) -> threading.Lock:
    key = os.path.abspath(path)
    with _registry_lock:
        lock = _thread_locks.get(key)
        if lock is None:
            lock = _thread_locks[key] = threading.Lock()
        return lock


@contextmanager
def write_lock(path: Path, deadline: Deadline) -> Iterator[None]:
    """Hold the lock at ``path`` (created on demand); :class:`DeadlineExceeded` if it cannot be
    had before the deadline."""
    lock = _thread_lock(path)
    if not lock.acquire(timeout=max(deadline.remaining(), 0.0) or 0.0):
        raise DeadlineExceeded(WAITING)
    try:
        if fcntl is None:
            yield
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if deadline.expired():
                        raise DeadlineExceeded(WAITING) from None
                    time.sleep(POLL_S)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
    finally:
        lock.release()
