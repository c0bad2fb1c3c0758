"""A hybrid search from LangChain: ``IndexplugVectorStore.fused`` over sqlite-fts5 (BM25) and
a vector store (chroma, usearch) embedding with a model the test writes, ranked by reciprocal
rank fusion of the two rankings."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import indexplug
import pytest
from indexplug_langchain import IndexplugVectorStore
from langchain_core.embeddings import Embeddings

VECTORS = {
    "espresso with crema": [1.0, 0.0, 0.05],
    "espresso with a thick crema": [1.0, 0.0, 0.06],
    "a cup of filter coffee": [0.7, 0.7, 0.0],
    "stew with thyme": [0.0, 0.0, 1.0],
    "coffee": [1.0, 0.1, 0.0],
}
"""By vector, "coffee" ranks the espressos, the filter coffee, then the stew; by BM25 only the
filter coffee has the word.  Fused: the filter coffee (1/61 + 1/63), then the espressos."""
TEXTS = list(VECTORS)[:4]


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INDEXPLUG_HOME", str(tmp_path))
    monkeypatch.delenv("INDEXPLUG_EMBED_CACHE", raising=False)


class HandPicked(Embeddings):
    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [VECTORS[t] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return VECTORS.get(text, [0.0, 0.0, 1.0])


def _filled(backend: str, **kw: object) -> IndexplugVectorStore:
    """A store holding ``TEXTS`` as the same passages in every store (a fusion matches them by
    their content address); usearch keeps no caller keys, so no ids."""
    vs = IndexplugVectorStore.from_backend(backend, "drinks", {}, **kw)
    ps = [indexplug.Passage.create(t, f"test:{i}") for i, t in enumerate(TEXTS)]
    assert isinstance(vs.guard.add(vs.index, ps), indexplug.Indexed)
    return vs


@pytest.fixture(params=["chroma", "usearch"])
def hybrid(request: pytest.FixtureRequest) -> Iterator[IndexplugVectorStore]:
    lexical = _filled("sqlite-fts5")
    vector = _filled(request.param, embedding=HandPicked())
    yield IndexplugVectorStore.fused(lexical, vector)
    lexical.guard.close()
    vector.guard.close()


def test_a_fused_store_ranks_by_both(hybrid: IndexplugVectorStore) -> None:
    found = hybrid.similarity_search_with_score("coffee", k=3)
    assert [d.page_content for d, _ in found] == [
        "a cup of filter coffee",
        "espresso with crema",
        "espresso with a thick crema",
    ]
    assert [s for _, s in found] == pytest.approx([1 / 61 + 1 / 63, 1 / 61, 1 / 62])
    retriever = hybrid.as_retriever(search_kwargs={"k": 1})
    assert [d.page_content for d in retriever.invoke("coffee")] == ["a cup of filter coffee"]


def test_fused_needs_two_stores() -> None:
    lexical = _filled("sqlite-fts5")
    with pytest.raises(indexplug.InvalidRequest, match="two or more"):
        IndexplugVectorStore.fused(lexical)
    lexical.guard.close()
