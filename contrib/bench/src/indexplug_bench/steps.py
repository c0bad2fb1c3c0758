"""Where a pair's difference goes: the steps of each side timed in place.

``paired`` says how much slower an indexplug system is than its raw library; this says where
that time goes.  It runs the same turns as :func:`indexplug_bench.paired.measure_pair` (both
sides in one process, every query asked of both, the order alternating) with named functions
wrapped by a timer: the library call both sides make (Chroma's ``Collection.query``, the
query's embedding, the Elasticsearch round trip), the backend's own steps (rebuilding hits) and
the guard's (its checks of the hits; for a call on its worker thread, the hand-off there and
back).  Each step's time per search is summed over its calls in that search; the result is the
median over the timed searches, per side.

Why in place rather than in a loop of its own: a step timed alone runs with its objects in the
CPU's caches, and the framework's share of a search is Python touching objects per hit, which
costs two to three times as much right after the server's answer (measured for rebuilding hits:
``core/bench/hit_building.py``).  The timers cost about a microsecond per wrapped call, so the
totals here run a little above ``paired``'s; the steps are what to compare.
"""

from __future__ import annotations

import importlib
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

EMBED = "indexplug_sentence_transformers.embedder:SentenceTransformerEmbedder.embed_query"
QUERY = "chromadb.api.models.Collection:Collection.query"

GUARD_STEPS: tuple[tuple[str, str], ...] = (
    ("guard: checks of the hits", "indexplug.guard:Guard._checked_hits"),
)
"""Timed for every indexplug system (the guard is what users call)."""

STEPS: dict[str, tuple[tuple[str, str], ...]] = {
    "indexplug elastic BM25": (
        ("elasticsearch: _msearch round trip", "indexplug_elastic.reads:_msearch"),
        ("backend: hits built", "indexplug_elastic.reads:hits_of"),
        ("backend: whole search", "indexplug_elastic.reads:search"),
    ),
    "raw elasticsearch (same query, orjson)": (
        ("elasticsearch: search round trip", "elasticsearch:Elasticsearch.search"),
    ),
    "indexplug chroma (MiniLM)": (
        ("embedder: query embedded", EMBED),
        ("chroma: query", QUERY),
        ("backend: hits rebuilt", "indexplug_chroma.queries:_hits"),
        ("backend: whole search", "indexplug_chroma.backend:ChromaBackend._search"),
    ),
    "raw chromadb (MiniLM)": (
        ("embedder: query embedded", EMBED),
        ("chroma: query", QUERY),
    ),
    "indexplug sqlite-fts5": (
        ("backend: whole search", "indexplug_sqlite_fts5.backend:SqliteFts5Backend.search"),
    ),
}
"""Steps per system, as ``(label, "module:qualified.name")``.  A function imported by name into
another module is timed where that module looks it up (``indexplug_elastic.reads``'s
``hits_of``)."""


_INHERITED = object()
"""Marks an attribute that was looked up on a base class (removed again, not set back)."""


def resolve(target: str) -> tuple[Any, str]:
    """The object holding ``target``'s last attribute, and that attribute's name."""
    module, _, qualname = target.partition(":")
    owner: Any = importlib.import_module(module)
    *path, name = qualname.split(".")
    for part in path:
        owner = getattr(owner, part)
    if not callable(getattr(owner, name, None)):
        raise LookupError(f"{target} is not a function")
    return owner, name


Wrap = tuple[Any, str, Callable[[Callable[..., Any]], Callable[..., Any]]]
"""``(owner, name, wrap)``: ``owner.name`` to be replaced by ``wrap(owner.name)``."""


@contextmanager
def patched(wraps: list[Wrap]) -> Iterator[None]:
    """Every wrap in place while the block runs, each attribute put back after (one after the
    other, undone in reverse: a wrapper may wrap a wrapper)."""
    saved: list[tuple[Any, str, Any]] = []
    try:
        for owner, name, wrap in wraps:
            saved.append((owner, name, vars(owner).get(name, _INHERITED)))
            setattr(owner, name, wrap(getattr(owner, name)))
        yield
    finally:
        for owner, name, original in reversed(saved):
            if original is _INHERITED:
                delattr(owner, name)
            else:
                setattr(owner, name, original)


@dataclass
class Steps:
    """Timers on named functions, charged to whichever side is searching (:meth:`turn`)."""

    labels: dict[str, tuple[tuple[str, str], ...]]
    """Per side (``system``, ``raw``): the steps to time."""
    samples: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    _side: str | None = None
    _now: dict[str, float] = field(default_factory=dict)
    _stamps: dict[str, int] = field(default_factory=dict)

    def _timed(self, label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter_ns()
            try:
                return fn(*args, **kwargs)
            finally:
                if self._side is not None:
                    took = (time.perf_counter_ns() - started) / 1e6
                    self._now[label] = self._now.get(label, 0.0) + took

        return timed

    def _stamped(self, name: str, fn: Callable[..., Any], *, end: str) -> Callable[..., Any]:
        """Marks when ``fn`` starts (``name``) and returns (``end``)."""

        def stamped(*args: Any, **kwargs: Any) -> Any:
            self._stamps[name] = time.perf_counter_ns()
            try:
                return fn(*args, **kwargs)
            finally:
                self._stamps[end] = time.perf_counter_ns()

        return stamped

    @contextmanager
    def installed(self, backends: list[Any]) -> Iterator[None]:
        """The timers in place while the block runs; ``backends``: the guarded plugin objects
        whose ``search`` marks the hand-off to and from the guard's worker thread."""
        from indexplug.guard import Guard

        wraps: list[Wrap] = []
        seen: set[str] = set()
        for steps in self.labels.values():
            for label, target in steps:
                if target not in seen:
                    seen.add(target)
                    owner, name = resolve(target)
                    wraps.append((owner, name, partial(self._timed, label)))
        for cls in {type(b) for b in backends}:
            wraps.append((cls, "search", partial(self._stamped, "op", end="op_end")))
        wraps.append((Guard, "_run", partial(self._stamped, "call", end="call_end")))
        with patched(wraps):
            yield

    def turn(self, side: str, search: Callable[[], Any], *, timed: bool) -> Any:
        """Run one search of ``side``; when ``timed``, keep what each step took in it."""
        self._side, self._now, self._stamps = side, {}, {}
        try:
            return search()
        finally:
            self._side = None
            if timed:
                got = dict(self._now)
                s = self._stamps
                if {"call", "op", "op_end", "call_end"} <= s.keys():
                    # the plugin's search starts after the guard's checks before it (and, for
                    # a pooled call, the hand-off to its worker); what follows it is the checks
                    # of the answer and the hand-back
                    got["guard: before the op (checks, hand-off)"] = (s["op"] - s["call"]) / 1e6
                    got["guard: after the op (checks, hand-back)"] = (
                        s["call_end"] - s["op_end"]
                    ) / 1e6
                side_samples = self.samples.setdefault(side, {})
                labels = {label for label, _ in self.labels.get(side, ())} | set(got)
                for label in labels:
                    side_samples.setdefault(label, []).append(got.get(label, 0.0))

    def medians(self) -> dict[str, dict[str, float]]:
        """Per side, per step: the median over the timed searches (ms)."""
        return {
            side: {label: round(statistics.median(v), 3) for label, v in sorted(steps.items())}
            for side, steps in self.samples.items()
        }


def for_pair(system: str, raw: str) -> Steps:
    """The timers for ``system`` against ``raw`` (the guard's steps on the system's side)."""
    return Steps(labels={"system": GUARD_STEPS + STEPS.get(system, ()), "raw": STEPS.get(raw, ())})
