"""A LlamaIndex ``BaseEmbedding`` as an indexplug embedder, so a dense backend embeds with it.

The store opens its backend with this (``indexplug.open_backend(..., embedder=...)``): chroma
then embeds nodes with ``get_text_embedding_batch`` and queries with ``get_query_embedding``
of the user's model, and records its identity (:func:`embedder_name`) and dimension with the
index; reopening that index with another model is refused (``IndexFailedError``, error type
``EmbedderMismatch``).  A lexical backend never calls it.
"""

from __future__ import annotations

from typing import Any

from indexplug.embedders.wrapped import FunctionEmbedder
from llama_index.core.base.embeddings.base import BaseEmbedding


def embedder_name(embed_model: BaseEmbedding) -> str:
    """``llamaindex:module.Class`` (``/model_name`` where the model names itself): stable
    across processes for the same model, different for another class or model."""
    cls = type(embed_model)
    name = f"llamaindex:{cls.__module__}.{cls.__qualname__}"
    model = getattr(embed_model, "model_name", None)
    if isinstance(model, str) and model and model != "unknown":
        return f"{name}/{model}"
    return name


def llamaindex_embedder(
    embed_model: BaseEmbedding, *, name: str | None = None, dim: int | None = None
) -> FunctionEmbedder:
    """``embed_model`` as an indexplug embedder.  ``name`` overrides the identity recorded
    with an index (:func:`embedder_name`); ``dim`` saves the one call that measures it."""
    if not isinstance(embed_model, BaseEmbedding):
        kind = type(embed_model).__name__
        raise TypeError(f"embed_model must be a LlamaIndex BaseEmbedding, not {kind}")

    def documents(texts: list[str]) -> list[list[float]]:
        return embed_model.get_text_embedding_batch(texts)

    def query(text: str) -> list[float]:
        return embed_model.get_query_embedding(text)

    return FunctionEmbedder(
        name or embedder_name(embed_model), documents, query, dim=dim, source=embed_model
    )


def is_wrapped(guard: Any, embed_model: BaseEmbedding) -> bool:
    """Whether ``guard`` was opened with an embedder wrapping ``embed_model`` (that object,
    or one of its identity)."""
    given = getattr(guard, "embedder", None)
    if given is None:
        return False
    return getattr(given, "source", None) is embed_model or given.name == embedder_name(embed_model)
