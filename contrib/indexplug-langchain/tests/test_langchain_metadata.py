"""Nested, dated and tupled metadata, as LangChain's ``InMemoryVectorStore`` keeps it: stored,
and read back equal and of the same types (``get_by_ids``, searches, the retriever), on
sqlite-fts5, embedded chroma and elastic (conftest's ``FLOW_BACKENDS``); flat values stay
filterable."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import indexplug
import pytest
from indexplug_langchain import IndexplugRetriever, IndexplugVectorStore
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.vectorstores import InMemoryVectorStore

META = {
    "author": {"name": "Ada", "roles": ["writer", {"since": dt.date(2019, 3, 1)}]},
    "published": dt.datetime(2024, 5, 1, 9, 30, tzinfo=dt.UTC),
    "opens": dt.time(8, 15),
    "span": (3, 9),
    "mixed": [1, None, "a"],
    "year": 2024,
}

TEXT = "Otters sleep holding hands."


@pytest.fixture
def store(flow_backend: tuple[str, dict[str, Any]]) -> Iterator[IndexplugVectorStore]:
    guard = indexplug.open_backend(*flow_backend)
    try:
        yield IndexplugVectorStore(guard, "meta")
    finally:
        guard.close()


def _reference() -> Document:
    """What LangChain's in-memory store gives back for the same document."""
    mem = InMemoryVectorStore(DeterministicFakeEmbedding(size=8))
    mem.add_documents([Document(page_content=TEXT, metadata=META)], ids=["o"])
    [doc] = mem.get_by_ids(["o"])
    return doc


def test_nested_and_dated_metadata_comes_back_as_the_in_memory_store_gives_it(
    store: IndexplugVectorStore,
) -> None:
    expected = _reference().metadata
    assert expected == META
    store.add_documents([Document(page_content=TEXT, metadata=META)], ids=["o"])
    [got] = store.get_by_ids(["o"])
    assert got.metadata == expected
    # tuples, dates and times of the same types (the keys may come back in another order)
    assert repr(sorted(got.metadata.items())) == repr(sorted(expected.items()))
    [(found, _)] = store.similarity_search_with_score("otters", k=1)
    assert found.metadata == expected
    [hit] = IndexplugRetriever(guard=store.guard, index="meta", k=1).invoke("otters")
    assert {k: v for k, v in hit.metadata.items() if k != "indexplug"} == expected


def test_flat_values_stay_filterable_beside_nested_ones(store: IndexplugVectorStore) -> None:
    store.add_documents(
        [
            Document(page_content="Otters in 2024.", metadata=META),
            Document(page_content="Otters in 2020.", metadata={**META, "year": 2020}),
        ],
        ids=["new", "old"],
    )
    found = store.similarity_search("otters", k=4, filter={"year": {"$gte": 2021}})
    assert [d.id for d in found] == ["new"]
    assert found[0].metadata["author"]["roles"][1]["since"] == dt.date(2019, 3, 1)
