"""The user's Haystack embedder pair is the model chroma embeds with.

The components map each text to a hand-picked vector, chosen so that their ranking is not a
semantic model's: a query about fruit lands on the document about engines.  That the pipeline
answers that document, and that the components saw every document and the query, shows they
are the ones used.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import indexplug
import pytest
from haystack import Document, Pipeline, component
from haystack.components.writers import DocumentWriter
from indexplug.errors import IndexFailedError, InvalidRequest
from indexplug_haystack import IndexplugDocumentStore, IndexplugRetriever, haystack_embedder

TEXTS = {
    "pie": "Apple pie is baked with sliced apples and cinnamon.",
    "engine": "A diesel engine compresses air until the fuel ignites.",
    "waves": "Ocean waves are raised by the wind over open water.",
}
VECTORS = {
    TEXTS["pie"]: [1.0, 0.0, 0.0],
    TEXTS["engine"]: [0.0, 1.0, 0.0],
    TEXTS["waves"]: [0.0, 0.0, 1.0],
    "fruit dessert": [0.1, 0.9, 0.2],
    "sea": [0.0, 0.2, 0.9],
}
MINILM = {"embedder": "sentence-transformers:all-MiniLM-L6-v2"}
SEEN: dict[str, list[str]] = {"documents": [], "queries": [], "warm": []}


def _vector(text: str | None) -> list[float]:
    return VECTORS.get(text or "", [0.0, 0.0, 1.0])


@component
class HandPickedText:
    """A text embedder: one hand-picked vector per known query."""

    def __init__(self, model: str = "hand-picked") -> None:
        self.model = model

    def warm_up(self) -> None:
        SEEN["warm"].append("text")

    @component.output_types(embedding=list[float])
    def run(self, text: str) -> dict[str, Any]:
        SEEN["queries"].append(text)
        return {"embedding": _vector(text)}


@component
class HandPickedDocuments:
    """A document embedder of the same model."""

    def __init__(self, model: str = "hand-picked") -> None:
        self.model = model

    def warm_up(self) -> None:
        SEEN["warm"].append("documents")

    @component.output_types(documents=list[Document])
    def run(self, documents: list[Document]) -> dict[str, Any]:
        SEEN["documents"].extend(d.content or "" for d in documents)
        return {
            "documents": [dataclasses.replace(d, embedding=_vector(d.content)) for d in documents]
        }


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """Calls counted per test; the embedding cache in this test's home (conftest)."""
    monkeypatch.delenv("INDEXPLUG_EMBED_CACHE", raising=False)
    for calls in SEEN.values():
        calls.clear()


def _store(model: str = "hand-picked", **kw: Any) -> IndexplugDocumentStore:
    return IndexplugDocumentStore(
        "mine",
        backend="chroma",
        options=MINILM,
        text_embedder=HandPickedText(model),
        document_embedder=HandPickedDocuments(model),
        **kw,
    )


def _write(store: IndexplugDocumentStore) -> None:
    writer = Pipeline()
    writer.add_component("writer", DocumentWriter(document_store=store))
    writer.run({"writer": {"documents": [Document(id=k, content=t) for k, t in TEXTS.items()]}})


def test_chroma_embeds_documents_and_queries_with_the_users_components() -> None:
    store = _store()
    _write(store)
    assert sorted(SEEN["documents"]) == sorted(TEXTS.values())
    search = Pipeline()
    search.add_component("retriever", IndexplugRetriever(document_store=store, top_k=3))
    found = search.run({"retriever": {"query": "fruit dessert"}})["retriever"]["documents"]
    assert [d.id for d in found] == ["engine", "waves", "pie"]
    assert SEEN["queries"][-1] == "fruit dessert"
    assert sorted(SEEN["warm"]) == ["documents", "text"]  # each warmed once
    # a pipeline saved and loaded keeps the embedders, and searches with them
    loaded = Pipeline.loads(search.dumps(), allowed_modules=["indexplug_haystack", __name__])
    again = loaded.run({"retriever": {"query": "sea", "top_k": 1}})["retriever"]["documents"]
    assert [d.id for d in again] == ["waves"] and SEEN["queries"][-1] == "sea"


def test_reopening_the_index_with_another_model_is_a_typed_error() -> None:
    _write(_store())
    other = IndexplugRetriever(document_store=_store("another-model"), top_k=1)
    with pytest.raises(IndexFailedError) as raised:
        other.run("sea")
    assert getattr(raised.value.outcome, "error_type", None) == "EmbedderMismatch"
    assert "another-model" in str(raised.value) and "hand-picked" in str(raised.value)
    same = IndexplugRetriever(document_store=_store(), top_k=1)
    assert [d.id for d in same.run("sea")["documents"]] == ["waves"]


def test_the_pair_is_given_together_and_a_guard_must_have_it() -> None:
    with pytest.raises(ValueError, match="together"):
        IndexplugDocumentStore("mine", backend="chroma", text_embedder=HandPickedText())
    guard = indexplug.open_backend("chroma", {"embedder": "hashing:default"})
    with pytest.raises(InvalidRequest, match="opened without"):
        IndexplugDocumentStore(
            "mine",
            guard=guard,
            text_embedder=HandPickedText(),
            document_embedder=HandPickedDocuments(),
        )
    text, docs = HandPickedText(), HandPickedDocuments()
    opened = indexplug.open_backend("chroma", embedder=haystack_embedder(text, docs))
    store = IndexplugDocumentStore("mine", guard=opened, text_embedder=text, document_embedder=docs)
    _write(store)
    found = IndexplugRetriever(document_store=store, top_k=1).run("fruit dessert")
    assert [d.id for d in found["documents"]] == ["engine"]
    guard.close()
    opened.close()


def test_a_lexical_backend_never_calls_the_components() -> None:
    store = IndexplugDocumentStore(
        "mine",
        backend="sqlite-fts5",
        text_embedder=HandPickedText(),
        document_embedder=HandPickedDocuments(),
    )
    _write(store)
    found = IndexplugRetriever(document_store=store, top_k=3).run("apples")["documents"]
    assert [d.id for d in found] == ["pie"]
    assert SEEN == {"documents": [], "queries": [], "warm": []}
