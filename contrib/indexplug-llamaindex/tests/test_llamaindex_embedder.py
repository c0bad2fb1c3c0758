"""The user's LlamaIndex ``BaseEmbedding`` is the model chroma embeds with.

The model maps each text to a hand-picked vector, chosen so that its ranking is not a semantic
model's: a query about fruit lands on the node about engines.  That the index answers that
node, and that the model saw every node and the query, shows it is the one used.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import indexplug
import pytest
from indexplug.errors import IndexFailedError, InvalidRequest
from indexplug_llamaindex import IndexplugVectorStore, llamaindex_embedder
from llama_index.core import Settings
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.llms import MockLLM
from llama_index.core.schema import TextNode
from pydantic import Field

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


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test in a fresh indexplug home, with its own embedding cache."""
    monkeypatch.setenv("INDEXPLUG_HOME", str(tmp_path))
    monkeypatch.delenv("INDEXPLUG_EMBED_CACHE", raising=False)


class HandPicked(BaseEmbedding):
    """A deterministic model with a vector per known text (anything else: the last axis)."""

    documents: list[str] = Field(default_factory=list)
    queries: list[str] = Field(default_factory=list)

    def _vector(self, text: str) -> list[float]:
        return VECTORS.get(text, [0.0, 0.0, 1.0])

    def _get_text_embedding(self, text: str) -> list[float]:
        self.documents.append(text)
        return self._vector(text)

    def _get_query_embedding(self, query: str) -> list[float]:
        self.queries.append(query)
        return self._vector(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)


class Other(HandPicked):
    """Another model of the same dimension."""


def _nodes() -> list[TextNode]:
    return [TextNode(id_=key, text=text) for key, text in TEXTS.items()]


def _store(model: BaseEmbedding | None, **options: Any) -> IndexplugVectorStore:
    return IndexplugVectorStore.from_backend(
        "chroma", "mine", {**MINILM, **options}, embed_model=model
    )


def test_chroma_embeds_nodes_and_queries_with_the_users_model() -> None:
    model = HandPicked()
    store = _store(model)
    index = store.as_index()
    index.insert_nodes(_nodes())
    assert sorted(model.documents) == sorted(TEXTS.values())
    hits = index.as_retriever(similarity_top_k=3).retrieve("fruit dessert")
    assert [h.node.node_id for h in hits] == ["engine", "waves", "pie"]
    assert model.queries[-1] == "fruit dessert"
    answer = index.as_query_engine(llm=MockLLM(), similarity_top_k=1).query("sea")
    assert [n.node.node_id for n in answer.source_nodes] == ["waves"]
    assert model.queries[-1] == "sea"
    assert store.embed_model is model
    store.client.close()


def test_async_retrieval_embeds_the_query_with_the_users_model() -> None:
    model = HandPicked()
    store = _store(model)
    store.as_index().insert_nodes(_nodes())
    retriever = store.as_index().as_retriever(similarity_top_k=1)
    hits = asyncio.run(retriever.aretrieve("fruit dessert"))
    assert [h.node.node_id for h in hits] == ["engine"] and model.queries[-1] == "fruit dessert"


def test_without_a_model_the_backend_embeds_and_no_default_model_is_looked_for() -> None:
    assert Settings._embed_model is None  # LlamaIndex's default (OpenAI) not resolved
    store = _store(None, embedder="hashing:default")
    index = store.as_index()
    index.insert_nodes(_nodes())
    hits = index.as_retriever(similarity_top_k=1).retrieve("baked apples and cinnamon")
    assert [h.node.node_id for h in hits] == ["pie"]
    assert Settings._embed_model is None


def test_reopening_the_index_with_another_model_is_a_typed_error() -> None:
    _store(HandPicked()).add(_nodes())
    other = _store(Other()).as_index().as_retriever(similarity_top_k=1)
    with pytest.raises(IndexFailedError) as raised:
        other.retrieve("sea")
    assert getattr(raised.value.outcome, "error_type", None) == "EmbedderMismatch"
    assert "HandPicked" in str(raised.value) and "Other" in str(raised.value)
    again = _store(HandPicked()).as_index().as_retriever(similarity_top_k=1).retrieve("sea")
    assert [h.node.node_id for h in again] == ["waves"]


def test_the_identity_recorded_names_the_class_and_the_model() -> None:
    emb = llamaindex_embedder(HandPicked(model_name="my-fine-tune-v2"))
    assert emb.name.startswith("llamaindex:") and emb.name.endswith("HandPicked/my-fine-tune-v2")
    assert emb.dim == 3


def test_a_guard_opened_without_the_model_is_refused_not_used_with_another() -> None:
    guard = indexplug.open_backend("chroma", {"embedder": "hashing:default"})
    with pytest.raises(InvalidRequest, match="opened without this embed_model"):
        IndexplugVectorStore(guard, "mine", embed_model=HandPicked())
    guard.close()


def test_a_lexical_backend_never_calls_the_model() -> None:
    model = HandPicked()
    store = IndexplugVectorStore.from_backend("sqlite-fts5", "mine", embed_model=model)
    index = store.as_index()
    index.insert_nodes(_nodes())
    hits = index.as_retriever(similarity_top_k=3).retrieve("apples")
    assert [h.node.node_id for h in hits] == ["pie"]
    assert model.documents == [] and model.queries == []


def _stored(store: IndexplugVectorStore, vector: list[float]) -> dict[str, list[float]]:
    """Each node's stored vector (the nearest first), by node id."""
    out = store.client.search_vector(store.index, vector, top_k=10, with_vectors=True)
    assert isinstance(out, indexplug.Searched)
    return {str(h.passage.key): [float(x) for x in h.vector or ()] for h in out.hits}


def _unit(v: list[float]) -> list[float]:
    norm = sum(x * x for x in v) ** 0.5
    return [x / norm for x in v]


def test_node_embeddings_are_stored_not_computed_again() -> None:
    from llama_index.core.ingestion import IngestionPipeline

    model = HandPicked()
    store = _store(model)
    nodes = IngestionPipeline(transformations=[model]).run(nodes=_nodes())
    assert sorted(model.documents) == sorted(TEXTS.values())  # the pipeline embedded them once
    # a node whose embedding is not what the model gives its text: the node's is the one kept
    odd = TextNode(id_="odd", text="Sourdough needs a starter.", embedding=[0.0, 3.0, 4.0])
    store.add([*nodes, odd])
    assert sorted(model.documents) == sorted(TEXTS.values())  # not called again on add
    stored = _stored(store, [0.0, 0.6, 0.8])
    assert stored["odd"] == pytest.approx([0.0, 0.6, 0.8])
    for n in nodes:
        assert stored[n.node_id] == pytest.approx(_unit(n.get_embedding()))
    hits = store.as_index().as_retriever(similarity_top_k=1).retrieve("fruit dessert")
    assert [h.node.node_id for h in hits] == ["engine"]
    store.client.close()


def test_async_add_stores_node_embeddings() -> None:
    model = HandPicked()
    store = _store(model)
    odd = TextNode(id_="odd", text="Sourdough needs a starter.", embedding=[0.0, 3.0, 4.0])
    plain = TextNode(id_="pie", text=TEXTS["pie"])  # no embedding: the backend embeds it
    asyncio.run(store.async_add([odd, plain]))
    assert model.documents == [TEXTS["pie"]]
    stored = _stored(store, [0.0, 0.6, 0.8])
    assert stored == {
        "odd": pytest.approx([0.0, 0.6, 0.8]),
        "pie": pytest.approx([1.0, 0.0, 0.0]),
    }
    store.client.close()


def test_a_vector_store_index_embeds_each_node_once_with_the_users_model() -> None:
    model = HandPicked()
    store = _store(model)
    store.as_index().insert_nodes(_nodes())
    assert sorted(model.documents) == sorted(TEXTS.values())
    stored = _stored(store, [1.0, 0.0, 0.0])
    assert stored["pie"] == pytest.approx([1.0, 0.0, 0.0])
    store.client.close()


def test_without_the_users_model_node_embeddings_are_not_taken() -> None:
    """Nothing says which model made them: the backend embeds the text with its own."""
    store = _store(None, embedder="hashing:default")
    store.add([TextNode(id_="odd", text="Sourdough needs a starter.", embedding=[1.0, 0.0])])
    (vector,) = _stored(store, store.client.query_vector("Sourdough needs a starter.")).values()
    assert len(vector) != 2
    assert vector == pytest.approx(
        [float(x) for x in store.client.query_vector("Sourdough needs a starter.")], abs=1e-5
    )
    store.client.close()
