"""The flows LlamaIndex users run, end to end, on sqlite-fts5, embedded chroma and a real
Elasticsearch node (conftest's ``FLOW_BACKENDS``), with a deterministic embedding model written
here (the pipeline embeds with it, chroma embeds with it; sqlite-fts5 and elastic rank by BM25):

* an ``IngestionPipeline`` (a sentence splitter, the embedding model) into the store, with a
  docstore for de-duplication, run twice: the second run writes nothing; then an edited
  document replaces its old nodes (``upserts``);
* a query engine over the store with LlamaIndex's ``MockLLM``, answering from those nodes.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from indexplug_llamaindex import IndexplugVectorStore
from llama_index.core import Document
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.ingestion import DocstoreStrategy, IngestionPipeline
from llama_index.core.llms import MockLLM
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.storage.docstore import SimpleDocumentStore

DIM = 64


def _vector(text: str) -> list[float]:
    vec = [0.0] * DIM
    for word in text.lower().split():
        word = word.strip(".,?!;")
        vec[int(hashlib.sha256(word.encode()).hexdigest(), 16) % DIM] += 1.0
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    return [v / norm for v in vec]


class WordHashEmbedding(BaseEmbedding):
    """A deterministic model: each word adds 1 to one of 64 dimensions, then unit length."""

    calls: int = 0

    def _get_text_embedding(self, text: str) -> list[float]:
        self.calls += 1
        return _vector(text)

    def _get_query_embedding(self, query: str) -> list[float]:
        self.calls += 1
        return _vector(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)


DOCS = {
    "otters": "Sea otters hold hands while they sleep. Otters crack shellfish with stones.",
    "coffee": "Espresso is brewed under pressure. A golden crema sits on top.",
    "volcano": "Volcanoes erupt molten lava and ash high into the sky.",
}


def _documents(texts: dict[str, str]) -> list[Document]:
    return [
        Document(id_=name, text=text, metadata={"file": f"{name}.md"})
        for name, text in texts.items()
    ]


@pytest.fixture
def store(
    flow_backend: tuple[str, dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[IndexplugVectorStore]:
    monkeypatch.setenv("INDEXPLUG_HOME", str(tmp_path))
    name, options = flow_backend
    vs = IndexplugVectorStore.from_backend(name, "flow", options, embed_model=WordHashEmbedding())
    assert vs.guard is vs.client  # the name the LangChain and Haystack stores use, too
    try:
        yield vs
    finally:
        vs.guard.close()


def _stored(store: IndexplugVectorStore) -> list[str]:
    return sorted(n.get_content() for n in store.get_nodes())


def _pipeline(store: IndexplugVectorStore, docstore: SimpleDocumentStore) -> IngestionPipeline:
    return IngestionPipeline(
        transformations=[SentenceSplitter(chunk_size=24, chunk_overlap=0), WordHashEmbedding()],
        vector_store=store,
        docstore=docstore,
        docstore_strategy=DocstoreStrategy.UPSERTS,
    )


def test_an_ingestion_pipeline_run_twice_writes_nothing_the_second_time(
    store: IndexplugVectorStore,
) -> None:
    docstore = SimpleDocumentStore()
    first = _pipeline(store, docstore).run(documents=_documents(DOCS))
    assert len(first) >= 3
    before = _stored(store)
    assert len(before) == len(first)

    again = _pipeline(store, docstore).run(documents=_documents(DOCS))
    assert again == []  # the docstore knew every document: nothing was split, embedded, written
    assert _stored(store) == before

    edited = {**DOCS, "coffee": "Espresso is brewed under pressure; crema on top."}
    third = _pipeline(store, docstore).run(documents=_documents(edited))
    assert [n.ref_doc_id for n in third] == ["coffee"]
    stored = _stored(store)
    assert "Espresso is brewed under pressure; crema on top." in stored
    assert not any("golden crema" in text for text in stored)  # the old nodes were replaced


def test_a_query_engine_with_mock_llm_answers_from_the_nodes(store: IndexplugVectorStore) -> None:
    _pipeline(store, SimpleDocumentStore()).run(documents=_documents(DOCS))
    engine = store.as_index().as_query_engine(llm=MockLLM(), similarity_top_k=1)
    response = engine.query("why do otters hold hands while they sleep")
    [source] = response.source_nodes
    assert source.node.ref_doc_id == "otters"
    assert source.node.metadata["file"] == "otters.md"
    # MockLLM answers with the prompt it was given: the retrieved text reached the LLM
    assert "Sea otters hold hands while they sleep." in str(response)
    assert "Volcanoes" not in str(response)


@pytest.mark.asyncio
async def test_the_query_engine_async(store: IndexplugVectorStore) -> None:
    _pipeline(store, SimpleDocumentStore()).run(documents=_documents(DOCS))
    engine = store.as_index().as_query_engine(llm=MockLLM(), similarity_top_k=1)
    response = await engine.aquery("golden crema espresso")
    assert [n.node.ref_doc_id for n in response.source_nodes] == ["coffee"]
    assert "golden crema" in str(response)
