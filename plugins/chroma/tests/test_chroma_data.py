"""The data interface on both modes: get, scan, indexes, drop, caller keys with upsert, and
operator filters held to :func:`indexplug.filters.matches` over generated metadata."""

from __future__ import annotations

import random
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from chroma_helpers import FAST, corpus, full_passage, server_options
from indexplug import Guard, Indexed, Passage, Searched
from indexplug.filters import matches, parse_filter
from indexplug.outcomes import Got, IndexFailed, IndexList, IndexStatus, NoMatch, Scanned
from indexplug.plugins import get_registry
from indexplug.protocols import Embedder, Granularity, Readiness, Vector
from indexplug_chroma import ChromaBackend, ChromaSettings, fields
from indexplug_chroma.collection import FIELDS_KEY
from indexplug_chroma.stores import collection_name
from indexplug_chroma.testing import ChromaServer

MODES = ("embedded", "server")


@pytest.fixture(params=MODES)
def guard(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Guard]:
    """A guarded chroma backend in each mode (server: the session's ``chroma run``)."""
    opts: dict[str, Any] = {"embedder": FAST}
    if request.param == "server":
        opts = server_options(request.getfixturevalue("server_up"))
    g = get_registry().backend("chroma", opts, home=tmp_path / "chroma")
    yield g
    g.close()


def unique(name: str) -> str:
    """An index name no other test of the session's shared server uses."""
    return f"{name}-{uuid.uuid4().hex[:8]}"


def scan_all(g: Guard, index: str, filters: Any = None, page: int = 7) -> list[Passage]:
    out: list[Passage] = []
    for got in g.scan_all(index, filters=filters, page=page):
        assert isinstance(got, Scanned), got
        out.extend(got.passages)
    return out


# -- generated metadata and filters ----------------------------------------------------------

POOL: list[Any] = [
    0, 1, -1, 2, 1.0, 1.5, -0.5, 2.0, 2.5, True, False, "", "1", "a", "b", "ab", "B",
    2**63 - 1, -(2**63), 2**53 + 1, 2.0**53, 1e300, -1e-300,
]  # fmt: skip
KEYS = ("a", "b", "c")


def _value(r: random.Random) -> Any:
    x = r.random()
    if x < 0.1:
        return None
    if x < 0.15:
        return []
    if x < 0.4:
        return [r.choice(POOL) for _ in range(r.randint(1, 3))]
    return r.choice(POOL)


def _filter(r: random.Random, depth: int = 0) -> dict[str, Any]:
    key = r.choice(KEYS)
    x = r.random()
    if depth < 3 and x < 0.2:
        op = r.choice(["$and", "$or"])
        return {op: [_filter(r, depth + 1) for _ in range(r.randint(1, 3))]}
    if depth < 3 and x < 0.3:
        return {"$not": _filter(r, depth + 1)}
    op = r.choice(["$eq", "$ne", "$in", "$nin", "$gt", "$gte", "$lt", "$lte", "$exists"])
    if op in ("$in", "$nin"):
        return {key: {op: [r.choice([*POOL, None]) for _ in range(r.randint(0, 3))]}}
    if op == "$exists":
        return {key: {op: r.random() < 0.5}}
    if op in ("$eq", "$ne"):
        return {key: {op: r.choice([*POOL, None])}}
    return {key: {op: r.choice([v for v in POOL if type(v) is not bool])}}


def generated(seed: int, n: int) -> list[Passage]:
    r = random.Random(seed)
    out = []
    for i in range(n):
        meta = {k: _value(r) for k in KEYS if r.random() < 0.75}
        out.append(full_passage(f"generated passage {i} about item{i}", i, **meta))
    return out


def test_operator_filters_give_exactly_the_reference_passages(guard: Guard) -> None:
    """Bounded property test: 60 passages with generated metadata (nulls, lists of mixed
    types, 1 and 1.0, true, 64-bit extremes, strings), 150 generated filters; ``scan`` gives
    exactly the passages :func:`matches` passes, and a search for every passage exactly those
    too (strings compared with ``$gt`` take the checked path, the rest Chroma's ``where``)."""
    ps = generated(7, 60)
    index = unique("prop")
    assert isinstance(guard.add(index, ps), Indexed)
    r = random.Random(11)
    inexact = 0
    for n in range(150):
        spec = _filter(r)
        parsed = parse_filter(spec)
        assert parsed is not None
        inexact += not fields.translate(parsed).exact
        want = sorted(p.id for p in ps if matches(parsed, p.metadata))
        got = [p.id for p in scan_all(guard, index, spec)]
        assert got == want, (n, spec)
        if n % 5 == 0:
            out = guard.search(index, "generated passage", top_k=100, filters=spec)
            if want:
                assert isinstance(out, Searched), (spec, out)
                assert sorted(h.passage.id for h in out.hits) == want, spec
            else:
                assert isinstance(out, NoMatch), (spec, out)
    assert 0 < inexact < 150  # both paths ran
    guard.drop(index)


NEIGHBOURS: list[Any] = [
    0.1, 0.09999999999999999, 0.10000000000000002,  # 64-bit neighbours of 0.1
    0.10000000149011612, 0.09999999403953552,  # 32-bit ones: 0.1 as a 32-bit float, below
    -0.1, -0.09999999999999999, 1, 1.0, 0.9999999999999999, 1.0000000000000002,
    16777216.0, 16777217, 16777217.0000000002, 3.4028234663852886e38, 1e39, -1e39, 0.0,
    5e-324,
]  # fmt: skip
"""Floats next to each other in 64 or 32 bits (Chroma compares floats in 32 bits)."""


def test_neighbouring_floats_are_compared_exactly(guard: Guard) -> None:
    """Every operator with every value of :data:`NEIGHBOURS`, stored alone and in lists:
    ``scan`` and ``search`` give exactly the passages :func:`matches` passes (``$ne 0.1``'s
    64-bit neighbour keeps 0.1; ``$eq`` on it finds nothing rather than failing)."""
    ps = [full_passage(f"float passage {i}", i, f=v) for i, v in enumerate(NEIGHBOURS)]
    ps.append(full_passage("float list", len(ps), f=[0.1, 0.5]))  # type: ignore[arg-type]
    ps.append(full_passage("float list", len(ps), f=[0.09999999999999999, 2]))  # type: ignore[arg-type]
    index = unique("floats")
    assert isinstance(guard.add(index, ps), Indexed)
    checked = 0
    for op in ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin"):
        for v in NEIGHBOURS:
            spec = {"f": {op: [v] if op in ("$in", "$nin") else v}}
            parsed = parse_filter(spec)
            assert parsed is not None
            want = sorted(p.id for p in ps if matches(parsed, p.metadata))
            got = [p.id for p in scan_all(guard, index, spec)]
            assert got == want, spec
            if v in (0.09999999999999999, 0.10000000149011612, 16777217):
                out = guard.search(index, "float passage", top_k=100, filters=spec)
                if want:
                    assert isinstance(out, Searched), (spec, out)
                    assert sorted(h.passage.id for h in out.hits) == want, spec
                else:
                    assert isinstance(out, NoMatch), (spec, out)
            checked += 1
    assert checked == 8 * len(NEIGHBOURS)
    one = [p.id for p in scan_all(guard, index, {"f": {"$ne": 0.09999999999999999}})]
    assert ps[0].id in one  # the case that went wrong: 0.1 is not its 64-bit neighbour
    guard.drop(index)


def test_an_operator_the_filter_language_lacks_is_a_bad_request(guard: Guard) -> None:
    from indexplug.errors import InvalidRequest

    index = unique("bad")
    guard.add(index, corpus(3))
    with pytest.raises(InvalidRequest):
        guard.search(index, "otters", filters={"topic": {"$regex": "ott"}})
    guard.drop(index)


def test_an_integer_chroma_cannot_store_exactly_is_refused(guard: Guard) -> None:
    out = guard.add(unique("big"), [full_passage("a huge number", 1, big=2**64)])
    assert isinstance(out, IndexFailed) and "64 bits" in out.reason


# -- get, scan, indexes, drop ----------------------------------------------------------------


def test_get_scan_indexes_and_drop(guard: Guard) -> None:
    ps = corpus(23)
    index, other = unique("gets"), unique("other")
    assert isinstance(guard.add(index, ps), Indexed)
    assert isinstance(guard.add(other, ps[:2]), Indexed)
    asked = [ps[3].id, "f" * 64, ps[0].id]
    got = guard.get(index, asked)
    assert isinstance(got, Got)
    assert [p for p in got.passages] == [ps[3], ps[0]] and got.missing_ids == ["f" * 64]
    nothing = guard.get(unique("absent"), asked, keys=["k"])
    assert isinstance(nothing, Got) and nothing.missing_ids == asked and not nothing.passages
    assert nothing.missing_keys == ["k"]
    # scan: every passage once, ascending ids, pages of at most 7 with a cursor
    pages = list(guard.scan_all(index, page=7))
    assert all(isinstance(p, Scanned) and len(p.passages) <= 7 for p in pages)
    assert len(pages) == 4 and pages[-1].next_after is None  # type: ignore[union-attr]
    seen = [p for page in pages for p in page.passages]  # type: ignore[union-attr]
    assert [p.id for p in seen] == sorted(p.id for p in ps) and set(seen) == set(ps)
    after = sorted(p.id for p in ps)[10]
    tail = guard.scan(index, after=after, limit=100)
    assert isinstance(tail, Scanned) and tail.next_after is None
    assert [p.id for p in tail.passages] == sorted(p.id for p in ps)[11:]
    otters = scan_all(guard, index, {"topic": "otters", "n": {"$gte": 5}})
    assert sorted(p.id for p in otters) == sorted(
        p.id for i, p in enumerate(ps) if p.metadata["topic"] == "otters" and i >= 5
    )
    missing = guard.scan(unique("absent"))
    assert isinstance(missing, Scanned) and not missing.passages and missing.next_after is None
    listed = guard.indexes()
    assert isinstance(listed, IndexList)
    counts = {i.name: i.passages for i in listed.indexes}
    assert counts[index] == 23 and counts[other] == 2
    dropped = guard.drop(other)
    assert isinstance(dropped, IndexStatus) and not dropped.exists
    again = guard.drop(other)  # dropping a missing index is fine
    assert isinstance(again, IndexStatus) and not again.exists
    listed = guard.indexes()
    assert isinstance(listed, IndexList) and other not in {i.name for i in listed.indexes}
    guard.drop(index)


# -- caller keys -------------------------------------------------------------------------------


def keyed(key: str, version: int, n: int, **meta: Any) -> list[Passage]:
    """``n`` passages of document ``key`` at ``version`` (passage 0 the same in every one)."""
    return [
        Passage.create(
            f"document {key} part {i}" + ("" if i == 0 else f" version {version}"),
            f"test://keys/{key}",
            start=100 * i,
            metadata={"version": version if i else 0, **meta},
            key=key,
        )
        for i in range(n)
    ]


def test_adding_under_a_key_replaces_its_earlier_passages(guard: Guard) -> None:
    index = unique("keys")
    v1, v2 = keyed("doc-1", 1, 4), keyed("doc-1", 2, 2)
    other = keyed("doc-2", 1, 3)
    first = guard.add(index, [*v1, *other])
    assert isinstance(first, Indexed) and first.added == 7 and first.replaced == 0
    second = guard.add(index, v2)
    # passage 0 is the same in both versions: known, kept; the other three of v1 replaced
    assert isinstance(second, Indexed), second
    assert (second.added, second.known, second.replaced) == (1, 1, 3)
    got = guard.get(index, keys=["doc-1", "doc-2", "doc-3"])
    assert isinstance(got, Got) and got.missing_keys == ["doc-3"]
    assert {p.id for p in got.passages} == {p.id for p in [*v2, *other]}
    assert {p.id for p in scan_all(guard, index)} == {p.id for p in [*v2, *other]}
    out = guard.search(index, "document doc-1 part", top_k=20)
    assert isinstance(out, Searched) and {h.passage.id for h in out.hits} == {
        p.id for p in [*v2, *other]
    }
    # re-adding the same version changes nothing; new metadata on the same text is written
    same = guard.add(index, v2)
    assert isinstance(same, Indexed) and (same.added, same.known, same.replaced) == (0, 2, 0)
    relabelled = keyed("doc-1", 2, 2, lang="en")
    again = guard.add(index, relabelled)
    assert isinstance(again, Indexed) and again.added == 2 and again.replaced == 0
    back = guard.get(index, keys=["doc-1"])
    assert isinstance(back, Got) and set(back.passages) == set(relabelled)
    removed = guard.remove(index, keys=["doc-2"])
    assert removed.removed == 3  # type: ignore[union-attr]
    st = guard.status(index)
    assert isinstance(st, IndexStatus) and st.passages == 2
    guard.drop(index)


def test_no_reader_sees_both_versions_of_a_key_or_neither(guard: Guard) -> None:
    """A reader searching while a writer replaces one key back and forth sees, in every
    answer, exactly one version's passages (bounded: 24 replacements)."""
    index = unique("atomic")
    versions = [keyed("doc", v, 5) for v in (1, 2)]
    ids = [{p.id for p in vs} for vs in versions]
    assert isinstance(guard.add(index, versions[0]), Indexed)
    done = threading.Event()
    seen: list[set[str]] = []
    problems: list[object] = []

    def read() -> None:
        while not done.is_set():
            out = guard.search(index, "document doc part", top_k=20)
            if not isinstance(out, Searched):
                problems.append(out)
                return
            seen.append({h.passage.id for h in out.hits})
            got = guard.get(index, keys=["doc"])
            if not isinstance(got, Got):
                problems.append(got)
                return
            seen.append({p.id for p in got.passages})

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for n in range(24):
            out = guard.add(index, versions[(n + 1) % 2])
            assert isinstance(out, Indexed) and out.replaced == 4, out
    finally:
        done.set()
        reader.join(timeout=60)
    assert not problems, problems[:3]
    assert seen and all(s in ids for s in seen), [s for s in seen if s not in ids][:2]
    guard.drop(index)


def test_a_collection_made_before_typed_fields_is_filtered_exactly_and_takes_no_keys(
    tmp_path: Path,
) -> None:
    """Collections created before the typed fields hold ``m.*`` copies: filters are checked
    on the exact metadata in each record's provenance, and keyed writes are refused."""
    g = get_registry().backend("chroma", {"embedder": FAST}, home=tmp_path / "c")
    ps = corpus(10)
    assert isinstance(g.add("old", ps), Indexed)
    backend = g.backend
    assert isinstance(backend, ChromaBackend)
    with backend._store.use("old") as client:  # back to the layout before: m.* copies
        coll = client.get_collection(collection_name("old"))
        meta = {k: v for k, v in coll.metadata.items() if k != FIELDS_KEY}
        got = coll.get(include=["embeddings", "documents"])
        by_id = {p.id: p for p in ps}
        coll.delete(ids=got["ids"])
        coll.modify(metadata=meta)
        coll.add(
            ids=got["ids"],
            embeddings=got["embeddings"],
            documents=got["documents"],
            metadatas=[{f"m.{k}": v for k, v in by_id[pid].metadata.items()} for pid in got["ids"]],
        )
    backend._handles.clear()
    spec = {"$or": [{"n": {"$gt": 6}}, {"topic": {"$in": ["otters"]}}]}
    parsed = parse_filter(spec)
    want = sorted(p.id for p in ps if matches(parsed, p.metadata))
    assert [p.id for p in scan_all(g, "old", spec)] == want
    out = g.search("old", "a note", top_k=10, filters=spec)
    assert isinstance(out, Searched) and sorted(h.passage.id for h in out.hits) == want
    refused = g.add("old", keyed("doc", 1, 2))
    assert isinstance(refused, IndexFailed) and "before caller keys" in refused.reason
    g.close()


# -- an embedder configured @auto ---------------------------------------------------------------


class _PathEmbedder:
    """A model-free embedder whose name carries a path suffix, as sentence-transformers'."""

    granularities = frozenset({Granularity.TEXT})

    def __init__(self, name: str) -> None:
        self.name = name
        self.dim = 16

    def readiness(self) -> Readiness:
        return Readiness.yes()

    def _vec(self, text: str) -> Vector:
        v = np.zeros(self.dim, dtype=np.float32)
        for word in text.split():
            v[sum(map(ord, word)) % self.dim] += 1.0
        return v / max(float(np.linalg.norm(v)), 1e-9)

    def embed_documents(self, texts: Sequence[str], granularity: Granularity) -> list[Vector]:
        return [self._vec(t) for t in texts]

    def embed_query(self, text: str, granularity: Granularity) -> Vector:
        return self._vec(text)


def _factory(resolves_to: str, made: list[str]) -> Callable[[str], Embedder]:
    def make(spec: str) -> Embedder:
        made.append(spec)
        name = spec.replace("@auto", resolves_to)
        return _PathEmbedder(name)

    return make


def test_an_auto_embedder_opens_an_index_built_with_the_path_auto_chose_elsewhere(
    tmp_path: Path,
) -> None:
    """``MODEL@auto`` resolves per machine; an index built where it chose ``@bf16`` is opened
    where it chooses ``@int8`` with the embedder of the recorded name, not refused.  Another
    model, or a concrete path that differs, is still refused."""
    from indexplug import Guard as G

    made: list[str] = []
    here = ChromaSettings.from_options({"embedder": "fake:m@auto"})
    built = G(ChromaBackend(tmp_path, here, _factory("@bf16", made)))
    ps = corpus(6)
    assert isinstance(built.add("docs", ps), Indexed)
    built.close()
    elsewhere = G(ChromaBackend(tmp_path, here, _factory("@int8", made)))
    out = elsewhere.search("docs", "a note about otters and item0", top_k=3)
    assert isinstance(out, Searched) and out.hits[0].passage == ps[0]
    assert isinstance(elsewhere.add("docs", corpus(8)[6:]), Indexed)
    st = elsewhere.status("docs")
    assert isinstance(st, IndexStatus) and st.embedder == "fake:m@bf16" and st.passages == 8
    assert made.count("fake:m@bf16") == 1  # built once, from the recorded name
    elsewhere.close()
    for spec in ("fake:other@auto", "fake:m@int8"):
        s = ChromaSettings.from_options({"embedder": spec})
        g = G(ChromaBackend(tmp_path, s, _factory("@int8", made)))
        refused = g.search("docs", "otters", top_k=3)
        assert isinstance(refused, IndexFailed) and "fake:m@bf16" in refused.reason
        g.close()


# -- async ---------------------------------------------------------------------------------------


def test_coroutine_ops_answer_as_the_blocking_ones(guard: Guard) -> None:
    """``asearch``, ``aget``, ``ascan``, ``astatus`` and ``aindexes`` are the backend's own
    coroutines (the guard awaits them); in server mode they use chromadb's
    ``AsyncHttpClient``, and every answer is the blocking op's."""
    import asyncio

    backend = guard.backend
    assert isinstance(backend, ChromaBackend)
    for op in ("search", "get", "scan", "status", "indexes"):
        assert guard._native(op) is not None, op
    index = unique("async")
    ps = generated(3, 30)
    assert isinstance(guard.add(index, ps), Indexed)
    spec = {"$or": [{"a": {"$gt": "a"}}, {"b": {"$exists": False}}]}

    async def run() -> list[Any]:
        return list(
            await asyncio.gather(
                guard.asearch(index, "generated passage item3", top_k=5),
                guard.asearch(index, "generated passage", top_k=40, filters=spec),
                guard.aget(index, [ps[4].id, "0" * 64]),
                guard.ascan(index, after=sorted(p.id for p in ps)[9], limit=8),
                guard.ascan(index, filters=spec, limit=100),
                guard.astatus(index),
                guard.astatus(unique("absent")),
                guard.aindexes(),
            )
        )

    got = asyncio.run(run())
    want = [
        guard.search(index, "generated passage item3", top_k=5),
        guard.search(index, "generated passage", top_k=40, filters=spec),
        guard.get(index, [ps[4].id, "0" * 64]),
        guard.scan(index, after=sorted(p.id for p in ps)[9], limit=8),
        guard.scan(index, filters=spec, limit=100),
        guard.status(index),
        None,
        guard.indexes(),
    ]
    absent = got.pop(6)
    want.pop(6)
    assert isinstance(absent, IndexStatus) and not absent.exists
    for a, b in zip(got, want, strict=True):
        assert type(a) is type(b), (a, b)
        if isinstance(a, Searched):
            assert isinstance(b, Searched)
            assert [(h.passage, round(h.score, 5)) for h in a.hits] == [
                (h.passage, round(h.score, 5)) for h in b.hits
            ]
        else:
            assert a.model_dump() == b.model_dump()  # type: ignore[union-attr]
    assert (backend._aclient is not None) is (backend.settings.mode == "server")
    guard.drop(index)


def test_an_async_search_meets_an_outage_and_recovers(server_up: ChromaServer) -> None:
    """Server stopped: the coroutine answers INDEX_UNAVAILABLE and drops its async client;
    server back: the same backend answers again with a new one."""
    import asyncio

    from indexplug.deadlines import Deadline
    from indexplug.outcomes import IndexUnavailable

    backend = ChromaBackend(
        Path("unused"),
        ChromaSettings.from_options(server_options(server_up)),
        embedder_factory=get_registry().embedder,
    )
    g = Guard(backend, plugin="chroma")
    index = unique("outage")
    assert isinstance(g.add(index, corpus(5)), Indexed)

    def search() -> Any:
        return asyncio.run(
            backend.asearch(index, "a note about otters", top_k=3, deadline=Deadline.after(20))
        )

    assert isinstance(search(), Searched) and backend._aclient is not None
    server_up.stop()
    try:
        down = search()
        assert isinstance(down, IndexUnavailable), down
        assert backend._aclient is None
    finally:
        server_up.start()
    assert isinstance(search(), Searched)
    g.drop(index)
    g.close()
