"""The flows Haystack users run, end to end, on sqlite-fts5, embedded chroma and a real
Elasticsearch node (conftest's ``FLOW_BACKENDS``), with a deterministic embedding model written
here (a text and a document embedder component):

* an indexing pipeline: ``DocumentSplitter`` with an overlap, the document embedder,
  ``DocumentWriter`` into the store;
* a query pipeline: the retriever (BM25 on sqlite-fts5 and elastic; on chroma the store's own
  embedder pair ranks), then a ``PromptBuilder``;
* both pipelines saved (``dumps``) and loaded (``loads``): the adapter's classes need no
  ``allowed_modules`` (only this test module's own embedders do), and the loaded pipelines
  write and answer as the originals did;
* a hybrid pipeline: the split, embedded chunks written to sqlite-fts5 and to chroma, then
  ``IndexplugRetriever`` (BM25) and ``IndexplugEmbeddingRetriever`` joined by
  ``DocumentJoiner(join_mode="reciprocal_rank_fusion")``, saved and loaded.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from typing import Any

import pytest
from haystack import Document, Pipeline, component
from haystack.components.builders import PromptBuilder
from haystack.components.joiners import DocumentJoiner
from haystack.components.preprocessors import DocumentSplitter
from haystack.components.writers import DocumentWriter
from haystack.core.errors import DeserializationError
from haystack.document_stores.types import DuplicatePolicy
from haystack_integrations.components.retrievers.indexplug import (
    IndexplugEmbeddingRetriever,
    IndexplugRetriever,
)
from haystack_integrations.document_stores.indexplug import IndexplugDocumentStore

DIM = 64


def _vector(text: str) -> list[float]:
    vec = [0.0] * DIM
    for word in text.lower().split():
        word = word.strip(".,?!;")
        vec[int(hashlib.sha256(word.encode()).hexdigest(), 16) % DIM] += 1.0
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    return [v / norm for v in vec]


@component
class WordHashTextEmbedder:
    """A deterministic model: each word adds 1 to one of 64 dimensions, then unit length."""

    @component.output_types(embedding=list[float])
    def run(self, text: str) -> dict[str, Any]:
        return {"embedding": _vector(text)}


@component
class WordHashDocumentEmbedder:
    """The same model for documents (``Document.embedding``)."""

    @component.output_types(documents=list[Document])
    def run(self, documents: list[Document]) -> dict[str, Any]:
        return {
            "documents": [
                dataclasses.replace(d, embedding=_vector(d.content or "")) for d in documents
            ]
        }


TEXT = (
    "Sea otters hold hands while they sleep so they do not drift apart. "
    "They crack shellfish open with stones they keep in a pouch of skin. "
    "Volcanoes erupt molten lava and ash high into the sky. "
    "Espresso is brewed under pressure and topped with a golden crema."
)


def _store(backend: str, options: dict[str, Any] | None = None) -> IndexplugDocumentStore:
    if backend == "chroma":
        return IndexplugDocumentStore(
            "flow",
            backend="chroma",
            options=options,
            text_embedder=WordHashTextEmbedder(),
            document_embedder=WordHashDocumentEmbedder(),
        )
    return IndexplugDocumentStore("flow", backend=backend, options=options)


def _indexing(store: IndexplugDocumentStore) -> Pipeline:
    pipe = Pipeline()
    pipe.add_component("split", DocumentSplitter(split_by="word", split_length=12, split_overlap=4))
    pipe.add_component("embed", WordHashDocumentEmbedder())
    pipe.add_component("write", DocumentWriter(store, policy=DuplicatePolicy.OVERWRITE))
    pipe.connect("split.documents", "embed.documents")
    pipe.connect("embed.documents", "write.documents")
    return pipe


def _query(store: IndexplugDocumentStore) -> Pipeline:
    pipe = Pipeline()
    pipe.add_component("retrieve", IndexplugRetriever(store, top_k=1))
    pipe.add_component(
        "prompt",
        PromptBuilder(
            "{% for d in documents %}{{ d.content }}\n{% endfor %}Q: {{ question }}",
            required_variables=["documents", "question"],
        ),
    )
    pipe.connect("retrieve.documents", "prompt.documents")
    return pipe


def _ask(pipe: Pipeline, question: str) -> str:
    out = pipe.run({"retrieve": {"query": question}, "prompt": {"question": question}})
    return str(out["prompt"]["prompt"])


def test_split_embed_write_then_retrieve_then_save_and_load(
    flow_backend: tuple[str, dict[str, Any]],
) -> None:
    backend, options = flow_backend
    store = _store(backend, options)
    source = Document(content=TEXT, meta={"file": "notes.txt"})
    written = _indexing(store).run({"split": {"documents": [source]}})["write"]
    count = store.count_documents()
    assert written["documents_written"] == count > 2
    stored = store.filter_documents()
    assert all(d.embedding == _vector(d.content or "") for d in stored)  # kept as embedded
    assert any(d.meta.get("_split_overlap") for d in stored)

    prompt = _ask(_query(store), "golden crema espresso")
    assert "golden crema" in prompt and "otters" not in prompt

    # saved and loaded: the adapter's classes load with Haystack's default trusted modules
    here = [__name__] if backend == "chroma" else []
    indexing_again = Pipeline.loads(_indexing(store).dumps(), allowed_modules=[__name__])
    query_again = Pipeline.loads(_query(store).dumps(), allowed_modules=here or None)
    indexing_again.run({"split": {"documents": [source]}})
    assert store.count_documents() == count  # the same ids, overwritten: nothing added
    assert _ask(query_again, "golden crema espresso") == prompt


def test_only_the_users_own_components_need_allowed_modules() -> None:
    text = _query(_store("chroma")).dumps()
    with pytest.raises(DeserializationError, match=__name__):
        Pipeline.loads(text)


TOPICS = (
    {"espresso", "crema", "coffee", "roast", "brew"},
    {"otters", "shellfish", "stones"},
    {"lava", "ash"},
)
"""A second deterministic model, by topic: a chunk about coffee is near a query about coffee
whether or not they share a word, so its ranking is not BM25's."""


def _topic(text: str) -> list[float]:
    words = [w.strip(".,?!;").lower() for w in text.split()]
    return [sum(w in topic for w in words) + 0.1 for topic in TOPICS]


@component
class TopicTextEmbedder:
    @component.output_types(embedding=list[float])
    def run(self, text: str) -> dict[str, Any]:
        return {"embedding": _topic(text)}


@component
class TopicDocumentEmbedder:
    @component.output_types(documents=list[Document])
    def run(self, documents: list[Document]) -> dict[str, Any]:
        return {
            "documents": [
                dataclasses.replace(d, embedding=_topic(d.content or "")) for d in documents
            ]
        }


HYBRID_TEXT = (
    "Espresso crema tops each cup otters crack shellfish with stones near the coffee roast "
    "brew lava ash"
)
"""Split by 5 words with 1 of overlap: "Espresso crema tops each cup" (coffee, no word of the
query), "cup otters crack shellfish with", "with stones near the coffee" (one query word,
half coffee), "coffee roast brew lava ash" (both query words, mostly coffee)."""


def _hybrid_query(lexical: IndexplugDocumentStore, vector: IndexplugDocumentStore) -> Pipeline:
    pipe = Pipeline()
    pipe.add_component("embed", TopicTextEmbedder())
    pipe.add_component("words", IndexplugRetriever(lexical, top_k=4))
    pipe.add_component("vectors", IndexplugEmbeddingRetriever(vector, top_k=4))
    pipe.add_component("join", DocumentJoiner(join_mode="reciprocal_rank_fusion", top_k=3))
    pipe.connect("embed.embedding", "vectors.query_embedding")
    pipe.connect("words.documents", "join.documents")
    pipe.connect("vectors.documents", "join.documents")
    return pipe


def _ranked(pipe: Pipeline, query: str) -> dict[str, list[str]]:
    out = pipe.run(
        {"embed": {"text": query}, "words": {"query": query}},
        include_outputs_from={"words", "vectors"},
    )
    return {name: [d.id for d in out[name]["documents"]] for name in ("words", "vectors", "join")}


def test_hybrid_pipeline_fuses_bm25_and_embedding_retrievers_then_save_and_load() -> None:
    lexical = IndexplugDocumentStore("words", backend="sqlite-fts5")
    vector = IndexplugDocumentStore(
        "vectors",
        backend="chroma",
        text_embedder=TopicTextEmbedder(),
        document_embedder=TopicDocumentEmbedder(),
    )
    ingest = Pipeline()
    ingest.add_component(
        "split", DocumentSplitter(split_by="word", split_length=5, split_overlap=1)
    )
    ingest.add_component("embed", TopicDocumentEmbedder())
    ingest.add_component("write_words", DocumentWriter(lexical))
    ingest.add_component("write_vectors", DocumentWriter(vector))
    ingest.connect("split.documents", "embed.documents")
    ingest.connect("embed.documents", "write_words.documents")
    ingest.connect("embed.documents", "write_vectors.documents")
    ingest.run({"split": {"documents": [Document(content=HYBRID_TEXT)]}})
    chunk = {(d.content or "").strip(): d.id for d in vector.filter_documents()}
    assert chunk.keys() == {(d.content or "").strip() for d in lexical.filter_documents()}
    assert all(d.meta["_split_overlap"] for d in lexical.filter_documents())
    coffee, cup, otters, stones = (
        chunk["coffee roast brew lava ash"],
        chunk["Espresso crema tops each cup"],
        chunk["cup otters crack shellfish with"],
        chunk["with stones near the coffee"],
    )

    ranked = _ranked(_hybrid_query(lexical, vector), "roast coffee")
    assert ranked["words"] == [coffee, stones]  # BM25: only the chunks with a query word
    assert ranked["vectors"] == [cup, coffee, stones, otters]  # by topic
    # reciprocal rank fusion: 1/61 + 1/62 for the coffee chunk, 1/62 + 1/63, then 1/61
    assert ranked["join"] == [coffee, stones, cup]

    again = Pipeline.loads(_hybrid_query(lexical, vector).dumps(), allowed_modules=[__name__])
    assert _ranked(again, "roast coffee") == ranked
