"""The guard's limits, its shared helpers and plans, and :class:`GuardBase`: the state
every part of the guard holds (the backend, its pool, readiness, prepare, close)."""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from indexplug.deadlines import Deadline
from indexplug.errors import InvalidRequest
from indexplug.filters import (
    And,
    Condition,
    Not,
    Or,
)
from indexplug.home import folder_problem
from indexplug.outcomes import (
    IndexFailed,
    Removed,
)
from indexplug.passages import (
    Passage,
)
from indexplug.pools import LazyPool, discard
from indexplug.protocols import Embedder, IndexBackend, Readiness

MAX_TOP_K = 10_000
MAX_BATCH = 10_000
MAX_QUERY_CHARS = 100_000
MAX_REMOVE_IDS = 100_000
MAX_SCAN = 10_000
"""Largest page of a scan."""
MAX_WRITE = 1_000_000
"""Most passages in one ``add`` (sent to the plugin in batches of :data:`WRITE_BATCH`)."""
WRITE_BATCH = 256
"""Passages per plugin call of a large write: the unit of progress and of what a failed
write keeps."""
WRITE_DEADLINE_S = 86_400.0
"""The deadline of a write given none: a day, a backstop for a call that never returns, not a
limit any real write meets (writes in Python have no deadline by default)."""
_WRITES = frozenset({"drop", "optimize", "rebuild", "migrate"})
SETTLE_S = 0.02
"""How long past the deadline the caller waits for the guard's own checks of an answer the
plugin gave *before* the deadline (an answer given after it is ``IndexTimeout`` anyway)."""
CHECKED_PASSAGES = 16_384
"""How many checked passages the guard remembers (then it forgets the oldest)."""
READY_TTL_S = 1.0
PREPARE_S = 120.0
"""Longest the guard waits for a backend's ``prepare()`` before the first search; past it the
search starts anyway, under its own deadline (and the load goes on in its pool thread)."""
"""A *ready* answer is trusted this long; a not-ready one is asked again on every call."""

POOL_WORKERS = 32
"""Threads of each backend's pool."""
_POOLS: dict[str, LazyPool] = {}
_POOLS_LOCK = threading.Lock()


def _pool(plugin: str) -> LazyPool:
    """Where every call of backend ``plugin`` runs (abandoned at its deadline): one pool per
    backend, so a backend whose calls never return fills only its own threads, and another
    backend's callers never wait behind them for a thread and time out for it."""
    with _POOLS_LOCK:
        pool = _POOLS.get(plugin)
        if pool is None:
            pool = _POOLS[plugin] = LazyPool(POOL_WORKERS, f"indexplug-{plugin}")
        return pool


FILTER_TYPES = (Condition, And, Or, Not)


class _Refused(Exception):
    """A hit the guard will not serve; ``outcome`` says why."""

    def __init__(self, outcome: IndexFailed) -> None:
        self.outcome = outcome


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = text[:300]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class GuardBase:
    """What every part of the guard holds: the backend, its pool, the readiness and prepare
    state, the checked passages; and the backend's own declarations."""

    def __init__(self, backend: IndexBackend, *, plugin: str | None = None) -> None:
        self.backend = backend
        self.plugin = plugin or getattr(backend, "name", type(backend).__name__)
        self._pool = _pool(str(self.plugin))
        self._ready_until = 0.0
        self._ready_lock = threading.Lock()
        self._checked: dict[str, Passage] = {}
        """Passages this guard checked and built, by digest (see :meth:`_passage`)."""
        self._checked_lock = threading.Lock()
        self.embedder: Embedder | None = None
        """The embedder object the caller gave when opening the backend
        (``open_backend(..., embedder=...)``), else None (the backend builds its own, if any,
        from its settings)."""
        self._prepared = False
        self._prepare_lock = threading.Lock()

    # -- what the backend declares -------------------------------------------------------
    @property
    def name(self) -> str:
        return str(getattr(self.backend, "name", self.plugin))

    @property
    def score_scale(self) -> Any:
        return self.backend.score_scale

    @property
    def capabilities(self) -> Any:
        return self.backend.capabilities

    def readiness(self) -> Readiness:
        """The plugin's own readiness, with a raising or lying plugin reported as not ready."""
        try:
            r = self.backend.readiness()
        except Exception as exc:
            return Readiness.no(f"readiness check raised {_describe(exc)}")
        if not isinstance(r, Readiness):
            return Readiness.no(f"readiness() returned {type(r).__name__}, not Readiness")
        if not r.ready and not r.reason:
            return Readiness.no("not ready (the backend gave no reason)")
        home = getattr(self.backend, "home", None)
        if r.ready and isinstance(home, Path):
            problem = folder_problem(home)
            if problem is not None:
                return Readiness.no(problem)
        return r

    def prepare(self) -> None:
        """Run the backend's optional ``prepare()`` (e.g. load the model that embeds queries),
        once per guard, outside any op's deadline.

        Why: loading a model takes from a fraction of a second to many seconds on a loaded
        machine, and charging it to the first search's deadline turned plain first searches
        into ``INDEX_TIMEOUT``.  The backend says on a terminal that it is loading.  The wait is
        bounded by :data:`PREPARE_S`; an error is left for the op, which reports it.
        """
        if self._prepared:
            return
        with self._prepare_lock:
            if self._prepared:
                return
            self._prepared = True
            fn = getattr(self.backend, "prepare", None)
            if not callable(fn):
                return
            future: Future[Any] = self._pool.get().submit(fn)
            try:
                future.result(timeout=PREPARE_S)
            except TimeoutError:
                future.add_done_callback(discard)
            except Exception:
                pass  # the op that needs what failed to load says why

    def close(self) -> None:
        closer = getattr(self.backend, "close", None)
        if callable(closer):
            try:
                closer()
            except Exception:
                pass


def _degradation(d: Any) -> Any:
    from indexplug.outcomes import Degradation

    if type(d) is not Degradation:
        raise TypeError(f"a degradation note is a {type(d).__name__}")
    return Degradation.model_validate(dict(d.__dict__))


def _present(passage: Any, before: Any, after: Any) -> dict[str, Any]:
    """The checked passages of an answer, by field, for those it has."""
    out: dict[str, Any] = {}
    if passage is not None:
        out["passage"] = passage
    if before is not None:
        out["before"] = before
    if after is not None:
        out["after"] = after
    return out


def _stamped(out: BaseModel, **update: Any) -> Any:
    """A copy of the guard's own ``out`` with ``update`` applied (values of declared types)."""
    return out.model_copy(update=update)


Progress = Callable[[int, int], None]
"""``progress(done, total)``: passages written so far, of how many."""


@dataclass(frozen=True, slots=True)
class _Plan:
    """One plugin call, ready to run: what :meth:`Guard._run` and :meth:`Guard._arun` take."""

    op: str
    index: str
    deadline: Deadline
    fn: Callable[[], Any]
    check: Callable[[Any], Any]
    native: Callable[[], Awaitable[Any]] | None = None


@dataclass(frozen=True, slots=True)
class _AddPlan:
    deadline: Deadline
    chunks: list[list[Passage]]
    total: int
    dupes: int


def _write_deadline(deadline_s: float | None) -> float:
    return WRITE_DEADLINE_S if deadline_s is None else deadline_s


def _chunks(batch: list[Passage], size: int) -> list[list[Passage]]:
    """``batch`` in pieces of about ``size``, one caller key's passages never split (so that
    each key is replaced at once); an empty batch is one empty piece."""
    if len(batch) <= size:
        return [batch]
    groups: dict[Any, list[Passage]] = {}
    for p in batch:
        groups.setdefault(p.key if p.key is not None else ("", p.id), []).append(p)
    out: list[list[Passage]] = [[]]
    for group in groups.values():
        if out[-1] and len(out[-1]) + len(group) > size:
            out.append([])
        out[-1].extend(group)
    return out


def _strings(field: str, values: Sequence[str], limit: int) -> list[str]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise InvalidRequest(f"{field} must be a list of strings", field=field)
    if len(values) > limit:
        raise InvalidRequest(f"at most {limit} {field} per call", field=field)
    if not all(type(v) is str and v and "\x00" not in v for v in values):
        raise InvalidRequest(f"{field} must be non-empty strings without NUL", field=field)
    if not all(_is_unicode(v) for v in values):
        raise InvalidRequest(
            f"{field} must be Unicode text (one holds a lone surrogate)", field=field
        )
    return list(values)


def _is_unicode(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8 (a lone surrogate does not): no passage id, key or
    cursor can hold such text, and backends cannot encode it, so it is refused up front."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_remove_count(n: int, field: str) -> None:
    """Refuse a remove of more than :data:`MAX_REMOVE_IDS` passages (what its ``keys`` or
    ``filters`` came to), before anything is removed."""
    if n > MAX_REMOVE_IDS:
        raise InvalidRequest(
            f"more than {MAX_REMOVE_IDS} passages would be removed ({n} with the {field}); "
            "remove them in parts",
            field=field,
        )


def _check_count(field: str, n: Any, low: int, high: int) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or not low <= n <= high:
        raise InvalidRequest(
            f"{field} must be an integer from {low} to {high}, got {n!r}", field=field
        )


def _with_missing_keys(out: Any, missing_keys: list[str]) -> Any:
    if missing_keys and isinstance(out, Removed):
        return out.model_copy(update={"missing_keys": missing_keys})
    return out
