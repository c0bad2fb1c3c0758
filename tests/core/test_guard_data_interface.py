"""The guard's data interface (get, scan, indexes, drop, remove by key and by filter, filters
in search) against small in-memory backends, and the broken ones it must refuse."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from typing import Any

import indexplug.guard as guard_module
import indexplug.guard.base as guard_base
import indexplug.guard.reads as guard_reads
import indexplug.guard.writes as guard_writes
import pytest
from indexplug.construct import construct
from indexplug.deadlines import DEFAULT_DEADLINE_S, Deadline
from indexplug.errors import InvalidRequest
from indexplug.filters import ALL_OPS, Condition, Filter, matches, parse_filter
from indexplug.guard import WRITE_DEADLINE_S, Guard
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
    """A correct in-memory backend of the whole data interface; it records what it is given."""

    name = "mem"
    description = "in-memory"
    score_scale = SCALE

    def __init__(self, capabilities: Capabilities = FULL) -> None:
        self.capabilities = capabilities
        self.data: dict[str, dict[str, Passage]] = {}
        self.filters_given: list[Any] = []
        self.removed_given: list[list[str]] = []
        self.get_given: list[tuple[list[str], list[str]]] = []
        self.deadlines: dict[str, float] = {}

    def readiness(self) -> Readiness:
        return Readiness.yes()

    def close(self) -> None:
        pass

    def _passes(self, filters: Any, p: Passage) -> bool:
        self.filters_given.append(filters)
        if filters is None:
            return True
        if isinstance(filters, dict):  # the equality map of a filters=True backend
            return matches(parse_filter(filters), p.metadata)
        return matches(filters, p.metadata)

    def add(
        self, index: str, passages: Sequence[Passage], *, max_bytes: Any, deadline: Deadline
    ) -> Any:
        self.deadlines["add"] = deadline.seconds
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

    def search(
        self, index: str, query: str, *, top_k: int, deadline: Deadline, filters: Any = None
    ) -> Any:
        store = self.data.get(index, {})
        words = set(query.split())
        found = [
            p
            for _, p in sorted(store.items())
            if words & set(p.text.split()) and self._passes(filters, p)
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

    def remove(self, index: str, ids: Sequence[str], *, deadline: Deadline) -> Any:
        self.deadlines["remove"] = deadline.seconds
        self.removed_given.append(list(ids))
        store = self.data.get(index, {})
        gone = [i for i in ids if store.pop(i, None) is not None]
        return Removed.of_batch(index=index, backend=self.name, ids=ids, removed_ids=gone)

    def status(self, index: str, *, deadline: Deadline) -> Any:
        store = self.data.get(index)
        return IndexStatus(
            index=index, backend=self.name, exists=store is not None, passages=len(store or {})
        )

    def get(
        self, index: str, ids: Sequence[str], *, keys: Sequence[str], deadline: Deadline
    ) -> Any:
        self.deadlines["get"] = deadline.seconds
        self.get_given.append((list(ids), list(keys)))
        store = self.data.get(index, {})
        by_id = [store[i] for i in ids if i in store]
        by_key = [p for p in store.values() if p.key in keys]
        return Got(
            index=index,
            backend=self.name,
            passages=by_id + by_key,
            missing_ids=[i for i in ids if i not in store],
            missing_keys=[k for k in keys if not any(p.key == k for p in by_key)],
        )

    def scan(
        self, index: str, *, filters: Any, after: str | None, limit: int, deadline: Deadline
    ) -> Any:
        self.deadlines["scan"] = deadline.seconds
        store = self.data.get(index, {})
        rows = [
            p
            for i, p in sorted(store.items())
            if (after is None or i > after) and self._passes(filters, p)
        ]
        page = rows[:limit]
        more = len(rows) > limit
        return Scanned(
            index=index,
            backend=self.name,
            passages=page,
            next_after=page[-1].id if more else None,
        )

    def indexes(self, *, deadline: Deadline) -> Any:
        return IndexList(
            index="",
            backend=self.name,
            indexes=[IndexInfo(name=n, passages=len(s)) for n, s in self.data.items()],
        )

    def op_drop(self, index: str, *, deadline: Deadline) -> Any:
        self.deadlines["drop"] = deadline.seconds
        self.data.pop(index, None)
        return IndexStatus(index=index, backend=self.name, exists=False, passages=0)


def filled(backend: Mem | None = None, n: int = 5) -> tuple[Guard, Mem, list[Passage]]:
    """A guard over ``backend`` holding passages 0..n-1 in index "docs" (even ones lang=en)."""
    mem = backend or Mem()
    ps = [passage(i, lang="en" if i % 2 == 0 else "fr", n=i) for i in range(n)]
    g = Guard(mem)
    assert isinstance(g.add("docs", ps), Indexed)
    return g, mem, ps


def violation(out: Any, words: str) -> None:
    assert type(out) is IndexFailed, out
    assert out.error_type == "ContractViolation"
    assert words in out.reason


# -- get -------------------------------------------------------------------------------------


def test_get_answers_in_the_order_asked_with_the_missing_listed() -> None:
    g, mem, ps = filled()
    ghost = passage(99).id
    out = g.get("docs", [ps[3].id, ghost, ps[0].id, ps[3].id])
    assert type(out) is Got
    assert [p.id for p in out.passages] == [ps[3].id, ps[0].id]
    assert out.missing_ids == [ghost]
    assert out.missing_keys == []
    assert mem.get_given[-1] == ([ps[3].id, ghost, ps[0].id], [])  # asked once each


def test_get_answers_the_guards_checked_copies() -> None:
    g, mem, ps = filled()
    out = g.get("docs", [ps[1].id])
    assert type(out) is Got
    assert out.passages == [ps[1]]
    assert out.passages[0] is not mem.data["docs"][ps[1].id]


def test_get_of_a_missing_index_lists_everything_missing() -> None:
    g, _, ps = filled()
    out = g.get("nothing-here", [ps[0].id], keys=["k"])
    assert type(out) is Got
    assert out.passages == [] and out.missing_ids == [ps[0].id] and out.missing_keys == ["k"]


def test_get_by_key() -> None:
    g, _, _ = filled()
    a = [passage(10 + i, key="doc-a") for i in range(2)]
    b = [passage(20, key="doc-b")]
    assert isinstance(g.add("docs", a + b), Indexed)
    out = g.get("docs", keys=["doc-b", "nope", "doc-a"])
    assert type(out) is Got
    assert {p.id for p in out.passages} == {p.id for p in a + b}
    assert out.missing_keys == ["nope"]
    assert out.missing_ids == []


def test_get_deduplicates_a_passage_asked_by_id_and_by_key() -> None:
    g, _, _ = filled()
    a = passage(10, key="doc-a")
    assert isinstance(g.add("docs", [a]), Indexed)
    out = g.get("docs", [a.id], keys=["doc-a"])
    assert type(out) is Got
    assert [p.id for p in out.passages] == [a.id]


def test_get_is_refused_unless_claimed() -> None:
    g = Guard(Mem(Capabilities(scan=True)))
    with pytest.raises(InvalidRequest) as info:
        g.get("docs", ["x"])
    assert info.value.field == "op"

    class ClaimsButHasNone(Mem):
        get = None  # type: ignore[assignment]

    with pytest.raises(InvalidRequest):
        Guard(ClaimsButHasNone()).get("docs", ["x"])


def test_get_by_key_is_refused_without_keys() -> None:
    g = Guard(Mem(Capabilities(get=True)))
    with pytest.raises(InvalidRequest) as info:
        g.get("docs", keys=["k"])
    assert info.value.field == "keys"


@pytest.mark.parametrize("ids", ["abc", [""], ["a\x00b"], [1], None])
def test_get_refuses_ids_that_are_not_a_list_of_strings(ids: Any) -> None:
    with pytest.raises(InvalidRequest):
        Guard(Mem()).get("docs", ids)


class Stray(Mem):
    def get(self, index: str, ids: Sequence[str], **kw: Any) -> Any:
        out = super().get(index, ids, **kw)
        extra = next(p for i, p in sorted(self.data[index].items()) if i not in ids)
        return out.model_copy(update={"passages": [*out.passages, extra]})


class HidesMissing(Mem):
    def get(self, index: str, ids: Sequence[str], **kw: Any) -> Any:
        return super().get(index, ids, **kw).model_copy(update={"missing_ids": []})


class CallsFoundMissing(Mem):
    def get(self, index: str, ids: Sequence[str], **kw: Any) -> Any:
        return super().get(index, ids, **kw).model_copy(update={"missing_ids": list(ids)})


class DropsAKeysPassagesSilently(Mem):
    def get(self, index: str, ids: Sequence[str], *, keys: Sequence[str], **kw: Any) -> Any:
        return super().get(index, ids, keys=keys, **kw).model_copy(update={"passages": []})


def test_a_get_answering_passages_not_asked_for_fails() -> None:
    g, _, ps = filled(Stray())
    violation(g.get("docs", [ps[0].id]), "not asked for")


@pytest.mark.parametrize("mutant", [HidesMissing, CallsFoundMissing])
def test_a_get_whose_missing_ids_do_not_add_up_fails(mutant: type[Mem]) -> None:
    g, _, ps = filled(mutant())
    violation(g.get("docs", [ps[0].id, passage(99).id]), "missing")


def test_a_get_that_loses_a_keys_passages_fails() -> None:
    g, _, _ = filled(DropsAKeysPassagesSilently())
    assert isinstance(g.add("docs", [passage(10, key="k")]), Indexed)
    violation(g.get("docs", keys=["k"]), "missing")


def test_a_get_answering_another_outcome_fails() -> None:
    class Wrong(Mem):
        def get(self, index: str, ids: Sequence[str], **kw: Any) -> Any:
            return Scanned(index=index, backend=self.name)

    violation(Guard(Wrong()).get("docs", ["x"]), "get returned Scanned")


def test_a_get_that_raises_fails_naming_the_error() -> None:
    class Raises(Mem):
        def get(self, index: str, ids: Sequence[str], **kw: Any) -> Any:
            raise KeyError("boom")

    out = Guard(Raises()).get("docs", ["x"])
    assert type(out) is IndexFailed and out.error_type == "KeyError"


# -- scan ------------------------------------------------------------------------------------


def test_scan_pages_in_id_order_with_a_cursor() -> None:
    g, _, ps = filled(n=5)
    ids = sorted(p.id for p in ps)
    first = g.scan("docs", limit=2)
    assert type(first) is Scanned
    assert [p.id for p in first.passages] == ids[:2] and first.next_after == ids[1]
    second = g.scan("docs", after=first.next_after, limit=2)
    assert type(second) is Scanned and [p.id for p in second.passages] == ids[2:4]
    last = g.scan("docs", after=second.next_after, limit=2)
    assert type(last) is Scanned
    assert [p.id for p in last.passages] == ids[4:] and last.next_after is None


def test_scan_all_walks_every_page() -> None:
    g, _, ps = filled(n=7)
    pages = list(g.scan_all("docs", page=3))
    assert [type(p) for p in pages] == [Scanned] * 3
    assert [p.id for page in pages for p in page.passages] == sorted(p.id for p in ps)  # type: ignore[union-attr]


def test_scan_all_filters_and_starts_after_a_cursor() -> None:
    g, _, ps = filled(n=7)
    ids = sorted(p.id for p in ps)
    english = {p.id for p in ps if p.metadata["lang"] == "en"}
    pages = list(g.scan_all("docs", filters={"lang": "en"}, after=ids[1], page=2))
    got = [p.id for page in pages for p in page.passages]  # type: ignore[union-attr]
    assert got == [i for i in ids[2:] if i in english]


def test_scan_of_a_missing_index_is_an_empty_last_page() -> None:
    out = Guard(Mem()).scan("nothing-here")
    assert type(out) is Scanned and out.passages == [] and out.next_after is None


def test_scan_gives_the_parsed_filter_to_an_operator_backend() -> None:
    g, mem, ps = filled()
    out = g.scan("docs", filters={"n": {"$gte": 3}})
    assert type(out) is Scanned
    assert {p.id for p in out.passages} == {ps[3].id, ps[4].id}
    assert mem.filters_given[-1] == Condition("n", "$gte", 3)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"after": ""},
        {"after": 3},
        {"after": "a\x00"},
        {"limit": 0},
        {"limit": guard_module.MAX_SCAN + 1},
        {"limit": True},
        {"limit": 2.0},
        {"filters": [{"a": 1}]},
        {"filters": {"$regex": "x"}},
    ],
)
def test_scan_refuses_bad_arguments(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidRequest):
        Guard(Mem()).scan("docs", **kwargs)


def test_scan_is_refused_unless_claimed() -> None:
    with pytest.raises(InvalidRequest) as info:
        Guard(Mem(Capabilities(get=True))).scan("docs")
    assert info.value.field == "op"


class Unordered(Mem):
    def scan(self, index: str, **kw: Any) -> Any:
        out = super().scan(index, **kw)
        return out.model_copy(update={"passages": out.passages[::-1], "next_after": None})


class IgnoresAfter(Mem):
    def scan(self, index: str, *, after: str | None, **kw: Any) -> Any:
        return super().scan(index, after=None, **kw)


class BadCursor(Mem):
    def scan(self, index: str, **kw: Any) -> Any:
        out = super().scan(index, **kw)
        return out.model_copy(update={"next_after": out.passages[0].id})


class CursorOnEmptyPage(Mem):
    def scan(self, index: str, **kw: Any) -> Any:
        return Scanned(index=index, backend=self.name, passages=[], next_after="f" * 64)


class OverLimit(Mem):
    def scan(self, index: str, *, limit: int, **kw: Any) -> Any:
        return super().scan(index, limit=limit + 1, **kw)


class IgnoresFilters(Mem):
    def _passes(self, filters: Any, p: Passage) -> bool:
        self.filters_given.append(filters)
        return True


@pytest.mark.parametrize(
    "mutant, call, words",
    [
        (Unordered, {"limit": 5}, "out of id order"),
        (IgnoresAfter, {"after": "SET", "limit": 5}, "out of id order"),
        (BadCursor, {"limit": 2}, "cursor"),
        (CursorOnEmptyPage, {"limit": 2}, "cursor"),
        (OverLimit, {"limit": 2}, "for limit 2"),
        (IgnoresFilters, {"filters": {"lang": "en"}}, "fails the filter"),
    ],
)
def test_a_scan_breaking_the_contract_fails(
    mutant: type[Mem], call: dict[str, Any], words: str
) -> None:
    g, _, ps = filled(mutant(), n=5)
    if call.get("after") == "SET":
        call = {**call, "after": sorted(p.id for p in ps)[1]}
    violation(g.scan("docs", **call), words)


class FailsSecondPage(Mem):
    """Answers the first page of a scan; any later page fails."""

    def scan(self, index: str, *, after: str | None, **kw: Any) -> Any:
        if after is not None:
            raise OSError("disk gone")
        return super().scan(index, after=after, **kw)


def test_scan_all_ends_with_the_failure() -> None:
    g, _, _ = filled(FailsSecondPage(), n=5)
    pages = list(g.scan_all("docs", page=2))
    assert [type(p) for p in pages] == [Scanned, IndexFailed]
    assert pages[-1].error_type == "OSError"  # type: ignore[union-attr]


def test_ascan_all_gives_the_pages_of_scan_all_and_ends_with_the_failure() -> None:
    import asyncio

    async def pages(g: Guard, **kw: Any) -> list[Any]:
        return [page async for page in g.ascan_all("docs", **kw)]

    g, _, ps = filled(n=7)
    ids = sorted(p.id for p in ps)
    got = asyncio.run(pages(g, page=3))
    assert [type(p) for p in got] == [Scanned] * 3
    assert [p.id for page in got for p in page.passages] == ids
    english = [i for i in ids[2:] if i in {p.id for p in ps if p.metadata["lang"] == "en"}]
    got = asyncio.run(pages(g, filters={"lang": "en"}, after=ids[1], page=2))
    assert [p.id for page in got for p in page.passages] == english

    g, _, _ = filled(FailsSecondPage(), n=5)
    got = asyncio.run(pages(g, page=2))
    assert [type(p) for p in got] == [Scanned, IndexFailed]


# -- filters in search and scan: what each backend is given ------------------------------------


def test_an_equality_backend_is_given_the_equality_map() -> None:
    g, mem, ps = filled(Mem(Capabilities(filters=True, scan=True)))
    out = g.search("docs", "otter", filters={"$and": [{"lang": "en"}, {"n": 2}]})
    assert type(out) is Searched and [h.passage.id for h in out.hits] == [ps[2].id]
    assert mem.filters_given[-1] == {"lang": "en", "n": 2}
    scanned = g.scan("docs", filters={"lang": "fr"})
    assert type(scanned) is Scanned and {p.id for p in scanned.passages} == {ps[1].id, ps[3].id}
    assert mem.filters_given[-1] == {"lang": "fr"}


@pytest.mark.parametrize(
    "filters",
    [{"n": {"$gt": 1}}, {"lang": None}, {"$or": [{"lang": "en"}]}, {"lang": {"$in": ["en"]}}],
)
def test_an_equality_backend_is_never_given_more(filters: Any) -> None:
    g, mem, _ = filled(Mem(Capabilities(filters=True, scan=True)))
    before = len(mem.filters_given)
    with pytest.raises(InvalidRequest) as info:
        g.search("docs", "otter", filters=filters)
    assert info.value.field == "filters"
    with pytest.raises(InvalidRequest):
        g.scan("docs", filters=filters)
    assert len(mem.filters_given) == before  # refused, never sent and ignored


def test_a_backend_without_filters_refuses_every_filter() -> None:
    g, _, _ = filled(Mem(Capabilities(scan=True)))
    with pytest.raises(InvalidRequest, match="does not support metadata filters"):
        g.search("docs", "otter", filters={"lang": "en"})
    out = g.search("docs", "otter", filters={})  # no filter at all
    assert type(out) is Searched and len(out.hits) == 5


def test_operators_not_claimed_are_refused_by_name() -> None:
    mem = Mem(Capabilities(scan=True, filter_operators=frozenset({"$eq", "$and", "$in"})))
    g, _, ps = filled(mem)
    out = g.search("docs", "otter", filters={"lang": "en", "n": {"$in": [0, 4]}})
    assert type(out) is Searched and {h.passage.id for h in out.hits} == {ps[0].id, ps[4].id}
    with pytest.raises(InvalidRequest, match=r"\$gt, \$or"):
        g.search("docs", "otter", filters={"$or": [{"n": {"$gt": 1}}]})
    with pytest.raises(InvalidRequest, match=r"\$not"):
        g.scan("docs", filters={"$not": {"lang": "en"}})


def test_a_parsed_filter_is_accepted_as_the_json() -> None:
    g, _, ps = filled()
    f: Filter | None = parse_filter({"lang": "fr"})
    assert f is not None
    out = g.search("docs", "otter", filters=f)
    assert type(out) is Searched and {h.passage.id for h in out.hits} == {ps[1].id, ps[3].id}


def test_search_hits_failing_the_filter_fail() -> None:
    g, _, _ = filled(IgnoresFilters())
    violation(g.search("docs", "otter", filters={"lang": "en"}), "does not pass the filter")
    g2, _, _ = filled(IgnoresFilters(Capabilities(filters=True)))
    violation(g2.search("docs", "otter", filters={"lang": "en"}), "does not pass the filter")


def test_filters_must_be_an_object() -> None:
    g, _, _ = filled()
    with pytest.raises(InvalidRequest) as info:
        g.search("docs", "otter", filters=[("lang", "en")])  # type: ignore[arg-type]
    assert info.value.field == "filters"


# -- keys and upsert -------------------------------------------------------------------------


def test_keyed_passages_are_refused_without_keys() -> None:
    with pytest.raises(InvalidRequest, match="caller keys"):
        Guard(Mem(Capabilities())).add("docs", [passage(1, key="k")])


def test_an_upsert_answers_what_it_replaced() -> None:
    g = Guard(Mem())
    old = [passage(1, key="k"), passage(2, key="k")]
    assert isinstance(g.add("docs", old), Indexed)
    out = g.add("docs", [passage(2, key="k"), passage(3, key="k")])
    assert type(out) is Indexed
    assert (out.added, out.known, out.replaced) == (1, 1, 1)


# -- remove by key and by filter -------------------------------------------------------------


def test_remove_by_key_removes_every_passage_of_the_key() -> None:
    g, mem, ps = filled()
    a = [passage(10, key="doc-a"), passage(11, key="doc-a")]
    assert isinstance(g.add("docs", a), Indexed)
    out = g.remove("docs", keys=["doc-a", "nope"])
    assert type(out) is Removed
    assert out.removed == 2 and set(out.removed_ids) == {p.id for p in a}
    assert out.missing_keys == ["nope"] and out.missing_ids == []
    assert set(mem.data["docs"]) == {p.id for p in ps}


def test_remove_by_key_is_refused_without_keys() -> None:
    g, mem, _ = filled(Mem(Capabilities(get=True, scan=True)))
    with pytest.raises(InvalidRequest) as info:
        g.remove("docs", keys=["k"])
    assert info.value.field == "keys"
    assert mem.removed_given == []


def test_remove_by_filter_removes_what_passes_it() -> None:
    g, mem, ps = filled(n=6)
    out = g.remove("docs", filters={"lang": "en"})
    assert type(out) is Removed
    assert set(out.removed_ids) == {ps[0].id, ps[2].id, ps[4].id}
    assert set(mem.data["docs"]) == {ps[1].id, ps[3].id, ps[5].id}


def test_remove_by_filter_reads_every_page(monkeypatch: pytest.MonkeyPatch) -> None:
    for module in (guard_reads, guard_writes):  # each binds the limit it checks
        monkeypatch.setattr(module, "MAX_SCAN", 2)
    g, mem, ps = filled(n=7)
    out = g.remove("docs", filters={"n": {"$gte": 1}})
    assert type(out) is Removed and out.removed == 6
    assert set(mem.data["docs"]) == {ps[0].id}


def test_remove_by_ids_keys_and_filter_together_removes_each_once() -> None:
    g, mem, ps = filled()
    k = passage(10, key="k", lang="en")
    assert isinstance(g.add("docs", [k]), Indexed)
    out = g.remove("docs", [ps[0].id, ps[1].id], keys=["k"], filters={"lang": "en"})
    assert type(out) is Removed
    wanted = {ps[0].id, ps[1].id, ps[2].id, ps[4].id, k.id}
    assert sorted(mem.removed_given[-1]) == sorted(wanted)  # each id once
    assert out.removed == 5


def test_remove_with_an_empty_filter_removes_nothing() -> None:
    g, mem, ps = filled()
    out = g.remove("docs", filters={})
    assert type(out) is Removed and out.removed == 0
    assert len(mem.data["docs"]) == len(ps)


def test_remove_by_filter_needs_scan_and_the_operators() -> None:
    g, mem, _ = filled(Mem(Capabilities(get=True, filters=True)))
    with pytest.raises(InvalidRequest):
        g.remove("docs", filters={"lang": "en"})
    g2, mem2, _ = filled(Mem(Capabilities(scan=True, filters=True)))
    with pytest.raises(InvalidRequest):
        g2.remove("docs", filters={"n": {"$gt": 1}})
    assert mem.removed_given == [] and mem2.removed_given == []


def test_a_failed_scan_removes_nothing() -> None:
    class ScanFails(Mem):
        def scan(self, index: str, **kw: Any) -> Any:
            raise OSError("disk gone")

    g, mem, ps = filled(ScanFails())
    out = g.remove("docs", [ps[0].id], filters={"lang": "en"})
    assert type(out) is IndexFailed and out.error_type == "OSError"
    assert mem.removed_given == [] and len(mem.data["docs"]) == len(ps)


def test_a_scan_breaking_the_contract_during_remove_removes_nothing() -> None:
    g, mem, _ = filled(IgnoresFilters())
    violation(g.remove("docs", filters={"lang": "en"}), "fails the filter")
    assert mem.removed_given == []


# -- indexes and drop ------------------------------------------------------------------------


def test_indexes_are_listed_by_name_with_counts() -> None:
    g, mem, _ = filled(n=3)
    assert isinstance(g.add("alpha", [passage(50)]), Indexed)
    out = g.indexes()
    assert type(out) is IndexList and out.index == ""
    assert [(i.name, i.passages) for i in out.indexes] == [("alpha", 1), ("docs", 3)]
    assert list(mem.data) == ["docs", "alpha"]  # sorted by the guard, not the backend


@pytest.mark.parametrize(
    "names, words",
    [
        (["docs", "docs"], "twice"),
        (["../etc"], "not valid"),
        (["Docs"], "not valid"),
        ([""], "not valid"),
    ],
)
def test_indexes_breaking_the_contract_fail(names: list[str], words: str) -> None:
    class Lister(Mem):
        def indexes(self, *, deadline: Deadline) -> Any:
            return IndexList(
                index="", backend=self.name, indexes=[IndexInfo(name=n, passages=0) for n in names]
            )

    violation(Guard(Lister()).indexes(), words)


def test_indexes_answered_for_an_index_fail() -> None:
    class Named(Mem):
        def indexes(self, *, deadline: Deadline) -> Any:
            return IndexList(index="docs", backend=self.name)

    violation(Guard(Named()).indexes(), "answered for index")


def test_indexes_is_refused_unless_claimed() -> None:
    with pytest.raises(InvalidRequest):
        Guard(Mem(Capabilities(get=True))).indexes()


def test_drop_deletes_the_index_and_a_missing_one_is_fine() -> None:
    g, _, _ = filled()
    out = g.drop("docs")
    assert type(out) is IndexStatus and out.exists is False and out.passages == 0
    after = g.status("docs")
    assert type(after) is IndexStatus and after.exists is False
    again = g.drop("docs")
    assert type(again) is IndexStatus and again.exists is False


def test_drop_is_refused_for_a_backend_without_it() -> None:
    class NoDrop(Mem):
        op_drop = None  # type: ignore[assignment]

    with pytest.raises(InvalidRequest):
        Guard(NoDrop()).drop("docs")


def test_writes_default_to_the_write_deadline_and_reads_to_the_op_deadline() -> None:
    g, mem, ps = filled()
    g.get("docs", [ps[0].id])
    g.scan("docs")
    g.remove("docs", [ps[0].id])
    g.drop("docs")
    assert mem.deadlines == {
        "add": WRITE_DEADLINE_S,
        "get": DEFAULT_DEADLINE_S,
        "scan": DEFAULT_DEADLINE_S,
        "remove": WRITE_DEADLINE_S,
        "drop": WRITE_DEADLINE_S,
    }
    g.add("docs", ps, deadline_s=5)
    g.get("docs", [ps[0].id], deadline_s=2)
    assert mem.deadlines["add"] == 5 and mem.deadlines["get"] == 2


# -- passages the guard must not serve from get and scan --------------------------------------


class Stored(Mem):
    """Answers get and scan built without validation, as backends reading storage do."""

    said: Any = "mem"
    """What its answers give as ``backend``."""

    def get(self, index: str, ids: Sequence[str], *, keys: Sequence[str], **kw: Any) -> Any:
        store = self.data.get(index, {})
        return construct(
            Got,
            {
                "index": index,
                "backend": self.said,
                "code": "GOT",
                "passages": [store[i] for i in ids if i in store],
                "missing_ids": [i for i in ids if i not in store],
                "missing_keys": list(keys),
            },
        )

    def scan(self, index: str, *, limit: int, **kw: Any) -> Any:
        page = [p for _, p in sorted(self.data.get(index, {}).items())][:limit]
        return construct(
            Scanned,
            {
                "index": index,
                "backend": self.said,
                "code": "SCANNED",
                "passages": page,
                "next_after": None,
            },
        )


def _tampered(p: Passage, **changes: Any) -> Passage:
    fields: dict[str, Any] = {
        "id": p.id,
        "text": p.text,
        "source": p.source,
        "start": p.start,
        "end": p.end,
        "metadata": dict(p.metadata),
        "digest": p.digest,
        "key": p.key,
    }
    return Passage.from_stored(**(fields | changes))


@pytest.mark.parametrize(
    "changes, words",
    [
        ({"metadata": {"lang": "xx"}}, "no longer matches its digest"),
        ({"digest": None}, "no digest"),
    ],
)
def test_get_and_scan_never_serve_an_altered_or_undigested_passage(
    changes: dict[str, Any], words: str
) -> None:
    g, mem, ps = filled(Stored(), n=1)
    bad = _tampered(ps[0], **changes)
    mem.data["docs"][ps[0].id] = bad
    for out in (g.get("docs", [ps[0].id]), g.scan("docs")):
        assert type(out) is IndexFailed, out
        assert out.error_type == "IntegrityError" and words in out.reason
    assert bad.digest == changes.get("digest", ps[0].digest)  # the backend's object untouched


def test_get_and_scan_fields_of_the_wrong_type_fail() -> None:
    class Odd(Stored):
        said = 5

    g, _, ps = filled(Odd(), n=1)
    violation(g.get("docs", [ps[0].id]), "wrong type")
    violation(g.scan("docs"), "wrong type")


@pytest.mark.parametrize("exists, left", [(True, 5), (True, 0), (False, 3)])
def test_drop_answering_the_index_is_still_there_fails(exists: bool, left: int) -> None:
    class Keeps(Mem):
        def op_drop(self, index: str, *, deadline: Deadline) -> Any:
            return IndexStatus(index=index, backend=self.name, exists=exists, passages=left)

    g, _, _ = filled(Keeps())
    violation(g.drop("docs"), "answered drop with")


def test_get_by_key_answers_in_the_order_of_the_keys() -> None:
    g = Guard(Mem())
    z = [passage(2, key="zeta"), passage(1, key="zeta")]
    a = [passage(3, key="alpha")]
    assert isinstance(g.add("docs", a + z), Indexed)
    out = g.get("docs", keys=["zeta", "alpha"])
    assert type(out) is Got
    assert [p.key for p in out.passages] == ["zeta", "zeta", "alpha"]
    assert [p.id for p in out.passages[:2]] == sorted(p.id for p in z)  # by id within a key


def test_a_filter_built_in_python_is_checked_before_the_backend() -> None:
    g, mem, _ = filled()
    before = len(mem.filters_given)
    with pytest.raises(InvalidRequest) as info:
        g.search("docs", "otter", filters=Condition("lang", "$eq", float("nan")))
    assert info.value.field == "filters"
    with pytest.raises(InvalidRequest):
        g.scan("docs", filters=Condition("lang", "$in", "en"))
    assert len(mem.filters_given) == before


def test_a_filter_text_that_is_not_unicode_is_a_bad_request_not_a_failure() -> None:
    g, mem, _ = filled()
    before = len(mem.filters_given)
    with pytest.raises(InvalidRequest) as info:
        g.search("docs", "otter", filters=json.loads('{"lang": "\\ud800"}'))
    assert info.value.field == "filters"
    assert len(mem.filters_given) == before


@pytest.mark.parametrize(
    "call",
    [
        lambda g: g.get("docs", ["\ud800"]),
        lambda g: g.get("docs", keys=["doc-\udfff"]),
        lambda g: g.remove("docs", ["\ud800"]),
        lambda g: g.remove("docs", keys=["\ud800"]),
        lambda g: g.scan("docs", after="\ud800"),
    ],
)
def test_ids_keys_and_cursors_that_are_not_unicode_are_refused(call: Any) -> None:
    # no passage can have them (ids and digests are of UTF-8); a backend cannot encode them
    g, mem, ps = filled()
    with pytest.raises(InvalidRequest, match="Unicode"):
        call(g)
    assert mem.get_given == [] and mem.removed_given == []
    assert len(mem.data["docs"]) == len(ps)


def test_remove_by_key_is_held_to_the_remove_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    for module in (guard_base, guard_reads, guard_writes):  # each binds the limit it checks
        monkeypatch.setattr(module, "MAX_REMOVE_IDS", 3)
    g, mem, _ = filled()
    assert isinstance(g.add("docs", [passage(10 + i, key="big") for i in range(4)]), Indexed)
    with pytest.raises(InvalidRequest, match="more than 3"):
        g.remove("docs", keys=["big"])
    assert mem.removed_given == []


# -- the data ops under the guard's general rules ---------------------------------------------

DATA_OPS = [
    ("get", lambda g: g.get("docs", ["x"], deadline_s=0.3)),
    ("scan", lambda g: g.scan("docs", deadline_s=0.3)),
    ("indexes", lambda g: g.indexes(deadline_s=0.3)),
    ("drop", lambda g: g.drop("docs", deadline_s=0.3)),
    ("remove-keys", lambda g: g.remove("docs", keys=["k"], deadline_s=0.3)),
    ("remove-filter", lambda g: g.remove("docs", filters={"lang": "en"}, deadline_s=0.3)),
]


@pytest.mark.parametrize("name, call", DATA_OPS, ids=[n for n, _ in DATA_OPS])
def test_a_data_op_past_its_deadline_times_out(name: str, call: Any) -> None:
    release = threading.Event()

    class Stuck(Mem):
        def get(self, *a: Any, **kw: Any) -> Any:
            release.wait(30)
            return super().get(*a, **kw)

        def scan(self, *a: Any, **kw: Any) -> Any:
            release.wait(30)
            return super().scan(*a, **kw)

        def indexes(self, *a: Any, **kw: Any) -> Any:
            release.wait(30)
            return super().indexes(*a, **kw)

        def op_drop(self, *a: Any, **kw: Any) -> Any:
            release.wait(30)
            return super().op_drop(*a, **kw)

    mem = Stuck()
    try:
        out = call(Guard(mem))
    finally:
        release.set()
    assert type(out) is IndexTimeout and out.deadline_s == 0.3
    assert mem.removed_given == []


@pytest.mark.parametrize("name, call", DATA_OPS, ids=[n for n, _ in DATA_OPS])
def test_a_data_op_of_a_backend_that_is_not_ready_is_unavailable(name: str, call: Any) -> None:
    class Down(Mem):
        def readiness(self) -> Readiness:
            return Readiness.no("server down")

    mem = Down()
    out = call(Guard(mem))
    assert type(out) is IndexUnavailable and out.reason == "server down"
    assert mem.get_given == [] and mem.removed_given == [] and mem.deadlines == {}


class WidensTheFilter(Mem):
    """Rewrites the filter it is given (past the dataclass's frozenness) to match anything,
    hoping the guard checks its hits against that same object."""

    def _passes(self, filters: Any, p: Passage) -> bool:
        if isinstance(filters, Condition):
            object.__setattr__(filters, "op", "$exists")
            object.__setattr__(filters, "value", True)
        return super()._passes(filters, p)


def test_a_plugin_that_rewrites_its_filter_does_not_change_what_is_checked() -> None:
    g, _, _ = filled(WidensTheFilter(), n=5)
    violation(g.scan("docs", filters={"lang": {"$eq": "en"}}), "fails the filter")
    out = g.search("docs", "otter", top_k=10, filters={"lang": {"$eq": "en"}})
    violation(out, "does not pass the filter")
