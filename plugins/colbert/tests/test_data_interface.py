"""The data interface on the native engine (issue 27): get, scan, indexes, drop, caller keys
with an atomic upsert, operator filters (held to :func:`indexplug.filters.matches`), and large
writes that keep what they committed.  Model-free (the hashing embedder)."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from conftest import corpus
from indexplug import Guard, Passage
from indexplug.filters import matches, parse_filter
from indexplug.outcomes import (
    Got,
    Indexed,
    IndexList,
    IndexStatus,
    IndexTimeout,
    NoMatch,
    Scanned,
    Searched,
)
from indexplug_colbert.engines.native import NativeIndex
from indexplug_colbert.store import Store

Make = Callable[..., Guard]


def _scan_all(g: Guard, index: str, filters: Any = None, limit: int = 7) -> list[Passage]:
    """Every page of a scan, checking the cursor as it goes (bounded)."""
    out: list[Passage] = []
    after: str | None = None
    for _ in range(1000):
        page = g.scan(index, filters=filters, after=after, limit=limit)
        assert isinstance(page, Scanned), page
        out += page.passages
        if page.next_after is None:
            return out
        assert page.next_after == page.passages[-1].id
        after = page.next_after
    raise AssertionError("the scan never ended")


# -- get, scan, indexes, drop -------------------------------------------------------------


def test_get_by_id_and_key_reports_what_is_missing(guard: Guard) -> None:
    ps = [
        Passage.create(f"alpha beta item{i}", f"mem://k/{i}", key=f"doc{i % 2}") for i in range(6)
    ]
    assert isinstance(guard.add("g", ps), Indexed)
    out = guard.get("g", [ps[0].id, "f" * 64], keys=["doc1", "nope"])
    assert isinstance(out, Got)
    assert out.passages[0].id == ps[0].id
    assert {p.id for p in out.passages} == {ps[0].id} | {p.id for p in ps[1::2]}
    assert out.missing_ids == ["f" * 64] and out.missing_keys == ["nope"]
    assert all(p.intact() for p in out.passages)


def test_get_and_scan_of_a_missing_index_answer_everything_missing(guard: Guard) -> None:
    got = guard.get("ghost", ["a" * 64], keys=["k"])
    assert isinstance(got, Got)
    assert (got.passages, got.missing_ids, got.missing_keys) == ([], ["a" * 64], ["k"])
    page = guard.scan("ghost", limit=5)
    assert isinstance(page, Scanned) and page.passages == [] and page.next_after is None


def test_scan_pages_through_every_live_passage_in_id_order(make: Make) -> None:
    g = make(codebook_min_tokens=64, merge_factor=2)  # several segments, some coded
    ps = corpus(40, "scan")
    for b in range(0, 40, 8):
        assert isinstance(g.add("s", ps[b : b + 8]), Indexed)
    gone = [ps[3].id, ps[17].id]
    g.remove("s", gone)
    seen = _scan_all(g, "s")
    ids = [p.id for p in seen]
    assert ids == sorted(ids)
    assert set(ids) == {p.id for p in ps} - set(gone)
    # a cursor that is not an id (longer than any, non-ASCII) still splits the order right
    odd = ids[10] + "é" * 80
    page = g.scan("s", after=odd, limit=100)
    assert isinstance(page, Scanned)
    assert [p.id for p in page.passages] == [i for i in ids if i > odd]


def test_indexes_lists_counts_and_drop_removes(guard: Guard) -> None:
    guard.add("one", corpus(3, "one"))
    guard.add("two", corpus(5, "two"))
    guard.remove("two", [corpus(5, "two")[0].id])
    listed = guard.indexes()
    assert isinstance(listed, IndexList)
    assert [(i.name, i.passages) for i in listed.indexes] == [("one", 3), ("two", 4)]
    dropped = guard.drop("one")
    assert isinstance(dropped, IndexStatus) and dropped.exists is False
    again = guard.drop("one")  # a missing index: dropped already, not an error
    assert isinstance(again, IndexStatus) and again.exists is False
    listed = guard.indexes()
    assert isinstance(listed, IndexList)
    assert [i.name for i in listed.indexes] == ["two"]


def test_indexes_skips_what_is_not_an_index(guard: Guard, tmp_path: Any) -> None:
    guard.add("real", corpus(2, "real"))
    home = tmp_path / "home"
    (home / "stray").mkdir()  # a folder without index.json: not an index
    (home / "notes.txt").write_text("not an index")
    listed = guard.indexes()
    assert isinstance(listed, IndexList)
    assert [(i.name, i.passages) for i in listed.indexes] == [("real", 2)]


# -- metadata: lists and null round-trip ------------------------------------------------------


def test_list_and_null_metadata_round_trip(guard: Guard) -> None:
    meta: dict[str, Any] = {"tags": ["x", 2, 2.5, True], "none": None, "empty": [], "n": 1}
    p = Passage.create("alpha gamma words", "mem://meta/0", metadata=meta, key="K")
    guard.add("m", [p])
    got = guard.get("m", [p.id])
    assert isinstance(got, Got) and got.passages[0].metadata == meta
    assert got.passages[0].key == "K" and got.passages[0].digest == p.digest
    hits = guard.search("m", "alpha", filters={"tags": {"$in": [2]}})
    assert isinstance(hits, Searched) and hits.hits[0].passage.metadata == meta


# -- caller keys ----------------------------------------------------------------------------


def _doc(key: str, version: int, n: int) -> list[Passage]:
    return [
        Passage.create(f"alpha v{version} part{i} of {key}", f"mem://{key}/v{version}/{i}", key=key)
        for i in range(n)
    ]


def test_upsert_replaces_a_keys_earlier_passages(guard: Guard) -> None:
    v1 = _doc("A", 1, 3) + _doc("B", 1, 2)
    assert isinstance(guard.add("u", v1), Indexed)
    v2 = [v1[0], *_doc("A", 2, 1)]  # one passage kept, one new, two gone
    out = guard.add("u", v2)
    assert isinstance(out, Indexed)
    assert (out.added, out.known, out.replaced) == (1, 1, 2)
    got = guard.get("u", [], keys=["A", "B"])
    assert isinstance(got, Got)
    assert {p.id for p in got.passages if p.key == "A"} == {p.id for p in v2}
    assert {p.id for p in got.passages if p.key == "B"} == {p.id for p in v1[3:]}
    # nothing new, but fewer passages: the rest are still replaced
    out = guard.add("u", [v1[0]])
    assert isinstance(out, Indexed) and (out.added, out.known, out.replaced) == (0, 1, 1)
    status = guard.status("u")
    assert isinstance(status, IndexStatus) and status.passages == 3


def test_upsert_commits_additions_and_removals_in_one_manifest(
    guard: Guard, monkeypatch: pytest.MonkeyPatch
) -> None:
    guard.add("u", _doc("A", 1, 4))
    commits: list[int] = []
    real = Store.commit

    def counting(self: Store, manifest: Any) -> None:
        commits.append(manifest.live)
        real(self, manifest)

    monkeypatch.setattr(Store, "commit", counting)
    out = guard.add("u", _doc("A", 2, 2))
    assert isinstance(out, Indexed) and out.replaced == 4
    assert commits == [2]  # one commit, already without the four old passages


def test_no_reader_sees_both_versions_of_a_key_or_neither(guard: Guard) -> None:
    versions = [_doc("K", v, 3) for v in range(2)]
    allowed = [frozenset(p.id for p in v) for v in versions]
    guard.add("r", versions[0])
    stop = threading.Event()
    seen: list[frozenset[str]] = []

    def read() -> None:
        while not stop.is_set() and len(seen) < 2000:
            got = guard.get("r", [], keys=["K"])
            assert isinstance(got, Got)
            seen.append(frozenset(p.id for p in got.passages))

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for n in range(12):
            out = guard.add("r", versions[(n + 1) % 2])
            assert isinstance(out, Indexed) and out.replaced == 3
    finally:
        stop.set()
        reader.join(timeout=60)
    assert seen and all(s in allowed for s in seen), {len(s) for s in seen}


def test_a_key_is_replaced_after_merges_moved_its_passages(make: Make) -> None:
    g = make(codebook_min_tokens=64, merge_factor=2)
    first = _doc("K", 0, 4)
    g.add("m", [*first, *corpus(8, "filler0")])
    for b in range(1, 4):  # later batches merge the key's segment into larger, coded ones
        g.add("m", corpus(8, f"filler{b}"))
    out = g.add("m", [first[0], *_doc("K", 9, 1)])
    assert isinstance(out, Indexed) and (out.added, out.known, out.replaced) == (1, 1, 3)
    got = g.get("m", [], keys=["K"])
    assert isinstance(got, Got)
    assert sorted(p.text for p in got.passages) == ["alpha v0 part0 of K", "alpha v9 part0 of K"]
    assert len(_scan_all(g, "m")) == 34


# -- filters --------------------------------------------------------------------------------


def test_a_filtered_search_returns_top_k_passing_hits(make: Make) -> None:
    """The best matches fail the filter: ranking after truncation would return fewer."""
    g = make(candidates=4, reach_pool=8, codebook_min_tokens=64, merge_factor=4)
    ps = [
        Passage.create(
            f"alpha beta gamma {'delta ' * (i % 5)} item{i}",
            f"mem://f/{i}",
            metadata={"keep": i >= 55, "n": i},
        )
        for i in range(60)
    ]
    for b in range(0, 60, 10):
        g.add("f", ps[b : b + 10])
    out = g.search("f", "alpha beta gamma delta", top_k=5, filters={"keep": True})
    assert isinstance(out, Searched)
    assert len(out.hits) == 5 and all(h.passage.metadata["keep"] is True for h in out.hits)
    none = g.search("f", "alpha", top_k=5, filters={"n": {"$gt": 1000}})
    assert isinstance(none, NoMatch) and none.searched == 60


VALUES: list[Any] = ["a", "b", "", 0, 1, 2, 1.5, -1, True, False, None]


def _random_metadata(rng: random.Random) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    for field in ("x", "y", "tags"):
        roll = rng.random()
        if roll < 0.2:
            continue  # missing
        if roll < 0.45:
            meta[field] = [v for v in rng.sample(VALUES, rng.randint(0, 3)) if v is not None]
        else:
            meta[field] = rng.choice(VALUES)
    return meta


def _random_filter(rng: random.Random, depth: int = 0) -> dict[str, Any]:
    roll = rng.random()
    if depth < 2 and roll < 0.3:
        op = rng.choice(["$and", "$or"])
        return {op: [_random_filter(rng, depth + 1) for _ in range(rng.randint(1, 3))]}
    if depth < 2 and roll < 0.4:
        return {"$not": _random_filter(rng, depth + 1)}
    field = rng.choice(["x", "y", "tags", "absent"])
    op = rng.choice(["$eq", "$ne", "$in", "$nin", "$gt", "$gte", "$lt", "$lte", "$exists"])
    if op in ("$in", "$nin"):
        value: Any = rng.sample(VALUES, rng.randint(1, 3))
    elif op == "$exists":
        value = rng.random() < 0.5
    elif op in ("$eq", "$ne"):
        value = rng.choice(VALUES)
    else:
        value = rng.choice(["a", "", 0, 1, 1.5, -1])
    return {field: {op: value}}


def test_filters_give_exactly_what_the_reference_gives(guard: Guard) -> None:
    """A bounded property test: random metadata (lists, null, missing, mixed types) and random
    filters; scan and search must give exactly the passages :func:`matches` gives."""
    rng = random.Random(27)
    ps = [
        Passage.create(f"alpha beta record{i}", f"mem://p/{i}", metadata=_random_metadata(rng))
        for i in range(80)
    ]
    guard.add("p", ps)
    checked = 0
    for _ in range(120):
        spec = _random_filter(rng)
        f = parse_filter(spec)
        want = {p.id for p in ps if matches(f, p.metadata)}
        scanned = g_ids = {p.id for p in _scan_all(guard, "p", spec, limit=25)}
        assert scanned == want, spec
        out = guard.search("p", "alpha beta", top_k=100, filters=spec)
        if want:
            assert isinstance(out, Searched), (spec, out)
            g_ids = {h.passage.id for h in out.hits}
        else:
            assert isinstance(out, NoMatch), (spec, out)
            g_ids = set()
        assert g_ids == want, spec
        checked += bool(want) and len(want) < len(ps)
    assert checked >= 30  # most filters split the corpus: the test says something


# -- large writes -------------------------------------------------------------------------


def test_a_write_past_its_deadline_keeps_its_batches_and_a_repeat_completes(
    guard: Guard, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guard sends 600 passages in batches of 256; the second batch's embedding runs past
    the deadline: the first batch stays stored, the answer says so, and the same call again
    stores the rest without duplicates."""
    ps = corpus(600, "big", words=4)
    real = NativeIndex.prepare
    calls: list[int] = []

    def slow_second(self: NativeIndex, passages: Any, deadline: Any) -> Any:
        calls.append(len(passages))
        if len(calls) == 2:
            time.sleep(deadline.remaining() + 0.05)
        return real(self, passages, deadline)

    monkeypatch.setattr(NativeIndex, "prepare", slow_second)
    out = guard.add("big", ps, deadline_s=5.0)
    assert isinstance(out, IndexTimeout), out
    assert out.committed == 256
    monkeypatch.setattr(NativeIndex, "prepare", real)
    status = guard.status("big")
    assert isinstance(status, IndexStatus) and status.passages == 256
    again = guard.add("big", ps, deadline_s=120.0)
    assert isinstance(again, Indexed), again
    assert (again.added, again.known) == (344, 256)
    ids = [p.id for p in _scan_all(guard, "big", limit=500)]
    assert len(ids) == len(set(ids)) == 600
