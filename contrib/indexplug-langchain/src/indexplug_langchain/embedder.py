"""A LangChain ``Embeddings`` as an indexplug embedder, so a dense backend embeds with it.

The store and retriever open their backend with this (``indexplug.open_backend(...,
embedder=...)``): chroma then embeds documents with ``embed_documents`` and queries with
``embed_query`` of the user's model, and records its identity (:func:`embedder_name`) and
dimension with the index; reopening that index with another model is refused
(``IndexFailedError``, error type ``EmbedderMismatch``).  A lexical backend never calls it.
"""

from __future__ import annotations

from typing import Any

from indexplug.embedders.wrapped import FunctionEmbedder
from langchain_core.embeddings import Embeddings

MODEL_ATTRIBUTES = ("model", "model_name", "model_id", "deployment")
"""Where LangChain's integrations keep the model's name; the first string one joins the
embedder's identity."""


def embedder_name(embeddings: Embeddings, provider: str = "langchain") -> str:
    """``PROVIDER:module.Class`` (``/model`` where the object names its model): stable across
    processes for the same model, different for another class or model."""
    cls = type(embeddings)
    name = f"{provider}:{cls.__module__}.{cls.__qualname__}"
    for attribute in MODEL_ATTRIBUTES:
        model = getattr(embeddings, attribute, None)
        if isinstance(model, str) and model:
            return f"{name}/{model}"
    return name


def langchain_embedder(
    embeddings: Embeddings, *, name: str | None = None, dim: int | None = None
) -> FunctionEmbedder:
    """``embeddings`` as an indexplug embedder.  ``name`` overrides the identity recorded with
    an index (:func:`embedder_name`); ``dim`` saves the one call that measures it."""
    if not isinstance(embeddings, Embeddings):
        raise TypeError(
            f"embedding must be a LangChain Embeddings, not {type(embeddings).__name__}"
        )

    def documents(texts: list[str]) -> list[list[float]]:
        return embeddings.embed_documents(texts)

    def query(text: str) -> list[float]:
        return embeddings.embed_query(text)

    return FunctionEmbedder(
        name or embedder_name(embeddings), documents, query, dim=dim, source=embeddings
    )


def is_wrapped(guard: Any, embeddings: Embeddings) -> bool:
    """Whether ``guard`` was opened with an embedder wrapping ``embeddings`` (that object, or
    one of its identity)."""
    given = getattr(guard, "embedder", None)
    if given is None:
        return False
    return getattr(given, "source", None) is embeddings or given.name == embedder_name(embeddings)
