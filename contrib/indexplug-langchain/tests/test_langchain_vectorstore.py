"""IndexplugVectorStore beyond the standard suite: ids, upsert, filters, fill, outcomes,
refusals and failures, on sqlite-fts5 and embedded chroma (``hashing:default``)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import indexplug
import pytest
from indexplug.embedders.hashing import HashingEmbedder
from indexplug.outcomes import Scanned
from indexplug.protocols import Granularity
from indexplug_langchain import (
    IndexplugVectorStore,
    ReservedMetadataKey,
    UnstorableMetadata,
)
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings


class _Hashing(Embeddings):
    """A user's model for chroma: core's model-free hashing embedder behind LangChain's
    interface (so these tests rank as chroma's own ``hashing:default`` would)."""

    def __init__(self) -> None:
        self._model = HashingEmbedder()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [v.tolist() for v in self._model.embed_documents(texts, Granularity.TEXT)]

    def embed_query(self, text: str) -> list[float]:
        return [float(x) for x in self._model.embed_query(text, Granularity.TEXT)]


BACKENDS = {
    "sqlite-fts5": {},
    "chroma": {"embedder": "hashing:default"},
}


class _NeverCalled(Embeddings):
    """An embedding a lexical backend (sqlite-fts5) is given and must never call."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        raise AssertionError("the store must not embed")

    def embed_query(self, text: str) -> list[float]:
        raise AssertionError("the store must not embed")


EMBEDDINGS: dict[str, type[Embeddings]] = {"sqlite-fts5": _NeverCalled, "chroma": _Hashing}
"""The ``embedding`` each backend's store gets: a lexical backend must never call it."""


@pytest.fixture(params=sorted(BACKENDS))
def store(request: pytest.FixtureRequest) -> IndexplugVectorStore:
    return IndexplugVectorStore.from_backend(
        request.param, "lc", BACKENDS[request.param], embedding=EMBEDDINGS[request.param]()
    )


@pytest.fixture
def sqlite_store() -> IndexplugVectorStore:
    return IndexplugVectorStore(indexplug.open_backend("sqlite-fts5"), "lc")


ARTICLES = [
    Document(id="a", page_content="Otters hold hands while sleeping.", metadata={"year": 2019}),
    Document(id="b", page_content="Otters crack shellfish open.", metadata={"year": 2021}),
    Document(id="c", page_content="Volcanoes erupt molten lava.", metadata={"year": 2023}),
]


def test_ids_are_caller_keys_given_kept_or_generated(store: IndexplugVectorStore) -> None:
    assert store.add_texts(["alpha text", "beta text"], ids=["x", "y"]) == ["x", "y"]
    ids = store.add_documents([Document(id="mine", page_content="gamma"), Document("delta")])
    assert ids[0] == "mine" and uuid.UUID(ids[1]).version == 4
    # ids= wins over each document's own id
    assert store.add_documents([Document(id="ignored", page_content="eps")], ids=["z"]) == ["z"]
    got = {d.id: d.page_content for d in store.get_by_ids(["x", "y", "mine", ids[1], "z"])}
    assert got == {
        "x": "alpha text",
        "y": "beta text",
        "mine": "gamma",
        ids[1]: "delta",
        "z": "eps",
    }
    assert store.get_by_ids(["ignored", "nope"]) == []
    assert store.embeddings is not None  # sqlite-fts5 never calls it (_NeverCalled would raise)


def test_adding_again_under_an_id_replaces_the_document(store: IndexplugVectorStore) -> None:
    store.add_documents(ARTICLES)
    store.add_documents(
        [Document(page_content="Otters juggle pebbles.", metadata={"v": 2})], ids=["a"]
    )
    assert store.get_by_ids(["a"]) == [
        Document(id="a", page_content="Otters juggle pebbles.", metadata={"v": 2})
    ]
    outcome = store.guard.scan("lc")
    assert isinstance(outcome, Scanned) and len(outcome.passages) == 3
    # the later of two documents with one id wins
    store.add_texts(["first", "second"], ids=["dup", "dup"])
    assert [d.page_content for d in store.get_by_ids(["dup"])] == ["second"]


def test_metadata_comes_back_exactly(store: IndexplugVectorStore) -> None:
    meta = {"i": 1, "f": 1.0, "b": True, "n": None, "s": "", "l": ["x", 2, 2.5, False]}
    store.add_texts(["typed metadata"], [meta], ids=["m"])
    [doc] = store.get_by_ids(["m"])
    assert doc.metadata == meta
    assert [type(doc.metadata[k]) for k in ("i", "f", "b")] == [int, float, bool]
    assert type(doc.metadata["l"]) is list


def test_filters_narrow_the_search_and_the_fill(store: IndexplugVectorStore) -> None:
    store.add_documents(ARTICLES)
    found = {d.id for d in store.similarity_search("otters", k=3, filter={"year": {"$gte": 2021}})}
    assert "b" in found and found <= {"b", "c"}  # "c" matches only on a dense backend
    filled = IndexplugVectorStore(store.guard, "lc", fill_to_k=True)
    found = {d.id for d in filled.similarity_search("otters", k=3, filter={"year": {"$gte": 2021}})}
    assert found == {"b", "c"}
    assert [d.id for d in store.similarity_search("otters", k=3, filters={"year": 2019})] == ["a"]
    with pytest.raises(indexplug.InvalidRequest, match="not both"):
        store.similarity_search("otters", filter={}, filters={})
    with pytest.raises(indexplug.InvalidRequest, match="no exact translation"):
        store.similarity_search("otters", filter=lambda doc: True)


def test_a_lexical_search_answers_its_matches_and_fills_to_k_only_when_asked(
    sqlite_store: IndexplugVectorStore,
) -> None:
    sqlite_store.add_documents(ARTICLES)
    assert [d.id for d in sqlite_store.similarity_search("lava", k=3)] == ["c"]
    assert sqlite_store.similarity_search("quantum", k=3) == []
    outcome = sqlite_store.search_outcome("lava", k=3)
    assert isinstance(outcome, indexplug.Searched) and len(outcome.hits) == 1
    filled = IndexplugVectorStore(sqlite_store.guard, "lc", fill_to_k=True)
    scored = filled.similarity_search_with_score("lava", k=3)
    assert scored[0][0].id == "c" and scored[0][1] > 0
    assert {d.id for d, _ in scored[1:]} == {"a", "b"}
    assert [s for _, s in scored[1:]] == [0.0, 0.0]
    assert len(filled.similarity_search("quantum", k=2)) == 2


def test_an_empty_store_answers_empty_lists(store: IndexplugVectorStore) -> None:
    assert store.similarity_search("otters") == []
    assert store.similarity_search_with_score("otters") == []
    assert store.get_by_ids(["a"]) == []
    assert store.delete(["a"]) is True
    assert isinstance(store.search_outcome("otters"), indexplug.IndexEmpty)


def test_delete_by_ids_and_by_filter(store: IndexplugVectorStore) -> None:
    store.add_documents(ARTICLES)
    assert store.delete(["a", "missing"]) is True
    assert {d.id for d in store.get_by_ids(["a", "b", "c"])} == {"b", "c"}
    assert store.delete(filter={"year": {"$gt": 2022}}) is True
    assert [d.id for d in store.get_by_ids(["a", "b", "c"])] == ["b"]
    with pytest.raises(indexplug.InvalidRequest, match="needs ids or filter"):
        store.delete()


def test_metadata_that_would_not_come_back_is_refused(store: IndexplugVectorStore) -> None:
    with pytest.raises(UnstorableMetadata, match=r"'tags'.*a set") as err:
        store.add_texts(["x"], [{"tags": {"a", "b"}}])
    assert err.value.field == "metadata.tags"
    with pytest.raises(UnstorableMetadata, match=r"'deep'.b.*bytes"):
        store.add_texts(["x"], [{"deep": {"b": b"raw"}}])
    with pytest.raises(UnstorableMetadata, match="'nan'"):
        store.add_texts(["x"], [{"nan": float("nan")}])
    with pytest.raises(ReservedMetadataKey):
        store.add_texts(["x"], [{"indexplug": 1}])
    with pytest.raises(ReservedMetadataKey):
        store.add_texts(["x"], [{"indexplug.meta": "{}"}])
    with pytest.raises(indexplug.InvalidRequest, match="page_content"):
        store.add_texts(["  "])
    with pytest.raises(indexplug.InvalidRequest, match="2 ids for 1 documents"):
        store.add_texts(["x"], ids=["a", "b"])
    with pytest.raises(indexplug.InvalidRequest, match="no argument"):
        store.add_texts(["x"], batchsize=3)
    assert store.similarity_search("x") == []  # nothing was written by any of them


def test_as_retriever_and_relevance_scores(store: IndexplugVectorStore) -> None:
    store.add_documents(ARTICLES)
    retriever = store.as_retriever(search_kwargs={"k": 1})
    [doc] = retriever.invoke("molten lava volcanoes")
    assert doc == ARTICLES[2]
    assert len(retriever.invoke("otters", k=2)) == 2
    if store.guard.score_scale.name == "cosine":
        [(top, relevance)] = store.similarity_search_with_relevance_scores("molten lava", k=1)
        assert top.id == "c" and 0 < relevance <= 1
    else:
        with pytest.raises(NotImplementedError, match="fts5_bm25"):
            store.similarity_search_with_relevance_scores("lava", k=1)


def test_from_texts_and_from_config(tmp_path: Path) -> None:
    made = IndexplugVectorStore.from_texts(
        ["Otters hold hands."], _NeverCalled(), ids=["o"], index="made", backend="sqlite-fts5"
    )
    assert made.get_by_ids(["o"])[0].page_content == "Otters hold hands."
    config = tmp_path / "indexplug.toml"
    config.write_text('[indexes.made]\nbackend = "sqlite-fts5"\nmax_bytes = 4096\n', "utf-8")
    configured = IndexplugVectorStore.from_config("made", config)
    assert configured.max_bytes == 4096
    assert [d.id for d in configured.similarity_search("otters", k=1)] == ["o"]
    with pytest.raises(indexplug.InvalidRequest, match="index="):
        IndexplugVectorStore.from_texts(["x"], _NeverCalled(), backend="sqlite-fts5")


def test_a_write_over_budget_raises_the_typed_error() -> None:
    store = IndexplugVectorStore(indexplug.open_backend("sqlite-fts5"), "tiny", max_bytes=1)
    with pytest.raises(indexplug.OverBudgetError) as err:
        store.add_texts(["Otters hold hands while they sleep."])
    assert err.value.code == "OVER_BUDGET"


class _NoKeys:
    """A backend that stores passages but not caller keys (as the contrib usearch backend)."""

    name = "nokeys"
    description = "no caller keys"
    score_scale = indexplug.ScoreScale(name="x")
    capabilities = indexplug.Capabilities()

    def readiness(self) -> indexplug.Readiness:
        return indexplug.Readiness.yes()


def test_a_backend_without_keys_is_refused_naming_the_capability() -> None:
    store = IndexplugVectorStore(indexplug.Guard(_NoKeys()), "lc")  # type: ignore[arg-type]
    with pytest.raises(indexplug.InvalidRequest, match="does not support caller keys"):
        store.add_texts(["Otters."], ids=["o"])


def _corrupt(home: Path) -> None:
    folder = home / "sqlite-fts5"
    for extra in folder.glob("lc.sqlite-*"):
        extra.unlink()
    (folder / "lc.sqlite").write_bytes(b"not a database, " * 512)


@pytest.mark.asyncio
async def test_a_corrupted_index_raises_index_failed_everywhere(
    sqlite_store: IndexplugVectorStore, _home: Path
) -> None:
    sqlite_store.add_documents(ARTICLES)
    sqlite_store.guard.close()
    _corrupt(_home)
    store = IndexplugVectorStore(indexplug.open_backend("sqlite-fts5"), "lc")
    calls: list[Callable[[], object]] = [
        lambda: store.similarity_search("otters"),
        lambda: store.get_by_ids(["a"]),
        lambda: store.delete(["a"]),
        lambda: store.add_texts(["more"]),
    ]
    for call in calls:
        with pytest.raises(indexplug.IndexFailedError, match="not an SQLite index"):
            call()
    with pytest.raises(indexplug.IndexFailedError) as err:
        await store.asimilarity_search("otters")
    assert err.value.outcome is not None and err.value.code == "INDEX_FAILED"
    for acall in (store.aget_by_ids(["a"]), store.adelete(["a"]), store.aadd_texts(["more"])):
        with pytest.raises(indexplug.IndexFailedError):
            await acall
    assert isinstance(store.search_outcome("otters"), indexplug.IndexFailed)


def test_a_closed_port_raises_index_unavailable() -> None:
    store = IndexplugVectorStore.from_backend(
        "chroma",
        "lc",
        {"mode": "server", "host": "127.0.0.1", "port": 1, "embedder": "hashing:default"},
        deadline_s=10,
    )
    calls: list[Callable[[], object]] = [
        lambda: store.similarity_search("otters"),
        lambda: store.add_texts(["Otters."]),
        lambda: store.get_by_ids(["a"]),
    ]
    for call in calls:
        with pytest.raises(indexplug.IndexUnavailableError, match="did not answer"):
            call()


@pytest.mark.asyncio
async def test_async_forms_match_the_sync_ones(store: IndexplugVectorStore) -> None:
    assert await store.asimilarity_search("otters") == []
    assert await store.aadd_documents(ARTICLES) == ["a", "b", "c"]
    assert await store.aadd_texts(["Otters nap."], [{"year": 2024}], ids=["d"]) == ["d"]
    assert await store.asimilarity_search("volcanoes lava", k=1) == [ARTICLES[2]]
    recent = await store.asimilarity_search("otters", k=4, filter={"year": {"$gte": 2021}})
    assert recent == store.similarity_search("otters", k=4, filter={"year": {"$gte": 2021}})
    assert {"b", "d"} <= {d.id for d in recent} <= {"b", "c", "d"}  # "c" only on a dense one
    assert await store.adelete(["a"]) is True
    assert {d.id for d in await store.aget_by_ids(["a", "b"])} == {"b"}
    outcome = await store.asearch_outcome("otters", k=1)
    assert isinstance(outcome, indexplug.Searched)
    scored = await store.asimilarity_search_with_score("otters", k=2)
    assert len(scored) == 2 and scored[0][1] >= scored[1][1]
    again = await IndexplugVectorStore.afrom_texts(
        ["Otters again."],
        store.embeddings or _NeverCalled(),
        ids=["e"],
        guard=store.guard,
        index="lc",
    )
    assert [d.id for d in await again.aget_by_ids(["e"])] == ["e"]


class _SlowWrites:
    """sqlite-fts5 whose writes and searches take ``delay`` seconds each."""

    def __init__(self, inner: Any, delay: float) -> None:
        self._inner, self._delay = inner, delay

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def add(self, *args: Any, **kwargs: Any) -> Any:
        import time

        time.sleep(self._delay)
        return self._inner.add(*args, **kwargs)

    def search(self, *args: Any, **kwargs: Any) -> Any:
        import time

        time.sleep(self._delay)
        return self._inner.search(*args, **kwargs)


@pytest.mark.asyncio
async def test_async_does_not_block_the_event_loop(sqlite_store: IndexplugVectorStore) -> None:
    from test_langchain_retriever import _ticks_while

    slow = indexplug.Guard(_SlowWrites(sqlite_store.guard.backend, 0.5), plugin="sqlite-fts5")  # type: ignore[arg-type]
    store = IndexplugVectorStore(slow, "lc", deadline_s=30)
    ids, ticks = await _ticks_while(store.aadd_documents(ARTICLES))
    assert ids == ["a", "b", "c"] and ticks >= 10
    docs, ticks = await _ticks_while(store.asimilarity_search("lava", k=1))
    assert [d.id for d in docs] == ["c"] and ticks >= 10
