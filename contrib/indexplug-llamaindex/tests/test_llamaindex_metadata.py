"""Nested, dated and tupled node metadata, as LlamaIndex's ``SimpleVectorStore`` (with its
docstore) keeps it: stored, and read back equal and of the same types (``get_nodes``, queries,
a retriever over the index), on sqlite-fts5, embedded chroma and elastic (conftest's
``FLOW_BACKENDS``); flat values stay filterable."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import indexplug
import pytest
from indexplug_llamaindex import IndexplugVectorStore
from llama_index.core import Document, VectorStoreIndex
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores.types import (
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
)

META = {
    "author": {"name": "Ada", "roles": ["writer", {"since": dt.date(2019, 3, 1)}]},
    "published": dt.datetime(2024, 5, 1, 9, 30, tzinfo=dt.UTC),
    "opens": dt.time(8, 15),
    "span": (3, 9),
    "mixed": [1, None, "a"],
    "year": 2024,
}


@pytest.fixture
def store(
    flow_backend: tuple[str, dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[IndexplugVectorStore]:
    """The store over each of conftest's ``FLOW_BACKENDS`` (chroma with the hashing embedder),
    its home a fresh folder."""
    monkeypatch.setenv("INDEXPLUG_HOME", str(tmp_path))
    guard = indexplug.open_backend(*flow_backend)
    try:
        yield IndexplugVectorStore(guard, "meta")
    finally:
        guard.close()


def _reference() -> dict[str, object]:
    """The metadata LlamaIndex's in-memory index gives back for the same document."""
    index = VectorStoreIndex.from_documents(
        [Document(id_="o", text="Otters sleep holding hands.", metadata=META)],
        embed_model=MockEmbedding(embed_dim=4),
    )
    [node] = index.as_retriever(similarity_top_k=1).retrieve("otters")
    return dict(node.metadata)


def test_nested_and_dated_metadata_comes_back_as_the_in_memory_store_gives_it(
    store: IndexplugVectorStore,
) -> None:
    expected = _reference()
    assert expected == META
    store.add([TextNode(id_="o", text="Otters sleep holding hands.", metadata=META)])
    [got] = store.get_nodes(node_ids=["o"])
    assert got.metadata == expected
    # tuples, dates and times of the same types (the keys may come back in another order)
    assert repr(sorted(got.metadata.items())) == repr(sorted(expected.items()))
    [hit] = store.query(VectorStoreQuery(query_str="otters", similarity_top_k=1)).nodes or []
    assert {k: v for k, v in hit.metadata.items() if k != "indexplug"} == expected
    [retrieved] = store.as_index().as_retriever(similarity_top_k=1).retrieve("otters")
    assert {k: v for k, v in retrieved.metadata.items() if k != "indexplug"} == expected


def test_flat_values_stay_filterable_beside_nested_ones(store: IndexplugVectorStore) -> None:
    store.add(
        [
            TextNode(id_="new", text="Otters in 2024.", metadata=META),
            TextNode(id_="old", text="Otters in 2020.", metadata={**META, "year": 2020}),
        ]
    )
    newer = MetadataFilters(filters=[MetadataFilter(key="year", value=2021, operator=">=")])
    result = store.query(VectorStoreQuery(query_str="otters", similarity_top_k=4, filters=newer))
    assert [n.node_id for n in result.nodes or []] == ["new"]
    assert (result.nodes or [])[0].metadata["author"]["roles"][1]["since"] == dt.date(2019, 3, 1)
