"""The guard: the only way the core calls a backend.

Whatever a plugin does, the caller gets exactly one allowed outcome:

* a request that is wrong (a name that is a path, ``top_k`` of 0, an oversize batch) is refused
  with a typed :class:`~indexplug.errors.InvalidRequest` before the plugin is involved;
* a plugin that is not ready is not called: ``IndexUnavailable`` with its reason;
* a plugin that raises becomes ``IndexFailed`` naming the plugin and the error;
* a plugin that returns anything but an allowed outcome of the exact type (a bare list,
  ``None``, a subclass, an empty ``Searched``, fields of the wrong type) becomes
  ``IndexFailed`` with a contract-violation reason;
* every op runs on a worker thread, and the caller is released at its deadline: an answer
  that comes back after the deadline is ``IndexTimeout``, whatever it says;
* a backend's optional ``prepare()`` (loading a query model) runs once, before the deadline of
  the first search starts (bounded by :data:`PREPARE_S`), so a search's deadline is spent
  searching, not loading;
* every hit of every answer is checked (ranks 1..n, finite scores in order, the declared
  scale, at most ``top_k``, each passage matching its content-addressed id and its digest),
  and the caller gets copies the guard built from the checked values, so nothing the plugin
  keeps or changes afterwards can reach the caller.

The guard keeps one memory: the passages it has checked (:data:`CHECKED_PASSAGES`, by
digest).  A hit whose passage has exactly the fields of one it remembers gets that checked
passage without hashing again.  Only the guard fills it, from its own copies.
"""

from __future__ import annotations

from indexplug.guard.admin import Admin
from indexplug.guard.base import (
    CHECKED_PASSAGES,
    FILTER_TYPES,
    MAX_BATCH,
    MAX_QUERY_CHARS,
    MAX_REMOVE_IDS,
    MAX_SCAN,
    MAX_TOP_K,
    MAX_WRITE,
    POOL_WORKERS,
    PREPARE_S,
    READY_TTL_S,
    SETTLE_S,
    WRITE_BATCH,
    WRITE_DEADLINE_S,
    Progress,
)
from indexplug.guard.vectors import Vectors

__all__ = [
    "CHECKED_PASSAGES",
    "FILTER_TYPES",
    "MAX_BATCH",
    "MAX_QUERY_CHARS",
    "MAX_REMOVE_IDS",
    "MAX_SCAN",
    "MAX_TOP_K",
    "MAX_WRITE",
    "POOL_WORKERS",
    "PREPARE_S",
    "READY_TTL_S",
    "SETTLE_S",
    "WRITE_BATCH",
    "WRITE_DEADLINE_S",
    "Guard",
    "Progress",
]


class Guard(Vectors, Admin):
    """Wraps one backend instance and enforces the contract on every call.

    Use it exactly like the backend: ``guard.search("docs", "query", top_k=5)``.  Deadlines are
    given in seconds (``deadline_s``); the guard turns them into an absolute
    :class:`~indexplug.deadlines.Deadline` the plugin can plan with.
    """
