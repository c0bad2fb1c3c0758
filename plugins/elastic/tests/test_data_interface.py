"""The data interface on a real node: get, scan, indexes, drop, operator filters, async, and
an index of the flat layout of earlier versions.

The filter property test generates filters with hypothesis and holds every scan and search
answer to :func:`indexplug.filters.matches` over a corpus whose metadata has every kind the
filters distinguish: ints and floats that are equal, booleans, strings that are numbers,
null, lists, and strings around the order terms' chunk boundaries (see
``indexplug_elastic.filtering``).
"""

from __future__ import annotations

import asyncio
import inspect
import random
from collections.abc import Callable
from typing import Any

import pytest
from elasticsearch import AsyncElasticsearch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from indexplug import Guard, Passage
from indexplug.errors import InvalidRequest
from indexplug.filters import matches, parse_filter
from indexplug.outcomes import (
    Got,
    Indexed,
    IndexFailed,
    IndexList,
    IndexStatus,
    Scanned,
    Searched,
)
from indexplug_elastic.backend import ElasticBackend
from indexplug_elastic.filtering import CHUNK
from indexplug_elastic.testing.flat import write_flat
from indexplug_elastic.testing.server import EsCluster

BackendMaker = Callable[..., Guard]

LONG = "x" * (CHUNK - 1)
STRINGS = [
    "",
    "a",
    "ab",
    "b",
    "1",
    "true",
    "é",
    "\U0001f600",
    LONG,
    LONG + "x",  # exactly one chunk
    LONG + "xa",
    LONG + "x" + "x" * CHUNK,  # exactly two chunks
    LONG + "x" + "x" * CHUNK + "b",
    LONG + "y",
    LONG + "xy" + "x" * CHUNK,
]
NUMBERS: list[Any] = [
    -2,
    -1.5,
    0,
    0.0,
    1,
    1.0,
    2,
    2.5,
    3,
    2**53,
    2**53 + 1,
    float(2**53),
    -(10**30),
]
SCALARS: list[Any] = [*STRINGS, *NUMBERS, True, False]
KEYS = ["a", "b", "c"]


def metadata_of(rng: random.Random) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in KEYS:
        roll = rng.random()
        if roll < 0.15:
            continue  # missing
        if roll < 0.25:
            out[key] = None
        elif roll < 0.45:
            out[key] = [rng.choice(SCALARS) for _ in range(rng.randint(0, 3))]
        else:
            out[key] = rng.choice(SCALARS)
    return out


def corpus(n: int, seed: int = 7) -> list[Passage]:
    rng = random.Random(seed)
    return [
        Passage.create(f"common words item{i}", f"mem://p/{i}", metadata=metadata_of(rng))
        for i in range(n)
    ]


scalars = st.sampled_from(SCALARS)
values = st.one_of(st.none(), scalars)
ordered = st.sampled_from([*STRINGS, *[n for n in NUMBERS]])


def conditions() -> st.SearchStrategy[dict[str, Any]]:
    key = st.sampled_from(KEYS)
    op = st.one_of(
        st.tuples(st.just("$eq"), values),
        st.tuples(st.just("$ne"), values),
        st.tuples(st.just("$in"), st.lists(values, max_size=3)),
        st.tuples(st.just("$nin"), st.lists(values, max_size=3)),
        st.tuples(st.sampled_from(["$gt", "$gte", "$lt", "$lte"]), ordered),
        st.tuples(st.just("$exists"), st.booleans()),
    )
    return st.builds(lambda k, ov: {k: {ov[0]: ov[1]}}, key, op)


filters = st.recursive(
    conditions(),
    lambda inner: st.one_of(
        st.builds(lambda xs: {"$and": xs}, st.lists(inner, min_size=1, max_size=3)),
        st.builds(lambda xs: {"$or": xs}, st.lists(inner, min_size=1, max_size=3)),
        st.builds(lambda x: {"$not": x}, inner),
    ),
    max_leaves=6,
)


def scan_ids(g: Guard, index: str, flt: Any = None, limit: int = 1000) -> list[str]:
    ids: list[str] = []
    for page in g.scan_all(index, filters=flt, page=limit):
        assert isinstance(page, Scanned), page
        ids += [p.id for p in page.passages]
    return ids


def test_filters_are_exactly_the_reference(make_single: BackendMaker) -> None:
    """Scans and searches select exactly the passages ``matches`` accepts, for generated
    filters over every operator (and the backend claims them all)."""
    g = make_single()
    assert g.capabilities.filter_operators == frozenset(
        {
            "$eq",
            "$ne",
            "$in",
            "$nin",
            "$gt",
            "$gte",
            "$lt",
            "$lte",
            "$exists",
            "$and",
            "$or",
            "$not",
        }
    )
    ps = corpus(80)
    assert isinstance(g.add("docs", ps), Indexed)

    @settings(
        max_examples=150,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(flt=filters)
    def check(flt: dict[str, Any]) -> None:
        parsed = parse_filter(flt)
        expected = sorted(p.id for p in ps if matches(parsed, p.metadata))
        assert scan_ids(g, "docs", flt) == expected, flt
        found = g.search("docs", "common words", top_k=100, filters=flt)
        got = sorted(h.passage.id for h in found.hits) if isinstance(found, Searched) else []
        assert found.code in ("SEARCHED", "NO_MATCH"), found
        assert got == expected, flt

    check()


@pytest.mark.parametrize(
    ("flt", "expected"),
    [
        ({"v": 1}, {"int 1", "float 1.0", "list [1, 'x']"}),
        ({"v": True}, {"true"}),
        ({"v": "1"}, {"string 1"}),
        ({"v": None}, {"null", "missing", "empty list"}),
        ({"v": {"$ne": 1}}, {"true", "string 1", "null", "missing", "empty list", "big"}),
        ({"v": {"$gt": 0.5}}, {"int 1", "float 1.0", "list [1, 'x']", "big"}),
        ({"v": {"$gte": "1"}}, {"string 1", "list [1, 'x']"}),
        (
            {"v": {"$exists": True}},
            {"int 1", "float 1.0", "true", "string 1", "list [1, 'x']", "big"},
        ),
        ({"v": {"$in": [True, None]}}, {"true", "null", "missing", "empty list"}),
        ({"v": {"$gt": 2**53}}, {"big"}),
    ],
)
def test_filters_are_type_strict(
    make_single: BackendMaker, flt: dict[str, Any], expected: set[str]
) -> None:
    """``1 == 1.0``, but ``true`` is not ``1`` and ``"1"`` is not ``1``; null, missing and ``[]``
    are the same; a list holds a value any element equals; order never crosses types."""
    g = make_single()
    named: dict[str, Any] = {
        "int 1": 1,
        "float 1.0": 1.0,
        "true": True,
        "string 1": "1",
        "null": None,
        "empty list": [],
        "list [1, 'x']": [1, "x"],
        "big": 2**53 + 1,
    }
    ps = [Passage.create(name, f"mem://{name}", metadata={"v": v}) for name, v in named.items()]
    ps.append(Passage.create("missing", "mem://missing", metadata={}))
    assert isinstance(g.add("docs", ps), Indexed)
    page = g.scan("docs", filters=flt, limit=100)
    assert isinstance(page, Scanned)
    assert {p.text for p in page.passages} == expected


def test_get_by_id(make_single: BackendMaker) -> None:
    g = make_single()
    ps = corpus(5)
    missing = g.get("docs", [ps[0].id])
    assert isinstance(missing, Got) and missing.passages == [] and missing.missing_ids == [ps[0].id]
    assert isinstance(g.add("docs", ps[:3]), Indexed)
    got = g.get("docs", [ps[2].id, ps[4].id, ps[0].id])
    assert isinstance(got, Got)
    assert [p.id for p in got.passages] == [ps[2].id, ps[0].id]
    assert got.passages[0] == ps[2] and got.passages[1].metadata == ps[0].metadata
    assert got.missing_ids == [ps[4].id]


def test_scan_pages_every_passage_once_in_id_order(make_single: BackendMaker) -> None:
    g = make_single()
    empty = g.scan("docs")
    assert isinstance(empty, Scanned) and empty.passages == [] and empty.next_after is None
    ps = corpus(23)
    assert isinstance(g.add("docs", ps), Indexed)
    pages = list(g.scan_all("docs", page=5))
    assert [len(p.passages) for p in pages if isinstance(p, Scanned)] == [5, 5, 5, 5, 3]
    assert pages[-1].next_after is None  # type: ignore[union-attr]
    ids = [p.id for page in pages if isinstance(page, Scanned) for p in page.passages]
    assert ids == sorted(p.id for p in ps)
    exact = g.scan("docs", limit=23)
    assert isinstance(exact, Scanned) and len(exact.passages) == 23 and exact.next_after is None
    # a cursor that is no stored id still pages from there
    mid = sorted(p.id for p in ps)[10]
    after = g.scan("docs", after=mid[:-1] + "~", limit=100)
    assert isinstance(after, Scanned)
    assert [p.id for p in after.passages] == sorted(p.id for p in ps)[11:]


def test_indexes_lists_only_marked_indexes_under_the_prefix(
    make_single: BackendMaker, es_single: EsCluster
) -> None:
    g = make_single()
    raw = g.backend
    assert isinstance(raw, ElasticBackend)
    listed = g.indexes()
    assert isinstance(listed, IndexList) and listed.indexes == []
    assert isinstance(g.add("beta", corpus(3)), Indexed)
    assert isinstance(g.add("alpha", corpus(5, seed=1)), Indexed)
    # someone else's index under our prefix, and one whose name is no index name
    status, _ = es_single.request("PUT", f"/{raw.es_index('foreign')}", {})
    assert status == 200
    status, _ = es_single.request("PUT", f"/{raw.opts.prefix}bad..name", {})
    assert status == 200
    listed = g.indexes()
    assert isinstance(listed, IndexList)
    assert [(i.name, i.passages) for i in listed.indexes] == [("alpha", 5), ("beta", 3)]


def test_drop_answers_the_index_is_gone(make_single: BackendMaker, es_single: EsCluster) -> None:
    g = make_single()
    assert isinstance(g.add("docs", corpus(4)), Indexed)
    assert isinstance(g.add("other", corpus(2)), Indexed)
    dropped = g.drop("docs")
    assert isinstance(dropped, IndexStatus) and dropped.exists is False and dropped.passages == 0
    again = g.drop("docs")
    assert isinstance(again, IndexStatus) and again.exists is False
    status = g.status("docs")
    assert isinstance(status, IndexStatus) and status.exists is False
    other = g.status("other")
    assert isinstance(other, IndexStatus) and other.passages == 2
    raw = g.backend
    assert isinstance(raw, ElasticBackend)
    es_single.request("PUT", f"/{raw.es_index('foreign')}", {})
    refused = g.drop("foreign")
    assert isinstance(refused, IndexFailed) and "not an indexplug mapping" in refused.reason
    assert es_single.request("HEAD", f"/{raw.es_index('foreign')}")[0] == 200


def test_async_reads_are_native_coroutines(make_single: BackendMaker) -> None:
    """asearch, aget, ascan and aindexes run on the event loop with AsyncElasticsearch: they
    answer as the blocking forms do even with the blocking client made unusable."""
    g = make_single()
    raw = g.backend
    assert isinstance(raw, ElasticBackend)
    for op in ("asearch", "aget", "ascan", "aindexes"):
        assert inspect.iscoroutinefunction(getattr(raw, op)), op
    ps = corpus(12)
    assert isinstance(g.add("docs", ps), Indexed)
    flt = {"a": {"$exists": True}}
    want_search = g.search("docs", "common item3", top_k=5, filters=flt)
    want_scan = g.scan("docs", limit=4, filters=flt)
    want_get = g.get("docs", [ps[3].id, "nope"])
    want_list = g.indexes()

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the blocking client was used by an async op")

    raw._cx.conn.bounded = refuse  # type: ignore[method-assign]
    raw._cx.conn.within = refuse  # type: ignore[method-assign]

    async def run() -> tuple[Any, ...]:
        try:
            return await asyncio.gather(
                g.asearch("docs", "common item3", top_k=5, filters=flt),
                g.ascan("docs", limit=4, filters=flt),
                g.aget("docs", [ps[3].id, "nope"]),
                g.aindexes(),
            )
        finally:
            await raw.aclose()

    searched, scanned, got, listed = asyncio.run(run())
    assert isinstance(searched, Searched) and isinstance(want_search, Searched)
    assert [h.passage.id for h in searched.hits] == [h.passage.id for h in want_search.hits]
    assert scanned == want_scan  # the same page and cursor
    assert got == want_get
    assert listed == want_list


def test_an_event_loop_that_ends_closes_the_async_client_it_made(
    make_single: BackendMaker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A caller that only awaits ops (a framework's async API under ``asyncio.run``) never calls
    the backend's ``aclose``: the client made on that loop is closed when the loop shuts down,
    on the loop, so no HTTP session or socket to the server is left open behind it."""
    g = make_single()
    assert isinstance(g.add("docs", corpus(3)), Indexed)
    closed: list[AsyncElasticsearch] = []
    close = AsyncElasticsearch.close

    async def spy(self: AsyncElasticsearch) -> None:
        closed.append(self)
        await close(self)

    monkeypatch.setattr(AsyncElasticsearch, "close", spy)

    async def run() -> Any:
        return await g.asearch("docs", "common", top_k=2)

    for _ in range(2):  # one client per loop, each closed with its loop
        assert isinstance(asyncio.run(run()), Searched)
    assert len(closed) == 2 and closed[0] is not closed[1]

    async def explicitly() -> Any:
        try:
            return await g.asearch("docs", "common", top_k=2)
        finally:
            await g.backend.aclose()  # type: ignore[attr-defined]

    assert isinstance(asyncio.run(explicitly()), Searched)
    assert len(closed) == 3  # closed once, by aclose: the loop's shutdown has nothing left
    g.close()
    assert len(closed) == 3


def test_an_index_of_the_flat_layout_answers_how_to_migrate_it(
    make_single: BackendMaker, es_single: EsCluster
) -> None:
    """An index written by earlier versions (one document per passage) is recognised when
    opened: every read and write answers INDEX_FAILED naming the command that migrates it, and
    nothing in it changes; it is still listed, and can be dropped."""
    g = make_single()
    ps = corpus(12)
    raw = g.backend
    assert isinstance(raw, ElasticBackend)
    es_index = raw.es_index("old")
    write_flat(es_single, es_index, ps)
    answers = [
        g.search("old", "common item4"),
        g.get("old", [ps[0].id]),
        g.scan("old"),
        g.status("old"),
        g.add("old", corpus(1, seed=3)),
        g.remove("old", ids=[ps[0].id]),
    ]
    for out in answers:
        assert isinstance(out, IndexFailed), out
        assert out.error_type == "FlatLayout" and "indexplug migrate --index old" in out.reason
    _, body = es_single.request("GET", f"/{es_index}/_count")
    assert body["count"] == len(ps)
    listed = g.indexes()
    assert isinstance(listed, IndexList)
    assert [(i.name, i.passages) for i in listed.indexes] == [("old", len(ps))]
    assert isinstance(g.call_extra("drop", "old"), IndexStatus)
    status, _ = es_single.request("GET", f"/{es_index}")
    assert status == 404


def test_a_filter_the_parser_refuses_never_reaches_the_server(make_single: BackendMaker) -> None:
    g = make_single()
    assert isinstance(g.add("docs", corpus(3)), Indexed)
    with pytest.raises(InvalidRequest, match="booleans"):
        g.scan("docs", filters={"a": {"$gt": True}})


def test_a_hybrid_search_with_operators_is_the_same_async(make_single: BackendMaker) -> None:
    """Both legs (BM25 and kNN) carry the filter; asearch (the query embedded on a thread)
    answers what search does."""
    g = make_single(embedder="hashing:default")
    ps = corpus(20)
    assert isinstance(g.add("docs", ps), Indexed)
    flt = {"$or": [{"a": {"$lte": 1}}, {"b": {"$in": [True, "a"]}}]}
    parsed = parse_filter(flt)
    allowed = {p.id for p in ps if matches(parsed, p.metadata)}
    want = g.search("docs", "common words item7", top_k=20, filters=flt)
    assert isinstance(want, Searched) and want.scale.name == "rrf"
    assert {h.passage.id for h in want.hits} == allowed

    async def run() -> Any:
        try:
            return await g.asearch("docs", "common words item7", top_k=20, filters=flt)
        finally:
            await g.backend.aclose()  # type: ignore[attr-defined]

    got = asyncio.run(run())
    assert isinstance(got, Searched)
    assert [h.passage.id for h in got.hits] == [h.passage.id for h in want.hits]
