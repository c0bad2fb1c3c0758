"""The guard's coroutine ops (aadd, asearch, aremove, astatus, aget, ascan, aindexes, adrop):
the same outcomes as the blocking ops, a backend's own coroutines used when it has them, and a
slow backend never holding up the event loop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from indexplug.errors import InvalidIndexName, InvalidRequest
from indexplug.filters import ALL_OPS, matches, parse_filter
from indexplug.guard import Guard
from indexplug.outcomes import (
    Got,
    Hit,
    Indexed,
    IndexFailed,
    IndexInfo,
    IndexList,
    IndexStatus,
    IndexTimeout,
    IndexUnavailable,
    NoMatch,
    Removed,
    Scanned,
    ScoreScale,
    Searched,
)
from indexplug.passages import Passage
from indexplug.protocols import Capabilities, Readiness

SCALE = ScoreScale(name="test")
FULL = Capabilities(get=True, scan=True, indexes=True, keys=True, filter_operators=ALL_OPS)


def passage(i: int, *, key: str | None = None, **metadata: Any) -> Passage:
    return Passage.create(f"otter fact {i}", f"mem://doc/{i}", metadata=metadata, key=key)


class Mem:
    """An in-memory backend of every op; it records the thread each call ran on."""

    name = "mem"
    description = "in-memory"
    score_scale = SCALE
    capabilities = FULL

    def __init__(self) -> None:
        self.data: dict[str, dict[str, Passage]] = {}
        self.threads: list[int] = []
        self.ready = True

    def _call(self) -> None:
        self.threads.append(threading.get_ident())

    def readiness(self) -> Readiness:
        return Readiness.yes() if self.ready else Readiness.no("switched off")

    def close(self) -> None:
        pass

    def add(self, index: str, passages: Sequence[Passage], **kw: Any) -> Any:
        self._call()
        store = self.data.setdefault(index, {})
        keys = {p.key for p in passages if p.key is not None}
        ids = {p.id for p in passages}
        stale = [i for i, p in store.items() if p.key in keys and i not in ids]
        for i in stale:
            del store[i]
        added = [p.id for p in passages if p.id not in store]
        store.update((p.id, p) for p in passages)
        out = Indexed.of_batch(
            index=index, backend=self.name, ids=[p.id for p in passages], added_ids=added
        )
        return out.model_copy(update={"replaced": len(stale)})

    def search(self, index: str, query: str, *, top_k: int, filters: Any = None, **kw: Any) -> Any:
        self._call()
        store = self.data.get(index, {})
        found = [
            p
            for _, p in sorted(store.items())
            if set(query.split()) & set(p.text.split()) and matches(filters, p.metadata)
        ]
        if not found:
            return NoMatch(index=index, backend=self.name, searched=len(store))
        hits = [
            Hit.from_stored(rank=r, score=1.0 / r, score_scale="test", passage=p)
            for r, p in enumerate(found[:top_k], 1)
        ]
        return Searched.from_stored(
            index=index, backend=self.name, hits=hits, searched=len(store), scale=SCALE
        )

    def remove(self, index: str, ids: Sequence[str], **kw: Any) -> Any:
        self._call()
        store = self.data.get(index, {})
        gone = [i for i in ids if store.pop(i, None) is not None]
        return Removed.of_batch(index=index, backend=self.name, ids=ids, removed_ids=gone)

    def status(self, index: str, **kw: Any) -> Any:
        self._call()
        store = self.data.get(index)
        return IndexStatus(
            index=index, backend=self.name, exists=store is not None, passages=len(store or {})
        )

    def get(self, index: str, ids: Sequence[str], *, keys: Sequence[str], **kw: Any) -> Any:
        self._call()
        store = self.data.get(index, {})
        by_key = [p for p in store.values() if p.key in keys]
        return Got(
            index=index,
            backend=self.name,
            passages=[store[i] for i in ids if i in store] + by_key,
            missing_ids=[i for i in ids if i not in store],
            missing_keys=[k for k in keys if not any(p.key == k for p in by_key)],
        )

    def scan(self, index: str, *, filters: Any, after: str | None, limit: int, **kw: Any) -> Any:
        self._call()
        rows = [
            p
            for i, p in sorted(self.data.get(index, {}).items())
            if (after is None or i > after) and matches(filters, p.metadata)
        ]
        page = rows[:limit]
        return Scanned(
            index=index,
            backend=self.name,
            passages=page,
            next_after=page[-1].id if len(rows) > limit else None,
        )

    def indexes(self, **kw: Any) -> Any:
        self._call()
        return IndexList(
            index="",
            backend=self.name,
            indexes=[IndexInfo(name=n, passages=len(s)) for n, s in self.data.items()],
        )

    def op_drop(self, index: str, **kw: Any) -> Any:
        self._call()
        self.data.pop(index, None)
        return IndexStatus(index=index, backend=self.name, exists=False, passages=0)


PS = [passage(i, lang="en" if i % 2 == 0 else "fr") for i in range(6)]
KEYED = [passage(10, key="doc-a"), passage(11, key="doc-a"), passage(12, key="doc-b")]

# each step: the blocking call and its coroutine twin, on a guard
Step = tuple[str, Callable[[Guard], Any], Callable[[Guard], Any]]
STEPS: list[Step] = [
    ("status-missing", lambda g: g.status("docs"), lambda g: g.astatus("docs")),
    ("add", lambda g: g.add("docs", PS), lambda g: g.aadd("docs", PS)),
    ("add-keyed", lambda g: g.add("docs", KEYED), lambda g: g.aadd("docs", KEYED)),
    ("add-again", lambda g: g.add("docs", PS[:2]), lambda g: g.aadd("docs", PS[:2])),
    ("status", lambda g: g.status("docs"), lambda g: g.astatus("docs")),
    (
        "search",
        lambda g: g.search("docs", "otter", top_k=3),
        lambda g: g.asearch("docs", "otter", top_k=3),
    ),
    (
        "search-filtered",
        lambda g: g.search("docs", "otter", filters={"lang": {"$ne": "en"}}),
        lambda g: g.asearch("docs", "otter", filters={"lang": {"$ne": "en"}}),
    ),
    (
        "search-nothing",
        lambda g: g.search("docs", "badger"),
        lambda g: g.asearch("docs", "badger"),
    ),
    (
        "get",
        lambda g: g.get("docs", [PS[3].id, "f" * 64], keys=["doc-b", "nope"]),
        lambda g: g.aget("docs", [PS[3].id, "f" * 64], keys=["doc-b", "nope"]),
    ),
    ("scan", lambda g: g.scan("docs", limit=4), lambda g: g.ascan("docs", limit=4)),
    (
        "scan-filtered",
        lambda g: g.scan("docs", filters={"lang": "fr"}),
        lambda g: g.ascan("docs", filters={"lang": "fr"}),
    ),
    ("indexes", lambda g: g.indexes(), lambda g: g.aindexes()),
    (
        "remove-ids",
        lambda g: g.remove("docs", [PS[0].id, "e" * 64]),
        lambda g: g.aremove("docs", [PS[0].id, "e" * 64]),
    ),
    (
        "remove-keys",
        lambda g: g.remove("docs", keys=["doc-a", "nope"]),
        lambda g: g.aremove("docs", keys=["doc-a", "nope"]),
    ),
    (
        "remove-filter",
        lambda g: g.remove("docs", filters={"lang": "en"}),
        lambda g: g.aremove("docs", filters={"lang": "en"}),
    ),
    ("drop", lambda g: g.drop("docs"), lambda g: g.adrop("docs")),
    ("status-dropped", lambda g: g.status("docs"), lambda g: g.astatus("docs")),
]


def comparable(out: Any) -> dict[str, Any]:
    return out.model_dump(mode="json", exclude={"elapsed_ms"})  # type: ignore[no-any-return]


def test_every_coroutine_op_answers_what_the_blocking_op_answers() -> None:
    blocking, coroutine = Guard(Mem()), Guard(Mem())
    sync_outs = [(name, call(blocking)) for name, call, _ in STEPS]

    async def run_all() -> list[tuple[str, Any]]:
        return [(name, await acall(coroutine)) for name, _, acall in STEPS]

    async_outs = asyncio.run(run_all())
    for (name, a), (_, b) in zip(sync_outs, async_outs, strict=True):
        assert type(a) is type(b), name
        assert comparable(a) == comparable(b), name
    # and they did something: every kind of answer is among them
    kinds = {type(o).__name__ for _, o in async_outs}
    assert kinds >= {
        "IndexStatus",
        "Indexed",
        "Searched",
        "NoMatch",
        "Got",
        "Scanned",
        "IndexList",
        "Removed",
    }
    removed_keys = dict(async_outs)["remove-keys"]
    assert type(removed_keys) is Removed and removed_keys.removed == 2
    assert removed_keys.missing_keys == ["nope"]


def test_coroutine_ops_run_the_blocking_backend_off_the_event_loop() -> None:
    mem = Mem()
    g = Guard(mem)

    async def go() -> int:
        await g.aadd("docs", PS)
        await g.asearch("docs", "otter")
        await g.aget("docs", [PS[0].id])
        await g.ascan("docs")
        await g.aindexes()
        await g.astatus("docs")
        await g.aremove("docs", [PS[0].id])
        await g.adrop("docs")
        return threading.get_ident()

    loop_thread = asyncio.run(go())
    assert len(mem.threads) == 8
    assert loop_thread not in mem.threads


def test_coroutine_ops_refuse_what_the_blocking_ops_refuse() -> None:
    g = Guard(Mem())

    async def go() -> None:
        with pytest.raises(InvalidIndexName):
            await g.asearch("../etc", "otter")
        with pytest.raises(InvalidRequest):
            await g.aget("docs", "not-a-list")
        with pytest.raises(InvalidRequest):
            await g.ascan("docs", limit=0)
        with pytest.raises(InvalidRequest):
            await g.asearch("docs", "otter", filters={"$regex": "x"})
        with pytest.raises(InvalidRequest):
            await g.aremove("docs", keys="doc-a")
        with pytest.raises(InvalidRequest):
            await g.aadd("docs", "text")  # type: ignore[arg-type]

    asyncio.run(go())


def test_coroutine_ops_answer_failures_as_the_blocking_ops_do() -> None:
    class Broken(Mem):
        def get(self, *a: Any, **kw: Any) -> Any:
            raise OSError("disk gone")

        def scan(self, index: str, **kw: Any) -> Any:
            return Scanned(index=index, backend=self.name, passages=[], next_after="a" * 64)

    g = Guard(Broken())
    sync_get, sync_scan = g.get("docs", ["x"]), g.scan("docs")

    async def go() -> tuple[Any, Any]:
        return await g.aget("docs", ["x"]), await g.ascan("docs")

    async_get, async_scan = asyncio.run(go())
    assert type(async_get) is IndexFailed and async_get.error_type == "OSError"
    assert type(async_scan) is IndexFailed and async_scan.error_type == "ContractViolation"
    assert comparable(async_get) == comparable(sync_get)
    assert comparable(async_scan) == comparable(sync_scan)


def test_coroutine_ops_of_a_backend_that_is_not_ready_are_unavailable() -> None:
    mem = Mem()
    mem.ready = False
    g = Guard(mem)

    async def go() -> list[Any]:
        return [await g.asearch("docs", "otter"), await g.aget("docs", ["x"]), await g.ascan("d")]

    outs = asyncio.run(go())
    assert [type(o) for o in outs] == [IndexUnavailable] * 3
    assert all(o.reason == "switched off" for o in outs)
    assert mem.threads == []


# -- a backend's own coroutines ----------------------------------------------------------------


class Native(Mem):
    """Has a coroutine twin of every op; each records that it ran, on the loop's thread."""

    def __init__(self) -> None:
        super().__init__()
        self.native: list[tuple[str, int]] = []

    def _on_loop(self, op: str) -> None:
        asyncio.get_running_loop()  # raises off the loop
        self.native.append((op, threading.get_ident()))

    async def aadd(self, index: str, passages: Sequence[Passage], **kw: Any) -> Any:
        self._on_loop("add")
        return super().add(index, passages, **kw)

    async def asearch(self, index: str, query: str, **kw: Any) -> Any:
        self._on_loop("search")
        return super().search(index, query, **kw)

    async def aremove(self, index: str, ids: Sequence[str], **kw: Any) -> Any:
        self._on_loop("remove")
        return super().remove(index, ids, **kw)

    async def astatus(self, index: str, **kw: Any) -> Any:
        self._on_loop("status")
        return super().status(index, **kw)

    async def aget(self, index: str, ids: Sequence[str], **kw: Any) -> Any:
        self._on_loop("get")
        return super().get(index, ids, **kw)

    async def ascan(self, index: str, **kw: Any) -> Any:
        self._on_loop("scan")
        return super().scan(index, **kw)

    async def aindexes(self, **kw: Any) -> Any:
        self._on_loop("indexes")
        return super().indexes(**kw)


def test_a_backends_own_coroutines_are_awaited_on_the_loop() -> None:
    mem = Native()
    g = Guard(mem)

    async def go() -> tuple[int, list[Any]]:
        outs = [
            await g.aadd("docs", PS),
            await g.asearch("docs", "otter"),
            await g.aget("docs", [PS[0].id]),
            await g.ascan("docs"),
            await g.aindexes(),
            await g.astatus("docs"),
            await g.aremove("docs", [PS[0].id]),
        ]
        return threading.get_ident(), outs

    loop_thread, outs = asyncio.run(go())
    assert [op for op, _ in mem.native] == [
        "add",
        "search",
        "get",
        "scan",
        "indexes",
        "status",
        "remove",
    ]
    assert {t for _, t in mem.native} == {loop_thread}
    assert [type(o) for o in outs] == [
        Indexed,
        Searched,
        Got,
        Scanned,
        IndexList,
        IndexStatus,
        Removed,
    ]
    # the blocking methods ran only inside the coroutines (on the loop), never on a worker
    assert mem.threads == [loop_thread] * 7


def test_a_backends_own_coroutine_answer_is_checked_like_any_other() -> None:
    class LyingNative(Native):
        async def aget(self, index: str, ids: Sequence[str], **kw: Any) -> Any:
            out = super().get(index, ids, **kw)
            return out.model_copy(update={"passages": list(self.data[index].values())})

        async def asearch(self, index: str, query: str, **kw: Any) -> Any:
            raise ConnectionError("server went away")

    g = Guard(LyingNative())
    g.add("docs", PS)

    async def go() -> tuple[Any, Any]:
        return await g.aget("docs", [PS[0].id]), await g.asearch("docs", "otter")

    got, searched = asyncio.run(go())
    assert type(got) is IndexFailed and "not asked for" in got.reason
    assert type(searched) is IndexFailed and searched.error_type == "ConnectionError"


# -- a slow backend does not hold up the loop ------------------------------------------------


def _race(slow: Guard, fast: Guard) -> tuple[list[str], Any, Any]:
    """Start a search on ``slow`` (deadline 1 s), then one on ``fast``; the order they finish."""
    done: list[str] = []

    async def one(name: str, g: Guard, deadline_s: float) -> Any:
        out = await g.asearch("docs", "otter", deadline_s=deadline_s)
        done.append(name)
        return out

    async def go() -> tuple[Any, Any]:
        slow_task = asyncio.create_task(one("slow", slow, 1.0))
        await asyncio.sleep(0)  # the slow search is under way first
        fast_out = await one("fast", fast, 10.0)
        return await slow_task, fast_out

    slow_out, fast_out = asyncio.run(go())
    return done, slow_out, fast_out


def test_a_blocking_backend_past_its_deadline_times_out_without_holding_the_loop() -> None:
    release = threading.Event()

    class Stuck(Mem):
        def search(self, *a: Any, **kw: Any) -> Any:
            release.wait(30)  # a call that does not come back (released when the test ends)
            return super().search(*a, **kw)

    fast = Guard(Mem())
    fast.add("docs", PS)
    try:
        done, slow_out, fast_out = _race(Guard(Stuck()), fast)
    finally:
        release.set()
    assert done == ["fast", "slow"]
    assert type(fast_out) is Searched
    assert type(slow_out) is IndexTimeout and slow_out.deadline_s == 1.0


def test_a_native_backend_past_its_deadline_times_out_without_holding_the_loop() -> None:
    class Sleepy(Native):
        async def asearch(self, index: str, query: str, **kw: Any) -> Any:
            await asyncio.sleep(30)
            return await super().asearch(index, query, **kw)

    fast = Guard(Native())
    fast.add("docs", PS)
    done, slow_out, fast_out = _race(Guard(Sleepy()), fast)
    assert done == ["fast", "slow"]
    assert type(fast_out) is Searched
    assert type(slow_out) is IndexTimeout and slow_out.deadline_s == 1.0


def test_aadd_reports_progress_like_add() -> None:
    seen: list[tuple[int, int]] = []
    many = [passage(100 + i) for i in range(300)]

    async def go() -> Any:
        return await Guard(Native()).aadd("docs", many, progress=lambda d, t: seen.append((d, t)))

    out = asyncio.run(go())
    assert type(out) is Indexed and out.added == 300
    assert seen == [(256, 300), (300, 300)]


def test_a_deadline_is_one_for_the_whole_call() -> None:
    # aremove resolves keys and filters and removes under one deadline, like remove
    seen: list[float] = []

    class Records(Mem):
        def get(self, index: str, ids: Sequence[str], *, keys: Sequence[str], **kw: Any) -> Any:
            seen.append(kw["deadline"].at)
            return super().get(index, ids, keys=keys, **kw)

        def remove(self, index: str, ids: Sequence[str], **kw: Any) -> Any:
            seen.append(kw["deadline"].at)
            return super().remove(index, ids, **kw)

    g = Guard(Records())
    g.add("docs", KEYED)
    out = asyncio.run(g.aremove("docs", keys=["doc-a"], deadline_s=30))
    assert type(out) is Removed and out.removed == 2
    assert len(seen) == 2 and seen[0] == seen[1]


def test_a_parsed_filter_goes_through_the_coroutine_form() -> None:
    g = Guard(Mem())
    g.add("docs", PS)
    f = parse_filter({"lang": "fr"})
    out = asyncio.run(g.ascan("docs", filters=f))
    assert type(out) is Scanned and {p.id for p in out.passages} == {PS[1].id, PS[3].id, PS[5].id}


def test_aadd_checks_a_large_write_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    # checking and batching up to MAX_WRITE passages is work of its own: not on the loop
    where: list[int] = []
    plan_add = Guard._plan_add

    def recorded(self: Guard, *a: Any, **kw: Any) -> Any:
        where.append(threading.get_ident())
        return plan_add(self, *a, **kw)

    monkeypatch.setattr(Guard, "_plan_add", recorded)

    async def go() -> tuple[int, Any]:
        return threading.get_ident(), await Guard(Native()).aadd("docs", PS)

    loop_thread, out = asyncio.run(go())
    assert type(out) is Indexed and len(where) == 1 and where[0] != loop_thread


def test_a_native_answer_is_checked_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    # checking an answer hashes every passage in it (a scan page holds up to 10,000)
    where: list[tuple[str, int]] = []
    finish = Guard._finish

    def recorded(self: Guard, plan: Any, out: Any) -> Any:
        where.append((plan.op, threading.get_ident()))
        return finish(self, plan, out)

    monkeypatch.setattr(Guard, "_finish", recorded)
    g = Guard(Native())
    g.add("docs", PS)
    where.clear()

    async def go() -> tuple[int, list[Any]]:
        outs = [await g.ascan("docs", limit=100), await g.aget("docs", [PS[0].id])]
        outs.append(await g.asearch("docs", "otter"))
        return threading.get_ident(), outs

    loop_thread, outs = asyncio.run(go())
    assert [type(o) for o in outs] == [Scanned, Got, Searched]
    assert [op for op, _ in where] == ["scan", "get", "search"]
    assert loop_thread not in {t for _, t in where}
