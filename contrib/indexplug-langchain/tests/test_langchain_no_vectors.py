"""What needs vectors (maximal marginal relevance, search by a given vector) is refused on a
backend that does not claim indexplug's ``vectors`` capability (sqlite-fts5) with a typed
error naming the capability, never LangChain's bare ``NotImplementedError``."""

from __future__ import annotations

from collections.abc import Iterator

import indexplug
import pytest
from indexplug_langchain import IndexplugVectorStore, NoVectors
from langchain_core.documents import Document

DOCS = [
    Document(id="crema", page_content="A good espresso has a thick golden crema."),
    Document(id="stew", page_content="Simmer the stew with onions and thyme for two hours."),
]


@pytest.fixture
def guard() -> Iterator[indexplug.Guard]:
    g = indexplug.open_backend("sqlite-fts5", {})
    try:
        yield g
    finally:
        g.close()


def test_mmr_and_search_by_vector_are_refused_with_a_message(guard: indexplug.Guard) -> None:
    vs = IndexplugVectorStore(guard, "coffee")
    vs.add_documents(DOCS)
    calls = [
        lambda: vs.as_retriever(search_type="mmr").invoke("espresso"),
        lambda: vs.max_marginal_relevance_search("espresso"),
        lambda: vs.max_marginal_relevance_search_by_vector([0.1, 0.2]),
        lambda: vs.similarity_search_by_vector([0.1, 0.2]),
    ]
    for call in calls:
        with pytest.raises(NotImplementedError, match="'vectors' capability") as err:
            call()
        assert isinstance(err.value, NoVectors) and isinstance(err.value, indexplug.InvalidRequest)
        assert err.value.capability == "vectors" and "sqlite-fts5" in str(err.value)


@pytest.mark.asyncio
async def test_mmr_and_search_by_vector_are_refused_async(guard: indexplug.Guard) -> None:
    vs = IndexplugVectorStore(guard, "coffee")
    with pytest.raises(NoVectors, match="marginal relevance"):
        await vs.as_retriever(search_type="mmr").ainvoke("espresso")
    with pytest.raises(NoVectors, match="marginal relevance"):
        await vs.amax_marginal_relevance_search_by_vector([0.1])
    with pytest.raises(NoVectors, match="by vector"):
        await vs.asimilarity_search_by_vector([0.1])
