"""The count cache backends keep between searches (``indexplug.counts``)."""

from __future__ import annotations

import time

from indexplug.counts import CountCache


def test_a_count_is_kept_for_its_ttl_and_forgotten_by_a_write() -> None:
    cache = CountCache()
    calls: list[int] = []

    def count() -> int:
        calls.append(1)
        return 7

    assert cache.get("a", count, ttl_s=60) == 7
    assert cache.get("a", count, ttl_s=60) == 7 and len(calls) == 1
    assert cache.get("a", count, ttl_s=0) == 7 and len(calls) == 2  # ttl 0: count every time
    assert cache.fresh("b", 60)[0] is None  # each key its own
    cache.forget("a")
    assert cache.fresh("a", 60)[0] is None
    assert cache.get("a", lambda: 9, ttl_s=60) == 9


def test_a_count_read_during_a_write_is_not_kept() -> None:
    cache = CountCache()
    kept, generation = cache.fresh("a", 60)
    assert kept is None
    cache.forget("a")  # a write lands while the count is being read
    cache.keep("a", generation, 5)
    assert cache.fresh("a", 60)[0] is None
    _, generation = cache.fresh("a", 60)
    cache.keep("a", generation, 6)
    assert cache.fresh("a", 60)[0] == 6


def test_a_count_expires() -> None:
    cache = CountCache()
    cache.get("a", lambda: 3, ttl_s=60)
    time.sleep(0.02)
    assert cache.fresh("a", 0.01)[0] is None
    assert cache.fresh("a", 60)[0] == 3
