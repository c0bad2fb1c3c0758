"""The framework's own work per search, with the library's answers replayed from memory.

``paired`` measures how much slower an indexplug system is than its raw library and ``steps``
where that time goes, both in place: every search waits on the library (an Elasticsearch round
trip, Chroma's query, the query's embedding) and what the framework does after the answer runs
with the CPU's caches cold from that wait.  This measures the framework's work *without* the
library, twice: once warm, and once after a wait like a real one.

The library calls of the system (:data:`LIBRARY_CALLS`) are recorded during the last warm-up
pass, after one that warms the system as a long-running process is warm (their answers
pickled per query, in call order) and, in the replayed passes, answered from that record: each call gets a fresh copy of what the library said for that query (unpickled
before the timer starts), so the guard, the backend and the harness's reading of the outcome
run exactly as in place, and nothing else does.  Two regimes:

* ``warm``: the replayed searches back to back, with everything they touch in the CPU's caches
  (a lower bound: what the framework's work costs as instructions);
* ``after a wait``: before each search, ``evict_mb`` of memory written and then a sleep as long
  as the raw library's median search, as a real search waits while the server (on the same
  machine here) works through memory of its own.

While recording, no passage count kept by a backend (:class:`indexplug.counts.CountCache`) is
fresh, so a recorded search also holds the count's answer (Elasticsearch's count rides in the
same ``_msearch``): a replayed search whose kept count expired meanwhile finds it there, and one
whose count is fresh ignores it, as the backend would.  A count asked of the library outside
the recorded calls (Chroma's ``count``) is asked for real.  Each replayed answer is compared
with the one given in place for the same query; a search whose answer differs, or that left a
recorded answer unasked, is counted in ``replay_mismatches`` and left out of the medians.
"""

from __future__ import annotations

import pickle
import statistics
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from indexplug_bench.steps import EMBED, QUERY, Wrap, patched, resolve

LIBRARY_CALLS: dict[str, tuple[str, ...]] = {
    "indexplug elastic BM25": ("indexplug_elastic.reads:_msearch",),
    "indexplug chroma (MiniLM)": (EMBED, QUERY),
}
"""Per indexplug system, the functions through which it asks the library underneath (as
``"module:qualified.name"``, where the backend looks them up): everything it does outside them
is the framework's work."""

EVICT_MB = 64
"""Memory written before each search ``after a wait``: well past this machine's private caches
(4 MiB of L2 per core), a share of the L3 the host's cores share."""


@dataclass
class Replay:
    """Records the answers of ``calls`` per query, then answers the calls from the record."""

    calls: tuple[str, ...]
    evict_mb: int = EVICT_MB
    _record: dict[int, list[tuple[str, bytes]]] = field(default_factory=dict)
    _recording: list[tuple[str, bytes]] | None = None
    _answers: deque[tuple[str, Any]] | None = None
    """While replaying: the answers still to give in this search."""

    def _wrap(self, target: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            if self._recording is not None:
                out = fn(*args, **kwargs)
                self._recording.append((target, pickle.dumps(out)))
                return out
            if self._answers is None:
                return fn(*args, **kwargs)  # neither recording nor replaying: the library
            if not self._answers:
                raise LookupError(f"replay: {target} called more often than recorded")
            expected, answer = self._answers.popleft()
            if expected != target:
                raise LookupError(f"replay: {target} called where {expected} was recorded")
            return answer

        return call

    def _counting(self, fresh: Callable[..., Any]) -> Callable[..., Any]:
        def counting(cache: Any, key: str, ttl_s: float) -> tuple[int | None, int]:
            count, generation = fresh(cache, key, ttl_s)
            return (None if self._recording is not None else count), generation

        return counting

    @contextmanager
    def installed(self) -> Iterator[None]:
        """The recording and replaying wrappers in place while the block runs."""
        wraps: list[Wrap] = [(*resolve("indexplug.counts:CountCache.fresh"), self._counting)]
        for target in self.calls:
            owner, name = resolve(target)
            wraps.append((owner, name, partial(self._wrap, target)))
        with patched(wraps):
            yield

    def recorded(self, query: int, search: Callable[[], Any]) -> Any:
        """Run ``search`` (query number ``query``) with its library calls recorded."""
        self._recording = []
        try:
            return search()
        finally:
            self._record[query], self._recording = self._recording, None

    def measure(
        self,
        search: Callable[[int], list[str]],
        in_place: list[list[str]],
        *,
        wait_ms: float,
    ) -> dict[str, Any]:
        """``search(i)`` for every recorded query ``i``, replayed warm and after a wait of
        ``wait_ms``; ``in_place``: each query's answer as given in place (doc ids)."""
        medians: dict[str, float] = {}
        mismatches: dict[str, int] = {}
        junk = bytearray(self.evict_mb << 20)
        zeros = bytes(len(junk[::64]))
        for regime in ("warm", "after a wait"):
            times: list[float] = []
            for i in sorted(self._record):
                self._answers = deque((t, pickle.loads(b)) for t, b in self._record[i])
                if regime == "after a wait":
                    junk[::64] = zeros  # one write per cache line
                    time.sleep(wait_ms / 1000)
                started = time.perf_counter()
                try:
                    ids = search(i)
                finally:
                    took = (time.perf_counter() - started) * 1000
                    left, self._answers = bool(self._answers), None
                if ids == in_place[i] and not left:
                    times.append(took)
                else:
                    mismatches[regime] = mismatches.get(regime, 0) + 1
            if times:
                medians[regime] = round(statistics.median(times), 4)
        return {"replayed_p50_ms": medians, "replay_mismatches": mismatches}
