"""Documents' own embeddings and the embedding retriever, on a backend that claims indexplug's
``vectors`` capability (chroma; usearch keeps no caller keys, which the document store needs),
with a stand-in model of hand-picked vectors: the usual pipeline, the document embedder before
the writer and the text embedder before the retriever, searches the vectors that model made,
each document embedded once.  On a backend without the capability (sqlite-fts5) the retriever
is refused, naming it."""

from __future__ import annotations

import asyncio
from typing import Any

import indexplug
import pytest
from haystack import Document, Pipeline, component
from haystack.components.writers import DocumentWriter
from indexplug_haystack import IndexplugDocumentStore, IndexplugEmbeddingRetriever, NoVectors

VECTORS = {
    "espresso with crema": [1.0, 0.0, 0.0],
    "stew with thyme": [0.0, 0.0, 1.0],
    "a cup of filter coffee": [0.7, 0.7, 0.0],
    "a hot drink": [0.9, 0.1, 0.0],
}
DOCS = list(VECTORS)[:3]
CALLS: list[int] = []


def _vector(text: str | None) -> list[float]:
    return VECTORS.get(text or "", [0.0, 1.0, 0.0])


@component
class EmbedDocuments:
    """The stand-in model's document embedder (counts the documents it embeds)."""

    @component.output_types(documents=list[Document])
    def run(self, documents: list[Document]) -> dict[str, Any]:
        CALLS.append(len(documents))
        return {
            "documents": [
                Document(id=d.id, content=d.content, meta=d.meta, embedding=_vector(d.content))
                for d in documents
            ]
        }


@component
class EmbedText:
    """The stand-in model's text embedder."""

    @component.output_types(embedding=list[float])
    def run(self, text: str) -> dict[str, Any]:
        return {"embedding": _vector(text)}


@pytest.fixture
def store(vector_backend: tuple[str, dict[str, Any]]) -> Any:
    CALLS.clear()
    backend, options = vector_backend
    s = IndexplugDocumentStore(
        "drinks",
        backend=backend,
        options=options,
        text_embedder=EmbedText(),
        document_embedder=EmbedDocuments(),
    )
    yield s
    s.guard.close()


def _write(store: IndexplugDocumentStore, docs: list[Document]) -> int:
    writing = Pipeline()
    writing.add_component("embed", EmbedDocuments())
    writing.add_component("write", DocumentWriter(store))
    writing.connect("embed", "write")
    out = writing.run({"embed": {"documents": docs}})
    return int(out["write"]["documents_written"])


def test_the_pipeline_embeds_once_and_retrieves_by_embedding(store: Any) -> None:
    assert _write(store, [Document(id=t.split()[0], content=t) for t in DOCS]) == 3
    assert CALLS == [3]  # the pipeline's embedder only: the backend did not embed them again
    querying = Pipeline()
    querying.add_component("embed", EmbedText())
    querying.add_component("retrieve", IndexplugEmbeddingRetriever(store, top_k=2))
    querying.connect("embed.embedding", "retrieve.query_embedding")
    found = querying.run({"embed": {"text": "a hot drink"}})["retrieve"]["documents"]
    assert [d.content for d in found] == ["espresso with crema", "a cup of filter coffee"]
    assert found[0].score is not None and found[0].meta["indexplug"]["rank"] == 1


def test_retriever_options_async_and_refusals(store: Any) -> None:
    _write(store, [Document(id=t.split()[0], content=t, meta={"n": i}) for i, t in enumerate(DOCS)])
    retriever = IndexplugEmbeddingRetriever(store, top_k=1)
    again = asyncio.run(retriever.run_async(query_embedding=VECTORS["stew with thyme"]))
    assert [d.content for d in again["documents"]] == ["stew with thyme"]
    assert retriever.run(query_embedding=VECTORS["stew with thyme"], top_k=0) == {"documents": []}
    filtered = retriever.run(
        query_embedding=VECTORS["a hot drink"],
        filters={"field": "meta.n", "operator": "==", "value": 1},
    )
    assert [d.content for d in filtered["documents"]] == ["stew with thyme"]
    with pytest.raises(indexplug.OutcomeError) as raised:
        retriever.run(query_embedding=[1.0, 0.0])
    assert raised.value.code == "BAD_REQUEST"
    with pytest.raises(indexplug.OutcomeError, match="2 numbers"):
        store.write_documents([Document(id="bad", content="x", embedding=[1.0, 0.0])])
    saved = retriever.to_dict()
    assert saved["type"].endswith("IndexplugEmbeddingRetriever")
    assert saved["init_parameters"]["top_k"] == 1


def test_without_the_pair_a_documents_embedding_is_kept_but_not_searched() -> None:
    store = IndexplugDocumentStore("plain", backend="chroma", options={"embedder": "hashing:8"})
    # 3 numbers where the index's embedder gives 8: not searched, so not refused
    assert store.write_documents([Document(id="a", content="tea", embedding=[1.0, 0.0, 0.0])])
    assert store.filter_documents()[0].embedding == [1.0, 0.0, 0.0]
    store.guard.close()


def test_a_lexical_backend_has_no_embedding_retriever() -> None:
    store = IndexplugDocumentStore("notes", backend="sqlite-fts5")
    with pytest.raises(NoVectors, match="'vectors' capability") as raised:
        IndexplugEmbeddingRetriever(store)
    assert raised.value.capability == "vectors"
    store.guard.close()


def test_a_saved_pipeline_with_the_embedding_retriever_loads_and_runs() -> None:
    """Saved under ``haystack_integrations``, the retriever loads with Haystack's default trusted
    modules and searches the same index."""
    store = IndexplugDocumentStore("saved", backend="chroma", options={"embedder": "hashing:8"})
    try:
        store.write_documents([Document(id=t, content=t) for t in DOCS])
        pipe = Pipeline()
        pipe.add_component("retrieve", IndexplugEmbeddingRetriever(store, top_k=1))
        text = pipe.dumps()
        name = "haystack_integrations.components.retrievers.indexplug.IndexplugEmbeddingRetriever"
        assert name in text
        again = Pipeline.loads(text)
        query = [float(x) for x in store.guard.query_vector("stew with thyme")]
        out = again.run({"retrieve": {"query_embedding": query}})["retrieve"]["documents"]
        assert [d.id for d in out] == ["stew with thyme"]
    finally:
        store.guard.close()
