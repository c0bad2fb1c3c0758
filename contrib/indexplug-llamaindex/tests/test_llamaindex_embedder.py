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
