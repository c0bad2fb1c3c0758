"""Large writes: sent in batches of WRITE_BATCH (one caller key's passages never split), with
progress, and a failure part-way keeping, and saying, what was stored, so that repeating the
call completes the rest without duplicates."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from indexplug.deadlines import Deadline
from indexplug.errors import InvalidRequest
from indexplug.guard import MAX_WRITE, WRITE_BATCH, WRITE_DEADLINE_S, Guard
from indexplug.outcomes import (
    Indexed,
    IndexFailed,
    IndexStatus,
    IndexTimeout,
    IndexUnavailable,
    NoMatch,
    OverBudget,
    Removed,
    ScoreScale,
)
from indexplug.passages import Passage
from indexplug.protocols import Capabilities, Readiness


def passage(i: int, *, key: str | None = None) -> Passage:
    return Passage.create(f"otter fact {i}", f"mem://doc/{i}", key=key)


MANY = [passage(i) for i in range(2 * WRITE_BATCH + 88)]  # three batches: 256, 256, 88


class Store:
    """An in-memory backend that records every add call; ``fail`` scripts an answer (or an
    exception) for the add call of that number (1-based), once."""

    name = "store"
    description = "records writes"
    score_scale = ScoreScale(name="test")
    capabilities = Capabilities(keys=True)

    def __init__(self, fail: dict[int, Any] | None = None) -> None:
        self.fail = dict(fail or {})
        self.calls: list[list[Passage]] = []
        self.deadlines: list[Deadline] = []
        self.data: dict[str, Passage] = {}
        self.new: list[str] = []
        """Every id the backend stored as new, in order (a duplicate would show twice)."""
        self.lock = threading.Lock()

    def readiness(self) -> Readiness:
        return Readiness.yes()

    def close(self) -> None:
        pass

    def add(
        self, index: str, passages: Sequence[Passage], *, max_bytes: Any, deadline: Deadline
    ) -> Any:
        self.calls.append(list(passages))
        self.deadlines.append(deadline)
        scripted = self.fail.pop(len(self.calls), None)
        if isinstance(scripted, BaseException):
            raise scripted
        if isinstance(scripted, threading.Event):
            scripted.wait(30)  # stuck until released; then it stores the batch after all
        elif scripted is not None:
            return scripted
        with self.lock:
            keys = {p.key for p in passages if p.key is not None}
            ids = {p.id for p in passages}
            stale = [i for i, p in self.data.items() if p.key in keys and i not in ids]
            for i in stale:
                del self.data[i]
            added = [p.id for p in passages if p.id not in self.data]
            self.data.update((p.id, p) for p in passages)
            self.new += added
        out = Indexed.of_batch(
            index=index, backend=self.name, ids=[p.id for p in passages], added_ids=added
        )
        return out.model_copy(update={"replaced": len(stale)})

    def search(self, index: str, query: str, **kw: Any) -> Any:
        return NoMatch(index=index, backend=self.name, searched=len(self.data))

    def remove(self, index: str, ids: Sequence[str], **kw: Any) -> Any:
        return Removed.of_batch(index=index, backend=self.name, ids=ids, removed_ids=[])

    def status(self, index: str, **kw: Any) -> Any:
        return IndexStatus(index=index, backend=self.name, exists=True, passages=len(self.data))


def sizes(store: Store) -> list[int]:
    return [len(c) for c in store.calls]


# -- batches -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "n, expected",
    [
        (0, [0]),
        (1, [1]),
        (WRITE_BATCH, [WRITE_BATCH]),
        (WRITE_BATCH + 1, [WRITE_BATCH, 1]),
        (len(MANY), [WRITE_BATCH, WRITE_BATCH, 88]),
    ],
)
def test_writes_go_in_batches(n: int, expected: list[int]) -> None:
    store = Store()
    out = Guard(store).add("docs", MANY[:n])
    assert sizes(store) == expected
    assert type(out) is Indexed and out.added == n and out.known == 0
    assert out.added_ids == [p.id for p in MANY[:n]]
    assert store.new == [p.id for p in MANY[:n]]


def test_every_batch_of_a_write_shares_its_deadline() -> None:
    store = Store()
    Guard(store).add("docs", MANY)
    assert len(store.deadlines) == 3 and len({d.at for d in store.deadlines}) == 1
    assert store.deadlines[0].seconds == WRITE_DEADLINE_S == 86_400


def test_a_batched_write_adds_up_its_batches() -> None:
    store = Store()
    g = Guard(store)
    assert isinstance(g.add("docs", MANY[:300]), Indexed)
    before = len(store.calls)
    dupes = MANY[:5]
    out = g.add("docs", MANY + dupes)
    assert type(out) is Indexed
    assert out.added == len(MANY) - 300
    assert out.known == 300 + len(dupes)  # duplicates in the call count as known
    assert out.added_ids == [p.id for p in MANY[300:]]
    assert out.known_ids == [p.id for p in MANY[:300]]
    assert sum(sizes(store)[before:]) == len(MANY)  # the duplicates were not sent


def test_one_keys_passages_are_never_split() -> None:
    store = Store()
    loose = [passage(i) for i in range(WRITE_BATCH - 6)]
    doc = [passage(1000 + i, key="doc") for i in range(20)]
    out = Guard(store).add("docs", loose + doc)
    assert type(out) is Indexed and out.added == len(loose) + len(doc)
    assert sizes(store) == [len(loose), len(doc)]
    assert store.calls[1] == doc


def test_a_key_larger_than_a_batch_goes_in_one_call() -> None:
    store = Store()
    doc = [passage(i, key="big") for i in range(WRITE_BATCH + 40)]
    out = Guard(store).add("docs", [passage(9999), *doc])
    assert type(out) is Indexed
    assert sizes(store) == [1, WRITE_BATCH + 40]


def test_upserts_across_batches_add_up_what_they_replaced() -> None:
    store = Store()
    g = Guard(store)
    old = [passage(i, key=f"k{i % 3}") for i in range(600)]
    assert isinstance(g.add("docs", old), Indexed)
    new = [passage(10_000 + i, key=f"k{i % 3}") for i in range(3)]
    out = g.add("docs", [*new, *(passage(20_000 + i) for i in range(WRITE_BATCH))])
    assert type(out) is Indexed and out.replaced == 600
    assert len(store.data) == 3 + WRITE_BATCH


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 90), min_size=1, max_size=12))
def test_batches_hold_whole_keys_and_every_passage_once(groups: list[int]) -> None:
    # groups: the size of each key's group (0: a passage without a key)
    batch: list[Passage] = []
    for g, size in enumerate(groups):
        if size == 0:
            batch.append(passage(50_000 + g))
        batch += [passage(g * 1000 + i, key=f"key-{g}") for i in range(size)]
    store = Store()
    out = Guard(store).add("docs", batch)
    assert type(out) is Indexed and out.added == len(batch)
    sent = [p.id for call in store.calls for p in call]
    assert sorted(sent) == sorted(p.id for p in batch)  # every passage, once
    for call in store.calls:
        keys_here = {p.key for p in call if p.key is not None}
        assert len(call) <= WRITE_BATCH or len(keys_here) == 1
        for other in store.calls:
            if other is not call:
                assert not keys_here & {p.key for p in other}


# -- progress ----------------------------------------------------------------------------------


def test_progress_is_called_after_each_batch() -> None:
    seen: list[tuple[int, int]] = []
    Guard(Store()).add("docs", MANY, progress=lambda done, total: seen.append((done, total)))
    total = len(MANY)
    assert seen == [(WRITE_BATCH, total), (2 * WRITE_BATCH, total), (total, total)]


def test_progress_counts_distinct_passages() -> None:
    seen: list[tuple[int, int]] = []
    Guard(Store()).add("docs", MANY + MANY[:10], progress=lambda d, t: seen.append((d, t)))
    assert seen[-1] == (len(MANY), len(MANY))
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_progress_stops_at_a_failure() -> None:
    seen: list[tuple[int, int]] = []
    store = Store({3: OSError("disk full")})
    Guard(store).add("docs", MANY, progress=lambda d, t: seen.append((d, t)))
    assert seen == [(WRITE_BATCH, len(MANY)), (2 * WRITE_BATCH, len(MANY))]


# -- a failure part-way ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer, kind",
    [
        (OSError("disk full"), IndexFailed),
        (IndexFailed(index="docs", backend="store", reason="disk full"), IndexFailed),
        (IndexTimeout(index="docs", backend="store", deadline_s=1.0), IndexTimeout),
        (IndexUnavailable(index="docs", backend="store", reason="restarting"), IndexUnavailable),
    ],
)
def test_a_failure_in_the_third_batch_says_what_was_committed(answer: Any, kind: type) -> None:
    store = Store({3: answer})
    out = Guard(store).add("docs", MANY)
    assert type(out) is kind
    assert out.committed == 2 * WRITE_BATCH  # type: ignore[union-attr]
    assert sizes(store) == [WRITE_BATCH, WRITE_BATCH, 88]
    assert len(store.data) == 2 * WRITE_BATCH


def test_repeating_a_failed_write_completes_it_without_duplicates() -> None:
    store = Store({3: OSError("disk full")})
    g = Guard(store)
    first = g.add("docs", MANY)
    assert type(first) is IndexFailed and first.committed == 2 * WRITE_BATCH
    again = g.add("docs", MANY)
    assert type(again) is Indexed
    assert again.added == len(MANY) - 2 * WRITE_BATCH and again.known == 2 * WRITE_BATCH
    assert sorted(store.new) == sorted(p.id for p in MANY)  # each stored as new exactly once


def test_a_write_that_hits_its_deadline_keeps_what_it_committed() -> None:
    stuck = threading.Event()
    store = Store({3: stuck})
    g = Guard(store)
    try:
        # long enough for the two batches before the stuck one on a loaded machine
        out = g.add("docs", MANY, deadline_s=5.0)
        assert type(out) is IndexTimeout and out.committed == 2 * WRITE_BATCH
    finally:
        stuck.set()  # the abandoned call may now store its batch too
    again = g.add("docs", MANY)
    assert type(again) is Indexed and again.added + again.known == len(MANY)
    assert sorted(store.new) == sorted(p.id for p in MANY)


def test_a_failed_first_batch_of_a_batched_write_committed_nothing() -> None:
    out = Guard(Store({1: OSError("disk full")})).add("docs", MANY)
    assert type(out) is IndexFailed and out.committed == 0


def test_a_write_of_one_batch_answers_the_backends_own_failure() -> None:
    own = IndexFailed(index="docs", backend="store", reason="disk full")
    out = Guard(Store({1: own})).add("docs", MANY[:10])
    assert type(out) is IndexFailed and out.reason == "disk full" and out.committed is None


@pytest.mark.parametrize("own, counted", [(40, 40), (88, 88), (0, 0), (89, 0), (10**6, 0)])
def test_what_the_failing_batch_itself_stored_is_counted(own: int, counted: int) -> None:
    # the third batch holds 88 passages: a claim of more is no count of it, and is not added
    failure = IndexFailed(index="docs", backend="store", reason="disk full", committed=own)
    out = Guard(Store({3: failure})).add("docs", MANY)
    assert type(out) is IndexFailed and out.committed == 2 * WRITE_BATCH + counted


def test_an_over_budget_batch_ends_the_write() -> None:
    refusal = OverBudget(
        index="docs", backend="store", max_bytes=10, needed_bytes=20, check="projected"
    )
    store = Store({2: refusal})
    out = Guard(store).add("docs", MANY)
    assert type(out) is OverBudget
    assert sizes(store) == [WRITE_BATCH, WRITE_BATCH]  # the third batch was not sent
    # the first batch is stored and kept: the answer says so, not "nothing was written"
    assert out.committed == WRITE_BATCH
    assert f"{WRITE_BATCH} passage(s) of earlier batches are stored" in out.message


def test_aadd_keeps_and_says_what_it_committed() -> None:
    store = Store({3: OSError("disk full")})
    g = Guard(store)
    seen: list[tuple[int, int]] = []
    out = asyncio.run(g.aadd("docs", MANY, progress=lambda d, t: seen.append((d, t))))
    assert type(out) is IndexFailed and out.committed == 2 * WRITE_BATCH
    assert seen == [(WRITE_BATCH, len(MANY)), (2 * WRITE_BATCH, len(MANY))]
    again = asyncio.run(g.aadd("docs", MANY))
    assert type(again) is Indexed and again.added == 88


# -- the limit -------------------------------------------------------------------------------


class Repeating(Sequence[Passage]):
    """``n`` passages, cycling through three: a large write without a large memory."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.items = [passage(i) for i in range(3)]

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self.n))]
        if not 0 <= i < self.n:
            raise IndexError(i)
        return self.items[i % 3]

    def __iter__(self) -> Iterator[Passage]:
        for i in range(self.n):
            yield self.items[i % 3]


def test_a_write_over_max_write_is_refused_before_the_backend() -> None:
    store = Store()
    with pytest.raises(InvalidRequest) as info:
        Guard(store).add("docs", Repeating(MAX_WRITE + 1))
    assert info.value.field == "passages" and str(MAX_WRITE) in str(info.value)
    assert store.calls == []


def test_a_write_of_max_write_is_taken() -> None:
    store = Store()
    out = Guard(store).add("docs", Repeating(MAX_WRITE))
    assert type(out) is Indexed and out.added == 3 and out.known == MAX_WRITE - 3
    assert sizes(store) == [3]


@pytest.mark.parametrize("progress", [5, "bar", [print]])
def test_a_progress_that_cannot_be_called_is_refused_before_writing(progress: Any) -> None:
    store = Store()
    with pytest.raises(InvalidRequest) as info:
        Guard(store).add("docs", MANY, progress=progress)
    assert info.value.field == "progress"
    with pytest.raises(InvalidRequest):
        asyncio.run(Guard(store).aadd("docs", MANY, progress=progress))
    assert store.calls == []


def test_what_progress_raises_comes_out_of_add_with_the_stored_pieces_kept() -> None:
    store = Store()

    def stop(done: int, total: int) -> None:
        if done > WRITE_BATCH:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Guard(store).add("docs", MANY, progress=stop)
    assert sizes(store) == [WRITE_BATCH, WRITE_BATCH]
    assert len(store.data) == 2 * WRITE_BATCH


def test_an_empty_write_reports_progress_once() -> None:
    seen: list[tuple[int, int]] = []
    store = Store()
    out = Guard(store).add("docs", [], progress=lambda d, t: seen.append((d, t)))
    assert type(out) is Indexed and out.added == out.known == 0
    assert seen == [(0, 0)] and sizes(store) == [0]
