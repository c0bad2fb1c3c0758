"""``VectorStoreQueryMode.HYBRID``: answered by a fusion of sqlite-fts5 (BM25) and a vector
index (chroma, usearch) with a model the test writes, or by elastic in hybrid mode on a real
node, and ranked as reciprocal rank fusion of the two rankings; on a backend whose own search
is not hybrid (sqlite-fts5, chroma, usearch, a fusion of two lexical indexes), ``NoHybrid``
naming what would answer."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import indexplug
import pytest
from indexplug_llamaindex import IndexplugVectorStore, NoHybrid, UnsupportedQuery
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
"""By vector, "coffee" ranks the two espressos, then the filter coffee, then the stew; by
text, only "a cup of filter coffee" has the word.  Fused (1/(60 + rank) summed), the filter
coffee (1/61 + 1/63) comes first, then the espressos (1/61, 1/62)."""
DOCS = list(VECTORS)[:4]
HYBRID = VectorStoreQueryMode.HYBRID


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


def _filled(
    backend: str, index: str, *, options: dict[str, object] | None = None, **kw: object
) -> IndexplugVectorStore:
    """A store over ``index`` holding ``DOCS`` (the same passages in every store, so a fusion
    matches them by their content address)."""
    s = IndexplugVectorStore.from_backend(backend, index, options or {}, **kw)  # type: ignore[arg-type]
    ps = [indexplug.Passage.create(t, f"test:{i}") for i, t in enumerate(DOCS)]
    assert isinstance(s.client.add(s.index, ps), indexplug.Indexed)
    return s


@pytest.fixture(params=["chroma", "usearch"])
def hybrid(request: pytest.FixtureRequest) -> Iterator[IndexplugVectorStore]:
    """A fusion of sqlite-fts5 and a vector index."""
    lexical = _filled("sqlite-fts5", "words")
    vector = _filled(request.param, "vectors", embed_model=HandPicked())
    yield IndexplugVectorStore.fused(lexical, vector)
    lexical.client.close()
    vector.client.close()


def texts(result: object) -> list[str]:
    return [n.get_content() for n in result.nodes]  # type: ignore[attr-defined]


def test_hybrid_mode_fuses_the_text_and_the_vector_rankings(
    hybrid: IndexplugVectorStore,
) -> None:
    query = VectorStoreQuery(query_str="coffee", similarity_top_k=3, mode=HYBRID)
    out = hybrid.query(query)
    assert texts(out) == [
        "a cup of filter coffee",
        "espresso with crema",
        "espresso with a thick crema",
    ]
    assert out.similarities == pytest.approx([1 / 61 + 1 / 63, 1 / 61, 1 / 62])
    assert asyncio.run(hybrid.aquery(query)).ids == out.ids
    # hybrid_top_k, when given, is how many the answer holds
    two = VectorStoreQuery(query_str="coffee", similarity_top_k=3, hybrid_top_k=2, mode=HYBRID)
    assert texts(hybrid.query(two)) == texts(out)[:2]


def test_hybrid_mode_through_a_retriever(hybrid: IndexplugVectorStore) -> None:
    index = hybrid.as_index()
    retriever = index.as_retriever(vector_store_query_mode="hybrid", similarity_top_k=1)
    assert [n.node.get_content() for n in retriever.retrieve("coffee")] == [
        "a cup of filter coffee"
    ]


def test_hybrid_mode_needs_text(hybrid: IndexplugVectorStore) -> None:
    with pytest.raises(UnsupportedQuery, match="query_str"):
        hybrid.query(VectorStoreQuery(query_embedding=VECTORS["coffee"], mode=HYBRID))


@pytest.mark.parametrize("backend", ["sqlite-fts5", "chroma", "usearch"])
def test_a_search_that_is_not_hybrid_is_refused(backend: str) -> None:
    model = {} if backend == "sqlite-fts5" else {"embed_model": HandPicked()}
    s = _filled(backend, "notes", **model)
    query = VectorStoreQuery(query_str="coffee", mode=HYBRID)
    for ask in (lambda: s.query(query), lambda: asyncio.run(s.aquery(query))):
        with pytest.raises(NoHybrid, match="fusion") as raised:
            ask()
        assert isinstance(raised.value, indexplug.InvalidRequest)
        assert raised.value.capability == "hybrid"
    s.client.close()


def test_a_fusion_of_two_lexical_indexes_is_not_hybrid() -> None:
    a, b = _filled("sqlite-fts5", "a"), _filled("sqlite-fts5", "b")
    fused = IndexplugVectorStore.fused(a, b)
    assert texts(fused.query(VectorStoreQuery(query_str="coffee"))) == ["a cup of filter coffee"]
    with pytest.raises(NoHybrid):
        fused.query(VectorStoreQuery(query_str="coffee", mode=HYBRID))
    a.client.close()
    b.client.close()


def test_a_fusion_index_of_indexplug_toml_answers_hybrid_mode(tmp_path: Path) -> None:
    config = tmp_path / "indexplug.toml"
    config.write_text(
        '[indexes.words]\nbackend = "sqlite-fts5"\n'
        '[indexes.vectors]\nbackend = "chroma"\nembedder = "hashing:default"\n'
        '[indexes.both]\nkind = "fusion"\nmembers = ["words", "vectors"]\n',
        encoding="utf-8",
    )
    nodes = [TextNode(id_=f"n{i}", text=t) for i, t in enumerate(DOCS)]
    for member in ("words", "vectors"):
        s = IndexplugVectorStore.from_config(member, config)
        s.add(nodes)
        s.client.close()
    both = IndexplugVectorStore.from_config("both", config)
    query = VectorStoreQuery(query_str="filter coffee", similarity_top_k=3, mode=HYBRID)
    out = both.query(query)
    # BM25 alone finds one node; fused with the vector ranking, three, the one both found first
    assert out.ids is not None and len(out.ids) == 3 and out.ids[0] == "n2"
    assert out.similarities is not None and out.similarities[0] == pytest.approx(2 / 61)
    assert (
        both.query(VectorStoreQuery(query_str="filter coffee", similarity_top_k=3)).ids == out.ids
    )
    both.client.close()


def test_elastic_in_hybrid_mode_answers_hybrid_mode_with_its_own_search(
    request: pytest.FixtureRequest,
) -> None:
    """Elastic in ``mode = "hybrid"`` fuses its BM25 and kNN legs itself (a real node), with
    the same ranks as indexplug's fusion of two indexes."""
    options = {**request.getfixturevalue("es_options"), "embedder": "hashing:default"}
    store = _filled(
        "elastic", "coffee", embed_model=HandPicked(), options={**options, "mode": "hybrid"}
    )
    try:
        query = VectorStoreQuery(query_str="coffee", similarity_top_k=3, mode=HYBRID)
        out = store.query(query)
        assert texts(out) == [
            "a cup of filter coffee",
            "espresso with crema",
            "espresso with a thick crema",
        ]
        assert out.similarities == pytest.approx([1 / 61 + 1 / 63, 1 / 61, 1 / 62])
        assert asyncio.run(store.aquery(query)).ids == out.ids
    finally:
        store.client.close()
