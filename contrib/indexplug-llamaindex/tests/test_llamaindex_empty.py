"""One answer for an empty index, ``similarity_top_k=0`` and a query with no word in it, from
``VectorStoreIndex(...).as_retriever()`` over the store and from ``IndexplugRetriever``, sync
and async: ``[]``, as over LlamaIndex's own ``SimpleVectorStore``."""

from __future__ import annotations

import indexplug
import pytest
from indexplug_llamaindex import IndexplugRetriever, IndexplugVectorStore
from llama_index.core import Document, VectorStoreIndex
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.vector_stores.types import VectorStoreQuery

EMBED = MockEmbedding(embed_dim=8)
DOCS = [
    Document(text="A good espresso has a thick golden crema.", id_="crema"),
    Document(text="Simmer the stew with onions and thyme for two hours.", id_="stew"),
]


def _answers(guard: indexplug.Guard, index: str, query: str, k: int) -> list[list[str]]:
    store = IndexplugVectorStore(guard, index)
    over_store = VectorStoreIndex.from_vector_store(store, embed_model=EMBED)
    return [
        [n.node.node_id for n in over_store.as_retriever(similarity_top_k=k).retrieve(query)],
        [
            n.node.node_id
            for n in IndexplugRetriever(guard, index, similarity_top_k=k).retrieve(query)
        ],
    ]


def test_an_empty_index_is_an_empty_list_everywhere(guard: indexplug.Guard) -> None:
    builtin = VectorStoreIndex([], embed_model=EMBED)
    assert builtin.as_retriever().retrieve("espresso") == []
    assert _answers(guard, "never-filled", "espresso", 4) == [[], []]
    assert (
        IndexplugVectorStore(guard, "never-filled").query(VectorStoreQuery(query_str="x")).nodes
        == []
    )


@pytest.mark.asyncio
async def test_an_empty_index_is_an_empty_list_async(guard: indexplug.Guard) -> None:
    store = IndexplugVectorStore(guard, "never-filled")
    over_store = VectorStoreIndex.from_vector_store(store, embed_model=EMBED)
    assert await over_store.as_retriever().aretrieve("espresso") == []
    assert await IndexplugRetriever(guard, "never-filled").aretrieve("espresso") == []
    with pytest.raises(indexplug.IndexEmptyError):
        await IndexplugRetriever(guard, "never-filled", empty_is_error=True).aretrieve("x")


@pytest.mark.parametrize("query,k", [("espresso", 0), ("", 2), ("   ", 2), ("?!", 2)])
def test_top_k_0_and_a_query_without_words_are_empty_lists(
    guard: indexplug.Guard, query: str, k: int
) -> None:
    # (LlamaIndex's SimpleVectorStore reads similarity_top_k=0 as "no limit"; a search for
    # no documents answers none here, as LangChain's and Haystack's stores do)
    VectorStoreIndex.from_documents(
        DOCS, storage_context=_context(guard, "coffee"), embed_model=EMBED
    )
    assert _answers(guard, "coffee", query, k) == [[], []]


@pytest.mark.asyncio
async def test_top_k_0_and_an_empty_query_async(guard: indexplug.Guard) -> None:
    store = IndexplugVectorStore(guard, "coffee")
    VectorStoreIndex.from_documents(
        DOCS, storage_context=_context(guard, "coffee"), embed_model=EMBED
    )
    assert await store.aquery(VectorStoreQuery(query_str=" ", similarity_top_k=2)) == store.query(
        VectorStoreQuery(query_str="espresso", similarity_top_k=0)
    )
    assert (await store.aquery(VectorStoreQuery(query_str="", similarity_top_k=2))).nodes == []
    assert await IndexplugRetriever(guard, "coffee", similarity_top_k=0).aretrieve("crema") == []
    assert await IndexplugRetriever(guard, "coffee").aretrieve("") == []
    found = await IndexplugRetriever(guard, "coffee", similarity_top_k=1).aretrieve("crema")
    assert [n.node.ref_doc_id for n in found] == ["crema"]


def _context(guard: indexplug.Guard, index: str):  # type: ignore[no-untyped-def]
    from llama_index.core import StorageContext

    return StorageContext.from_defaults(vector_store=IndexplugVectorStore(guard, index))
