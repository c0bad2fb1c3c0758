"""The user's LangChain ``Embeddings`` is the model chroma embeds with.

The model here maps each text to a hand-picked vector, chosen so that the ranking it gives is
not the one a semantic model (chroma's MiniLM, or the hashing embedder) would give: a query
about fruit lands on the document about engines.  That the store answers that document, and
that the model saw every document and the query, shows it is the one used.
"""

from __future__ import annotations

import indexplug
import pytest
from indexplug.errors import IndexFailedError, InvalidRequest
from indexplug_langchain import IndexplugRetriever, IndexplugVectorStore, langchain_embedder
from langchain_core.embeddings import Embeddings

DOCS = {
    "pie": "Apple pie is baked with sliced apples and cinnamon.",
    "engine": "A diesel engine compresses air until the fuel ignites.",
    "waves": "Ocean waves are raised by the wind over open water.",
}
VECTORS = {
    DOCS["pie"]: [1.0, 0.0, 0.0],
    DOCS["engine"]: [0.0, 1.0, 0.0],
    DOCS["waves"]: [0.0, 0.0, 1.0],
    "fruit dessert": [0.1, 0.9, 0.2],
    "sea": [0.0, 0.2, 0.9],
}


@pytest.fixture(autouse=True)
def _own_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """The embedding cache in this test's home (conftest), so the model is called afresh."""
    monkeypatch.delenv("INDEXPLUG_EMBED_CACHE", raising=False)


class HandPicked(Embeddings):
    """A deterministic model with a vector per known text (anything else: the last axis)."""

    def __init__(self) -> None:
        self.documents: list[str] = []
        self.queries: list[str] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.documents.extend(texts)
        return [VECTORS.get(t, [0.0, 0.0, 1.0]) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        self.queries.append(text)
        return VECTORS.get(text, [0.0, 0.0, 1.0])


class Other(HandPicked):
    """Another model of the same dimension."""


def _store(embedding: Embeddings, **kw: object) -> IndexplugVectorStore:
    # chroma configured with its MiniLM: the user's model must win over it
    options = {"embedder": "sentence-transformers:all-MiniLM-L6-v2"}
    return IndexplugVectorStore.from_backend("chroma", "mine", options, embedding=embedding, **kw)


def test_chroma_embeds_documents_and_queries_with_the_users_model() -> None:
    model = HandPicked()
    store = IndexplugVectorStore.from_texts(
        list(DOCS.values()),
        model,
        ids=list(DOCS),
        index="mine",
        backend="chroma",
        options={"embedder": "sentence-transformers:all-MiniLM-L6-v2"},
    )
    assert sorted(model.documents) == sorted(DOCS.values())
    hits = store.similarity_search("fruit dessert", k=3)
    assert [d.id for d in hits] == ["engine", "waves", "pie"]
    assert "fruit dessert" in model.queries
    # the LCEL retriever of the store embeds with it too
    assert [d.id for d in store.as_retriever(search_kwargs={"k": 1}).invoke("sea")] == ["waves"]
    assert model.queries[-1] == "sea"
    assert store.embeddings is model
    store.guard.close()


def test_the_retriever_embeds_queries_with_the_users_model() -> None:
    model = HandPicked()
    _store(model).add_texts(list(DOCS.values()), ids=list(DOCS))
    retriever = IndexplugRetriever.from_backend("chroma", "mine", embedding=model, k=1)
    assert [d.id for d in retriever.invoke("fruit dessert")] == ["engine"]
    assert model.queries[-1] == "fruit dessert"


def test_reopening_the_index_with_another_model_is_a_typed_error() -> None:
    _store(HandPicked()).add_texts(list(DOCS.values()), ids=list(DOCS))
    other = _store(Other())
    with pytest.raises(IndexFailedError) as raised:
        other.similarity_search("sea", k=1)
    assert getattr(raised.value.outcome, "error_type", None) == "EmbedderMismatch"
    assert "HandPicked" in str(raised.value) and "Other" in str(raised.value)
    with pytest.raises(IndexFailedError):
        other.add_texts(["more"], ids=["more"])
    # the same model, in a new store object, opens it
    assert [d.id for d in _store(HandPicked()).similarity_search("sea", k=1)] == ["waves"]


def test_the_identity_recorded_names_the_class_and_the_model() -> None:
    class Named(HandPicked):
        model = "my-fine-tune-v2"

    emb = langchain_embedder(Named())
    assert emb.name.endswith("Named/my-fine-tune-v2") and emb.name.startswith("langchain:")
    assert emb.dim == 3
    assert langchain_embedder(Named(), name="mine:v2", dim=3).name == "mine:v2"


def test_a_guard_opened_without_the_model_is_refused_not_used_with_another() -> None:
    guard = indexplug.open_backend("chroma", {"embedder": "hashing:default"})
    with pytest.raises(InvalidRequest, match="opened without this embedding"):
        IndexplugVectorStore(guard, "mine", embedding=HandPicked())
    model = HandPicked()
    given = indexplug.open_backend("chroma", embedder=langchain_embedder(model))
    store = IndexplugVectorStore(given, "mine", embedding=model)
    store.add_texts(list(DOCS.values()), ids=list(DOCS))
    assert [d.id for d in store.similarity_search("fruit dessert", k=1)] == ["engine"]
    guard.close()
    given.close()


def test_a_lexical_backend_never_calls_the_model() -> None:
    model = HandPicked()
    store = IndexplugVectorStore.from_backend("sqlite-fts5", "mine", embedding=model)
    store.add_texts(list(DOCS.values()), ids=list(DOCS))
    assert [d.id for d in store.similarity_search("apples", k=3)] == ["pie"]
    assert model.documents == [] and model.queries == []
