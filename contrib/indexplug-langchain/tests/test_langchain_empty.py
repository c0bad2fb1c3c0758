"""One answer for an empty index, ``k=0`` and a query with no word in it, from the store,
``store.as_retriever()`` and ``IndexplugRetriever``, sync and async: ``[]``, as LangChain's
``InMemoryVectorStore`` answers; and a search never padded with documents that do not match."""

from __future__ import annotations

from collections.abc import Iterator

import indexplug
import pytest
from indexplug_langchain import IndexplugRetriever, IndexplugVectorStore
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.vectorstores import InMemoryVectorStore

BACKENDS = {
    "sqlite-fts5": {},
    "chroma": {"embedder": "hashing:default"},
}

DOCS = [
    Document(id="crema", page_content="A good espresso has a thick golden crema."),
    Document(id="grind", page_content="Grind the espresso beans finely."),
    Document(id="stew", page_content="Simmer the stew with onions and thyme for two hours."),
    Document(id="orbit", page_content="The station orbits the planet every ninety minutes."),
]


@pytest.fixture(params=sorted(BACKENDS))
def guard(request: pytest.FixtureRequest) -> Iterator[indexplug.Guard]:
    g = indexplug.open_backend(request.param, BACKENDS[request.param])
    try:
        yield g
    finally:
        g.close()


def _answers(
    vs: IndexplugVectorStore, guard: indexplug.Guard, query: str, k: int
) -> list[list[str]]:
    """The ids each of the three ways a user searches answers."""
    return [
        [d.id or "" for d in vs.similarity_search(query, k=k)],
        [d.id or "" for d in vs.as_retriever(search_kwargs={"k": k}).invoke(query)],
        [d.id or "" for d in IndexplugRetriever(guard=guard, index=vs.index, k=k).invoke(query)],
    ]


async def _aanswers(
    vs: IndexplugVectorStore, guard: indexplug.Guard, query: str, k: int
) -> list[list[str]]:
    retriever = IndexplugRetriever(guard=guard, index=vs.index, k=k)
    return [
        [d.id or "" for d in await vs.asimilarity_search(query, k=k)],
        [d.id or "" for d in await vs.as_retriever(search_kwargs={"k": k}).ainvoke(query)],
        [d.id or "" for d in await retriever.ainvoke(query)],
    ]


def test_an_empty_index_is_an_empty_list_everywhere(guard: indexplug.Guard) -> None:
    builtin = InMemoryVectorStore(DeterministicFakeEmbedding(size=8))
    assert builtin.similarity_search("espresso", k=4) == []
    assert builtin.as_retriever().invoke("espresso") == []
    vs = IndexplugVectorStore(guard, "never-filled")
    assert _answers(vs, guard, "espresso", 4) == [[], [], []]


@pytest.mark.asyncio
async def test_an_empty_index_is_an_empty_list_everywhere_async(guard: indexplug.Guard) -> None:
    vs = IndexplugVectorStore(guard, "never-filled")
    assert await _aanswers(vs, guard, "espresso", 4) == [[], [], []]


@pytest.mark.parametrize("query,k", [("espresso", 0), ("", 4), ("   ", 4), ("?!", 4)])
def test_k_0_and_a_query_without_words_are_empty_lists(
    guard: indexplug.Guard, query: str, k: int
) -> None:
    if k == 0:  # what LangChain's in-memory store answers
        builtin = InMemoryVectorStore(DeterministicFakeEmbedding(size=8))
        builtin.add_documents(DOCS)
        assert builtin.similarity_search(query, k=0) == []
    vs = IndexplugVectorStore(guard, "coffee")
    vs.add_documents(DOCS)
    assert _answers(vs, guard, query, k) == [[], [], []]


@pytest.mark.asyncio
async def test_k_0_and_an_empty_query_async(guard: indexplug.Guard) -> None:
    vs = IndexplugVectorStore(guard, "coffee")
    await vs.aadd_documents(DOCS)
    assert await _aanswers(vs, guard, "espresso", 0) == [[], [], []]
    assert await _aanswers(vs, guard, " ", 4) == [[], [], []]


def test_a_negative_k_and_a_non_text_query_are_still_refused(guard: indexplug.Guard) -> None:
    vs = IndexplugVectorStore(guard, "coffee")
    vs.add_documents(DOCS)
    with pytest.raises(indexplug.InvalidRequest):
        vs.similarity_search("espresso", k=-1)
    with pytest.raises(indexplug.InvalidRequest):
        IndexplugRetriever(guard=guard, index="coffee", k=-1).invoke("espresso")


def test_a_lexical_search_is_not_padded_with_documents_that_do_not_match() -> None:
    guard = indexplug.open_backend("sqlite-fts5")
    vs = IndexplugVectorStore(guard, "coffee")
    vs.add_documents(DOCS)
    for answer in _answers(vs, guard, "espresso crema", 4):
        assert sorted(answer) == ["crema", "grind"]
    assert _answers(vs, guard, "espresso crema", 4)[0][0] == "crema"
    assert vs.similarity_search("quantum", k=4) == []
