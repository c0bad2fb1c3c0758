"""The store beyond Haystack's own suite: exact round trips, the filter translation checked
against Haystack's in-memory store, policies, serialisation, async, typed failures."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any

import indexplug
import pytest
from haystack.core.errors import SerializationError
from haystack.dataclasses import ByteStream, Document, SparseEmbedding
from haystack.document_stores.errors import DuplicateDocumentError
from haystack.document_stores.in_memory import InMemoryDocumentStore
from haystack.document_stores.types import DuplicatePolicy
from haystack.errors import FilterError
from indexplug.filters import Condition
from indexplug_haystack import IndexplugDocumentStore, MetadataRefused
from indexplug_haystack.filters import translate


def sqlite_store(index: str = "hs") -> IndexplugDocumentStore:
    return IndexplugDocumentStore(index, backend="sqlite-fts5")


ODD = [
    Document(id="a", content="alpha", meta={"n": 1, "flag": True, "tags": ["x", "y"]}),
    Document(id="b", content="beta", meta={"n": 1.0, "flag": False, "nested": {"k": [1, 2]}}),
    Document(id="c", content="gamma", meta={"n": True, "tags": "x", "big": 2**60}),
    Document(id="d", content="delta", meta={"n": 0, "when": "2021-03-04T05:06:07"}),
    Document(id="e", content="epsilon", meta={"n": None, "when": "2021-03-04 05:06:07"}),
    Document(id="f", content="zeta", meta={"n": "1", "when": "not a date"}),
    Document(id="g", content="eta", meta={"n": -3.5, "tags": []}),
    Document(id="h", content="theta", meta={}),
    Document(id="i", content="iota", meta={"n": [1], "when": "2020-01-01"}),
]

FILTERS: list[dict[str, Any]] = [
    {"field": "meta.n", "operator": "==", "value": 1},
    {"field": "meta.n", "operator": "==", "value": True},
    {"field": "meta.n", "operator": "==", "value": 0},
    {"field": "meta.n", "operator": "==", "value": False},
    {"field": "meta.n", "operator": "==", "value": None},
    {"field": "meta.n", "operator": "!=", "value": None},
    {"field": "meta.n", "operator": "!=", "value": 1},
    {"field": "meta.n", "operator": "==", "value": "1"},
    {"field": "meta.n", "operator": "==", "value": [1]},
    {"field": "meta.n", "operator": "in", "value": [1, "1", None]},
    {"field": "meta.n", "operator": "not in", "value": [1, -3.5]},
    {"field": "meta.n", "operator": "in", "value": []},
    {"field": "meta.tags", "operator": "==", "value": "x"},
    {"field": "meta.tags", "operator": "==", "value": ["x", "y"]},
    {"field": "meta.tags", "operator": "!=", "value": "x"},
    {"field": "meta.nested.k", "operator": "==", "value": [1, 2]},
    {"field": "meta.big", "operator": "==", "value": 2**60},
    {"field": "meta.when", "operator": "==", "value": "2021-03-04T05:06:07"},
    {"field": "meta.when", "operator": ">=", "value": "2021-01-01"},
    {"field": "meta.n", "operator": ">", "value": None},
    {"field": "content", "operator": "==", "value": "beta"},
    {"field": "id", "operator": "in", "value": ["a", "h"]},
    {"field": "flag", "operator": "==", "value": False},
    {"field": "meta.missing", "operator": "==", "value": None},
    {
        "operator": "OR",
        "conditions": [
            {"field": "meta.flag", "operator": "==", "value": True},
            {"field": "meta.n", "operator": "==", "value": -3.5},
        ],
    },
    {
        "operator": "NOT",
        "conditions": [
            {"field": "meta.n", "operator": "==", "value": 1},
            {"field": "meta.flag", "operator": "!=", "value": None},
        ],
    },
    {
        "operator": "AND",
        "conditions": [
            {"field": "meta.n", "operator": "==", "value": None},
            {"field": "meta.when", "operator": "<", "value": "2022-01-01"},
        ],
    },
    {
        "operator": "NOT",
        "conditions": [{"field": "meta.when", "operator": ">", "value": "2020-06-01"}],
    },
    {"operator": "AND", "conditions": []},
    {"operator": "OR", "conditions": []},
    # raises in Haystack: a number against a date string
    {"field": "meta.n", "operator": ">", "value": "2020-01-01"},
]


def _outcome(store: Any, filters: dict[str, Any]) -> Any:
    try:
        return [d.id for d in store.filter_documents(filters)]
    except FilterError:
        return FilterError


def chroma_store(index: str = "hs") -> IndexplugDocumentStore:
    return IndexplugDocumentStore(index, backend="chroma", options={"embedder": "hashing:default"})


@pytest.mark.parametrize("make", [sqlite_store, chroma_store], ids=["sqlite-fts5", "chroma"])
@pytest.mark.parametrize("filters", FILTERS, ids=[str(i) for i in range(len(FILTERS))])
def test_filters_mean_what_they_mean_in_haystack(filters: dict[str, Any], make: Any) -> None:
    reference = InMemoryDocumentStore()
    reference.write_documents(ODD)
    store = make()
    store.write_documents(ODD)
    assert _outcome(store, filters) == _outcome(reference, filters)


def test_translation_runs_in_the_backend_where_it_is_exact() -> None:
    plan = translate({"field": "meta.lang", "operator": "==", "value": "en"})
    assert plan.exact and plan.pushdown is not None
    assert Condition("lang", "$eq", "en") in plan.pushdown.items  # type: ignore[union-attr]
    dated = translate({"field": "meta.when", "operator": ">", "value": "2020-01-01"})
    assert not dated.exact and dated.may_raise and dated.pushdown is None
    # an AND pushes down the exact conditions before the first that may raise
    mixed = translate(
        {
            "operator": "AND",
            "conditions": [
                {"field": "meta.lang", "operator": "==", "value": "en"},
                {"field": "meta.when", "operator": ">", "value": "2020-01-01"},
                {"field": "meta.kind", "operator": "==", "value": "a"},
            ],
        }
    )
    assert not mixed.exact and mixed.pushdown is not None
    assert "kind" not in str(mixed.pushdown) and "lang" in str(mixed.pushdown)


@pytest.mark.parametrize(
    "bad",
    [
        {"conditions": []},
        {"operator": "AND"},
        {"operator": "XOR", "conditions": []},
        {"field": "meta.a", "operator": "~", "value": 1},
        {"field": "meta.a", "value": 1},
        {"field": "meta.a", "operator": "=="},
        {"field": "meta.a", "operator": "in", "value": "ab"},
        {"field": "meta.a", "operator": ">", "value": [1]},
        {"operator": "AND", "conditions": {"field": "meta.a"}},
    ],
)
def test_malformed_filters_raise_filter_error_even_on_an_empty_store(bad: dict[str, Any]) -> None:
    with pytest.raises(FilterError):
        sqlite_store().filter_documents(bad)


def test_every_field_of_a_document_comes_back_exactly() -> None:
    docs = [
        Document(
            id="full",
            content="with everything",
            meta={"list": [1, "a", None], "dict": {"x": {"y": [True]}}, "big": -(2**70)},
            embedding=[0.1, 1e-300, -2.5],
            sparse_embedding=SparseEmbedding(indices=[3, 9], values=[0.5, 0.25]),
            blob=ByteStream(b"\x00\xffbytes", meta={"m": 1}, mime_type="application/x"),
        ),
        Document(id="none", content=None, meta={"nan": math.inf}),
        Document(id="empty", content=""),
        Document(id="blank", content="  \n"),
    ]
    store = sqlite_store()
    assert store.write_documents(docs) == 4
    assert store.filter_documents() == docs
    assert store.count_documents() == 4


def test_reserved_and_non_json_meta_are_refused_not_clobbered() -> None:
    store = sqlite_store()
    for meta in ({"indexplug": 1}, {"indexplug.encoded": ["a"]}, {"s": {1, 2}}, {"t": [(1, {2})]}):
        with pytest.raises(MetadataRefused) as err:
            store.write_documents([Document(id="x", content="text", meta=meta)])
        assert isinstance(err.value, ValueError)
        assert next(iter(meta)) in str(err.value)
    with pytest.raises(MetadataRefused):
        store.write_documents([Document(id="k" * 600, content="too long an id")])
    assert store.count_documents() == 0


def test_policies_inside_one_write_and_against_the_store() -> None:
    store = sqlite_store()
    one, two = Document(id="1", content="first"), Document(id="1", content="second")
    with pytest.raises(DuplicateDocumentError):
        store.write_documents([one, two])
    assert store.count_documents() == 0
    assert store.write_documents([one, two], policy=DuplicatePolicy.SKIP) == 1
    assert store.filter_documents() == [one]
    assert store.write_documents([one, two], policy=DuplicatePolicy.OVERWRITE) == 1
    assert store.filter_documents() == [two]
    other = Document(id="2", content="other")
    assert store.write_documents([two, other], policy=DuplicatePolicy.SKIP) == 1
    # an overwrite with the same text but other meta replaces the meta too
    tagged = Document(id="2", content="other", meta={"v": 2}, embedding=[1.0])
    assert store.write_documents([tagged], policy=DuplicatePolicy.OVERWRITE) == 1
    assert store.filter_documents() == [two, tagged]
    assert store.count_documents() == 2
    store.delete_documents(["2", "nope", ""])
    assert store.filter_documents() == [two]


def test_documents_come_back_in_the_order_written() -> None:
    store = sqlite_store()
    docs = [Document(id=f"{9 - i}", content=f"doc {i}") for i in range(10)]
    store.write_documents(docs[:5])
    store.write_documents(docs[5:])
    assert [d.id for d in store.filter_documents()] == [d.id for d in docs]


def test_to_dict_and_from_dict(tmp_path: Path) -> None:
    store = IndexplugDocumentStore("hs", backend="sqlite-fts5", deadline_s=5.0)
    store.write_documents([Document(id="1", content="kept")])
    again = IndexplugDocumentStore.from_dict(store.to_dict())
    assert again.to_dict() == store.to_dict()
    assert [d.id for d in again.filter_documents()] == ["1"]
    guarded = IndexplugDocumentStore("hs", guard=indexplug.open_backend("sqlite-fts5"))
    assert guarded.count_documents() == 1
    with pytest.raises(SerializationError):
        guarded.to_dict()


def test_an_index_named_in_indexplug_toml(tmp_path: Path) -> None:
    toml = tmp_path / "indexplug.toml"
    toml.write_text('[indexes.notes]\nbackend = "sqlite-fts5"\n', "utf-8")
    store = IndexplugDocumentStore(config_index="notes", config_path=str(toml))
    store.write_documents([Document(id="n", content="a note")])
    again = IndexplugDocumentStore.from_dict(store.to_dict())
    assert again.index == "notes" and again.count_documents() == 1


def test_async_forms_answer_as_the_sync_ones() -> None:
    store = sqlite_store()
    docs = [Document(id=str(i), content=f"doc {i}", meta={"i": i}) for i in range(3)]

    async def go() -> tuple[int, list[Document], int]:
        written = await store.write_documents_async(docs)
        with pytest.raises(DuplicateDocumentError):
            await store.write_documents_async(docs[:1])
        got = await store.filter_documents_async({"field": "meta.i", "operator": ">=", "value": 1})
        await store.delete_documents_async(["0"])
        return written, got, await store.count_documents_async()

    written, got, left = asyncio.run(go())
    assert (written, got, left) == (3, docs[1:], 2)


def test_a_corrupted_index_raises_the_typed_error(_home: Path) -> None:
    store = sqlite_store("broken")
    store.write_documents([Document(id="1", content="soon unreadable")])
    path = Path(store.guard.status("broken").details["path"])  # type: ignore[union-attr]
    store.guard.close()
    for extra in ("-wal", "-shm"):
        Path(f"{path}{extra}").unlink(missing_ok=True)
    path.write_bytes(b"this is not a database " * 512)
    fresh = sqlite_store("broken")
    with pytest.raises(indexplug.IndexFailedError) as err:
        fresh.filter_documents()
    assert err.value.outcome.code == "INDEX_FAILED"  # type: ignore[attr-defined]
    with pytest.raises(indexplug.OutcomeError):
        fresh.count_documents()


class _WithoutKeys:
    """A backend that does not claim caller keys (as Elasticsearch does not)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.capabilities = inner.capabilities.model_copy(update={"keys": False})

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_a_backend_without_keys_is_refused_naming_the_capability() -> None:
    inner = indexplug.open_backend("sqlite-fts5").backend
    store = IndexplugDocumentStore("hs", guard=indexplug.Guard(_WithoutKeys(inner)))
    with pytest.raises(indexplug.InvalidRequest, match="'keys' capability"):
        store.write_documents([Document(id="1", content="text")])
    with pytest.raises(indexplug.InvalidRequest, match="'keys' capability"):
        store.delete_documents(["1"])
    assert store.count_documents() == 0
