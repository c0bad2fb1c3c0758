"""A Haystack text/document embedder pair as an indexplug embedder, so a dense backend
embeds with the user's model.

The store opens its backend with this (``indexplug.open_backend(..., embedder=...)``): chroma
then embeds documents with the document embedder (``run(documents=...)``) and queries with
the text embedder (``run(text=...)``), and records their identity (:func:`embedder_name`) and
dimension with the index; reopening that index with another model is refused
(``IndexFailedError``, error type ``EmbedderMismatch``).  Each component's ``warm_up`` runs
once, before its first use.  A lexical backend never calls them.
"""

from __future__ import annotations

import threading
from typing import Any

from haystack.dataclasses import Document
from indexplug.embedders.wrapped import FunctionEmbedder

MODEL_ATTRIBUTES = ("model", "model_name", "model_id", "azure_deployment")
"""Where Haystack's embedders keep the model's name; the first string one joins the
identity."""


def _identity(component: Any) -> str:
    cls = type(component)
    name = f"{cls.__module__}.{cls.__qualname__}"
    for attribute in MODEL_ATTRIBUTES:
        model = getattr(component, attribute, None)
        if isinstance(model, str) and model:
            return f"{name}/{model}"
    return name


def embedder_name(text_embedder: Any, document_embedder: Any) -> str:
    """``haystack:<document embedder>;<text embedder>``, each ``module.Class[/model]``."""
    return f"haystack:{_identity(document_embedder)};{_identity(text_embedder)}"


def _check(component: Any, what: str) -> None:
    if not callable(getattr(component, "run", None)):
        raise TypeError(f"{what} must be a Haystack component with run(), not {type(component)}")


def haystack_embedder(
    text_embedder: Any,
    document_embedder: Any,
    *,
    name: str | None = None,
    dim: int | None = None,
) -> FunctionEmbedder:
    """The pair as an indexplug embedder (``source`` is the pair).  ``name`` overrides the
    identity recorded with an index (:func:`embedder_name`); ``dim`` saves the one call that
    measures it."""
    _check(text_embedder, "text_embedder")
    _check(document_embedder, "document_embedder")
    warmed: set[int] = set()
    lock = threading.Lock()

    def warm(component: Any) -> Any:
        with lock:
            if id(component) not in warmed:
                warm_up = getattr(component, "warm_up", None)
                if callable(warm_up):
                    warm_up()
                warmed.add(id(component))
        return component

    def documents(texts: list[str]) -> list[list[float]]:
        out = warm(document_embedder).run(documents=[Document(content=t) for t in texts])
        embedded = out["documents"]
        return [list(d.embedding) if d.embedding is not None else [] for d in embedded]

    def query(text: str) -> list[float]:
        return list(warm(text_embedder).run(text=text)["embedding"])

    return FunctionEmbedder(
        name or embedder_name(text_embedder, document_embedder),
        documents,
        query,
        dim=dim,
        source=(text_embedder, document_embedder),
    )
