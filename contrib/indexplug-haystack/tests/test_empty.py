"""An empty store, ``top_k=0`` and queries without words answer as Haystack's own
``InMemoryBM25Retriever`` does, sync and async, on sqlite-fts5 and chroma; a lexical search is
never padded with documents that do not match."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
from haystack.dataclasses import Document
from haystack.document_stores.in_memory import InMemoryDocumentStore
from indexplug_haystack import IndexplugDocumentStore, IndexplugRetriever

DOCS = [
    Document(id="crema", content="A good espresso has a thick golden crema."),
    Document(id="grind", content="Grind the espresso beans finely."),
    Document(id="stew", content="Simmer the stew with onions and thyme for two hours."),
    Document(id="orbit", content="The station orbits the planet every ninety minutes."),
]
BACKENDS = ["sqlite-fts5", "chroma"]


def _ours(backend: str, docs: list[Document]) -> IndexplugRetriever:
    options = {"embedder": "hashing:default"} if backend == "chroma" else {}
    store = IndexplugDocumentStore("empty", backend=backend, options=options)
    store.write_documents(docs)
    return IndexplugRetriever(store, top_k=4)


def _answer(retriever: Any, query: str, top_k: int | None) -> Any:
    """The ids a retriever answers, or the type of what it raises."""
    try:
        return [d.id for d in retriever.run(query=query, top_k=top_k)["documents"]]
    except ValueError:
        return ValueError


def _aanswer(retriever: IndexplugRetriever, query: str, top_k: int | None) -> Any:
    try:
        out = asyncio.run(retriever.run_async(query=query, top_k=top_k))
    except ValueError:
        return ValueError
    return [d.id for d in out["documents"]]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "query,top_k,filled",
    [
        ("espresso", None, False),
        ("espresso", 0, True),
        ("", None, True),
        ("  ", None, True),
        ("?!", None, True),
    ],
)
def test_answers_match_the_in_memory_retriever(
    backend: str, query: str, top_k: int | None, filled: bool
) -> None:
    builtin_store = InMemoryDocumentStore()
    builtin = InMemoryBM25Retriever(builtin_store, top_k=4)
    expected = _answer(builtin, query, top_k)  # the empty store
    assert expected in ([], ValueError)
    ours = _ours(backend, [])
    assert _answer(ours, query, top_k) == expected
    assert _aanswer(ours, query, top_k) == expected
    if filled:  # on a filled store too
        builtin_store.write_documents(DOCS)
        expected = _answer(builtin, query, top_k)
        assert expected in ([], ValueError)
        ours = _ours(backend, DOCS)
        assert _answer(ours, query, top_k) == expected
        assert _aanswer(ours, query, top_k) == expected


def test_a_lexical_search_is_not_padded_with_documents_that_do_not_match() -> None:
    ours = _ours("sqlite-fts5", DOCS)
    assert sorted(_answer(ours, "espresso crema", 4)) == ["crema", "grind"]
    assert _answer(ours, "quantum", 4) == []


def test_a_negative_top_k_is_refused() -> None:
    ours = _ours("sqlite-fts5", DOCS)
    with pytest.raises(ValueError, match="top_k"):
        ours.run(query="espresso", top_k=-1)
    with pytest.raises(ValueError, match="top_k"):
        IndexplugRetriever(ours.document_store, top_k=0)
