"""A query by ``query_embedding`` and in ``VectorStoreQueryMode.MMR``, on the backends that
claim indexplug's ``vectors`` capability (chroma embedded, usearch), with a deterministic model
the test writes; on one without the capability (sqlite-fts5), ``NoVectors`` naming it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import indexplug
import pytest
from indexplug_llamaindex import IndexplugVectorStore, NoVectors
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryMode

VECTORS = {
    "espresso with crema": [1.0, 0.0, 0.05],
    "espresso with a thick crema": [1.0, 0.0, 0.06],
    "a cup of filter coffee": [0.7, 0.7, 0.0],
    "stew with thyme": [0.0, 0.0, 1.0],
    "coffee": [1.0, 0.1, 0.0],
}
"""The two espressos are near duplicates, the nearest the query "coffee"; the filter coffee
is less near but unlike them (what maximal marginal relevance picks second)."""
DOCS = list(VECTORS)[:4]


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INDEXPLUG_HOME", str(tmp_path))
    monkeypatch.delenv("INDEXPLUG_EMBED_CACHE", raising=False)


class HandPicked(BaseEmbedding):
    def _get_text_embedding(self, text: str) -> list[float]:
        return VECTORS.get(text, [0.0, 0.0, 1.0])

    def _get_query_embedding(self, query: str) -> list[float]:
        return VECTORS.get(query, [0.0, 0.0, 1.0])

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)


@pytest.fixture
def store(vector_backend: tuple[str, dict[str, Any]]) -> Iterator[IndexplugVectorStore]:
    name, options = vector_backend
    s = IndexplugVectorStore.from_backend(name, "coffee", options, embed_model=HandPicked())
    if s.client.capabilities.keys:
        s.add([TextNode(id_=f"n{i}", text=t) for i, t in enumerate(DOCS)])
    else:  # usearch keeps no caller keys: the passages as they are, embedded by the model
        ps = [indexplug.Passage.create(t, f"test:{i}") for i, t in enumerate(DOCS)]
        assert isinstance(s.client.add(s.index, ps), indexplug.Indexed)
    yield s
    s.client.close()


def texts(result: object) -> list[str]:
    return [n.get_content() for n in result.nodes]  # type: ignore[attr-defined]


def test_query_by_embedding(store: IndexplugVectorStore) -> None:
    out = store.query(VectorStoreQuery(query_embedding=[0.0, 0.0, 1.0], similarity_top_k=1))
    assert texts(out) == ["stew with thyme"]
    assert out.similarities is not None and out.similarities[0] == pytest.approx(1.0, abs=1e-5)
    top2 = store.query(VectorStoreQuery(query_embedding=VECTORS["coffee"], similarity_top_k=2))
    assert texts(top2) == ["espresso with crema", "espresso with a thick crema"]


def test_mmr_mode(store: IndexplugVectorStore) -> None:
    for query in (
        VectorStoreQuery(query_str="coffee", similarity_top_k=2, mode=VectorStoreQueryMode.MMR),
        VectorStoreQuery(
            query_embedding=VECTORS["coffee"], similarity_top_k=2, mode=VectorStoreQueryMode.MMR
        ),
    ):
        out = store.query(query, mmr_prefetch_factor=2)
        assert texts(out) == ["espresso with crema", "a cup of filter coffee"]
        assert asyncio.run(store.aquery(query, mmr_prefetch_factor=2)).ids == out.ids


def test_mmr_through_a_retriever(store: IndexplugVectorStore) -> None:
    index = store.as_index(embed_model=HandPicked())
    retriever = index.as_retriever(
        vector_store_query_mode="mmr",
        similarity_top_k=2,
        vector_store_kwargs={"mmr_threshold": 0.5, "mmr_prefetch_factor": 2},
    )
    found = [n.node.get_content() for n in retriever.retrieve("coffee")]
    assert found == ["espresso with crema", "a cup of filter coffee"]


def test_another_length_is_refused_and_nothing_is_empty(store: IndexplugVectorStore) -> None:
    with pytest.raises(indexplug.OutcomeError) as raised:
        store.query(VectorStoreQuery(query_embedding=[1.0, 0.0], similarity_top_k=1))
    assert raised.value.code == "BAD_REQUEST"
    empty = store.query(VectorStoreQuery(query_embedding=[1.0, 0.0, 0.0], similarity_top_k=0))
    assert empty.nodes == []


def test_a_lexical_backend_says_it_has_no_vectors() -> None:
    s = IndexplugVectorStore.from_backend("sqlite-fts5", "notes", {})
    with pytest.raises(NoVectors, match="'vectors' capability") as raised:
        s.query(VectorStoreQuery(query_embedding=[1.0, 0.0], similarity_top_k=1))
    assert raised.value.capability == "vectors"
    with pytest.raises(NoVectors):
        s.query(VectorStoreQuery(query_str="x", mode=VectorStoreQueryMode.MMR))
    s.client.close()
