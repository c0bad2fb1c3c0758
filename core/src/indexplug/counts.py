"""Passage counts kept briefly between searches, for backends whose count costs a request.

Every :class:`~indexplug.outcomes.Searched` and :class:`~indexplug.outcomes.NoMatch` names how
many passages the index holds (``searched``).  On a server that is a request of its own (or a
second search in the same round trip) for every search, although the number changes only when
someone writes.  A backend can keep it here for a short time (its ``count_ttl_s`` setting) and
forget it on every write it makes, so a search reports a count at most that old for writes made
*elsewhere* (other processes, other clients of the server), which a server's own near-real-time
refresh (Elasticsearch's one second) already delays as much.

A cached count only ever names the size; it must never decide an answer alone.  A backend that
finds no hit counts afresh before it says the index is empty (``INDEX_EMPTY``) rather than that
nothing matched (``NO_MATCH``), and reports at least as many passages as it returns hits.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class CountCache:
    """Counts by key (an index as the backend names it process-wide), each with a time bound.

    A generation number per key keeps a count read *during* a write from being kept after
    it: :meth:`forget` moves the generation on, and :meth:`keep` stores a count only if the
    generation is still the one :meth:`fresh` returned before the count was read.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._data: dict[str, tuple[int, int, float]] = {}
        """key -> (generation, count or -1, when counted)"""

    def fresh(self, key: str, ttl_s: float) -> tuple[int | None, int]:
        """The count of ``key`` if one was kept less than ``ttl_s`` ago (else ``None``), and
        the generation to hand back to :meth:`keep` with a count read now."""
        with self._lock:
            gen, count, at = self._data.get(key, (0, -1, 0.0))
        if count >= 0 and time.monotonic() - at < ttl_s:
            return count, gen
        return None, gen

    def keep(self, key: str, generation: int, count: int) -> None:
        """Keep ``count``, read after :meth:`fresh` returned ``generation``, unless a write
        was forgotten since (its count may predate that write)."""
        with self._lock:
            if self._data.get(key, (0, -1, 0.0))[0] == generation:
                self._data[key] = (generation, count, time.monotonic())

    def get(self, key: str, compute: Callable[[], int], ttl_s: float) -> int:
        """The kept count of ``key``, or ``compute()`` (then kept)."""
        count, gen = self.fresh(key, ttl_s)
        if count is not None:
            return count
        count = int(compute())
        self.keep(key, gen, count)
        return count

    def forget(self, key: str) -> None:
        """After a write to ``key`` (or when a count looks wrong): the next search counts."""
        with self._lock:
            gen = self._data.get(key, (0, -1, 0.0))[0]
            self._data[key] = (gen + 1, -1, 0.0)
