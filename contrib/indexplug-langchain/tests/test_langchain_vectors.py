"""Search by vector and maximal marginal relevance, on the backends that claim indexplug's
``vectors`` capability (chroma embedded, usearch), with a deterministic model the test writes:
each text's vector is hand-picked, so which documents come back, and in which order, is known.
On a backend without the capability (sqlite-fts5) each raises ``NoVectors`` naming it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import indexplug
import pytest
from indexplug_langchain import IndexplugVectorStore
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

VECTORS = {
    "espresso with crema": [1.0, 0.0, 0.05],
    "espresso with a thick crema": [1.0, 0.0, 0.06],
    "a cup of filter coffee": [0.7, 0.7, 0.0],
    "stew with thyme": [0.0, 0.0, 1.0],
    "coffee": [1.0, 0.1, 0.0],
}
"""The two espressos are near duplicates, the nearest the query "coffee"; the filter coffee
is less near but unlike them (what maximal marginal relevance picks second)."""
DOCS = [Document(id=t.split()[0] + str(i), page_content=t) for i, t in enumerate(VECTORS)][:4]


class HandPicked(Embeddings):
    def __init__(self) -> None:
        self.queries: list[str] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [VECTORS[t] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        self.queries.append(text)
        return VECTORS.get(text, [0.0, 0.0, 1.0])


def add(vs: IndexplugVectorStore, docs: list[Document]) -> None:
    """Add ``docs``: by id where the backend keeps caller keys (chroma), else as passages
    without keys (usearch claims no keys), embedded by the store's model all the same."""
    if vs.guard.capabilities.keys:
        vs.add_documents(docs)
        return
    passages = [
        indexplug.Passage.create(d.page_content, f"test:{d.id}", metadata=d.metadata) for d in docs
    ]
    assert isinstance(vs.guard.add(vs.index, passages), indexplug.Indexed)


@pytest.fixture
def store(vector_backend: tuple[str, dict[str, Any]]) -> Iterator[IndexplugVectorStore]:
    model = HandPicked()
    name, options = vector_backend
    vs = IndexplugVectorStore.from_backend(name, "coffee", options, embedding=model)
    add(vs, DOCS)
    yield vs
    vs.guard.close()


def texts(docs: list[Document]) -> list[str]:
    return [d.page_content for d in docs]


def test_similarity_search_by_vector(store: IndexplugVectorStore) -> None:
    found = store.similarity_search_by_vector([0.0, 0.0, 1.0], k=1)
    assert texts(found) == ["stew with thyme"]
    scored = store.similarity_search_with_score_by_vector(VECTORS["espresso with crema"], k=2)
    assert [d.page_content for d, _ in scored] == [
        "espresso with crema",
        "espresso with a thick crema",
    ]
    assert scored[0][1] == pytest.approx(1.0, abs=1e-5)
    assert store.similarity_search_by_vector([1.0, 0.0, 0.0], k=0) == []


def test_mmr_prefers_a_diverse_second_document(store: IndexplugVectorStore) -> None:
    plain = texts(store.similarity_search_by_vector(VECTORS["coffee"], k=2))
    assert plain == ["espresso with crema", "espresso with a thick crema"]
    mmr = store.max_marginal_relevance_search("coffee", k=2, fetch_k=4, lambda_mult=0.5)
    # the near-duplicate espresso loses to the filter coffee, less similar to the first pick
    assert texts(mmr) == ["espresso with crema", "a cup of filter coffee"]
    assert (
        store.max_marginal_relevance_search_by_vector(
            VECTORS["coffee"], k=2, fetch_k=4, lambda_mult=0.5
        )
        == mmr
    )
    retriever = store.as_retriever(
        search_type="mmr", search_kwargs={"k": 2, "fetch_k": 4, "lambda_mult": 0.5}
    )
    assert texts(retriever.invoke("coffee")) == texts(mmr)


def test_mmr_with_a_filter_and_on_nothing(store: IndexplugVectorStore) -> None:
    add(store, [Document(id="tea", page_content="coffee", metadata={"kind": "x"})])
    only = store.max_marginal_relevance_search("coffee", k=3, filter={"kind": "x"})
    assert texts(only) == ["coffee"]
    assert store.max_marginal_relevance_search("coffee", k=0) == []
    assert store.max_marginal_relevance_search("?!", k=2) == []


@pytest.mark.asyncio
async def test_async_forms(store: IndexplugVectorStore) -> None:
    found = await store.asimilarity_search_by_vector([0.0, 0.0, 1.0], k=1)
    assert texts(found) == ["stew with thyme"]
    mmr = await store.amax_marginal_relevance_search("coffee", k=2, fetch_k=4, lambda_mult=0.5)
    assert texts(mmr) == ["espresso with crema", "a cup of filter coffee"]
    retriever = store.as_retriever(
        search_type="mmr", search_kwargs={"k": 2, "fetch_k": 4, "lambda_mult": 0.5}
    )
    assert texts(await retriever.ainvoke("coffee")) == texts(mmr)


def test_a_vector_of_another_length_is_refused(store: IndexplugVectorStore) -> None:
    with pytest.raises(indexplug.OutcomeError) as raised:
        store.similarity_search_by_vector([1.0, 0.0], k=1)
    assert raised.value.code == "BAD_REQUEST"
    with pytest.raises(indexplug.InvalidRequest):
        store.similarity_search_by_vector([float("nan")] * 3, k=1)


def test_mmr_without_a_model_uses_the_backends_embedder() -> None:
    vs = IndexplugVectorStore.from_backend("chroma", "plain", {"embedder": "hashing:default"})
    vs.add_texts(["otters hold hands", "otters sleep", "volcanoes erupt"], ids=["a", "b", "c"])
    out = vs.max_marginal_relevance_search("otters", k=2, fetch_k=3)
    assert len(out) == 2 and out[0].page_content.startswith("otters")
    vs.guard.close()


def test_empty_index_is_an_empty_list() -> None:
    vs = IndexplugVectorStore.from_backend("usearch", "nothing", {}, embedding=HandPicked())
    assert vs.similarity_search_by_vector([1.0, 0.0, 0.0]) == []
    assert vs.max_marginal_relevance_search("coffee") == []
    vs.guard.close()
