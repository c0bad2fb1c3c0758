"""A LangChain retriever whose failures are exceptions, never an empty list.

LangChain retrievers return ``list[Document]``: an empty list would hide an index that is down
or timed out.  This retriever keeps indexplug's honesty in that shape: hits become documents;
``NO_MATCH`` (the index answered, nothing matched) and ``INDEX_EMPTY`` (nothing indexed yet)
are ``[]``, as from ``vectorstore.as_retriever()`` and LangChain's in-memory stores, and so is a
search for ``k=0`` or a query with no word in it; anything else raises the typed
:class:`indexplug.OutcomeError` subclass for its code.  A document's metadata is the
passage's own; the adapter's fields (rank, score, scale, span, source, passage id, untrusted)
are under the one key ``"indexplug"``.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import indexplug
from indexplug.config import open_index
from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field, model_validator

from indexplug_langchain._convert import (
    filter_argument,
    hit_document,
    nothing_to_find,
    raise_outcome,
    refuse_kwargs,
)
from indexplug_langchain.embedder import langchain_embedder


def hit_to_document(hit: indexplug.Hit) -> Document:
    """A hit as a retriever's document (the user's metadata, the adapter's under
    ``"indexplug"``)."""
    return hit_document(hit)


DEPRECATED_BACKEND = (
    "'backend' as the retriever's guard is deprecated: give guard=... (the name every indexplug "
    "adapter uses for the indexplug.Guard it wraps)"
)


class IndexplugRetriever(BaseRetriever):
    """Retrieve from index ``index`` of a guarded backend (``indexplug.open_backend(...)``).

    ``k`` (``top_k`` is taken too) is how many documents at most, ``filters`` an indexplug
    operator filter (``{"year": {"$gte": 2020}}``); both can be given per call:
    ``retriever.invoke("query", k=2, filters={...})``.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    guard: Any = Field(
        description="An indexplug.Guard, e.g. indexplug.open_backend('sqlite-fts5')."
    )
    index: str
    k: int = 4
    filters: dict[str, Any] | None = None
    deadline_s: float | None = None
    empty_is_error: bool = False
    """``True`` makes an index with nothing in it raise ``IndexEmptyError`` (for a deployment
    where a retriever over an index never filled is a mistake); by default it answers ``[]``,
    as LangChain's own stores do."""

    @model_validator(mode="before")
    @classmethod
    def _backend(cls, data: Any) -> Any:
        """``backend=`` is the deprecated name of ``guard=`` (in the vector store it names a
        backend, so the retriever now uses the same word as every adapter: ``guard``)."""
        if isinstance(data, dict) and "backend" in data:
            if "guard" in data:
                raise ValueError("give guard=... only ('backend' is its deprecated name)")
            warnings.warn(DEPRECATED_BACKEND, DeprecationWarning, stacklevel=4)
            data = {**data, "guard": data["backend"]}
            del data["backend"]
        return data

    @property
    def backend(self) -> Any:
        """The older name of :attr:`guard` (deprecated)."""
        warnings.warn(DEPRECATED_BACKEND, DeprecationWarning, stacklevel=2)
        return self.guard

    @model_validator(mode="before")
    @classmethod
    def _top_k(cls, data: Any) -> Any:
        if isinstance(data, dict) and "top_k" in data:
            if "k" in data:
                raise ValueError("give k or top_k, not both")
            data = {**data, "k": data["top_k"]}
            del data["top_k"]
        return data

    @property
    def top_k(self) -> int:
        """The same as ``k`` (its earlier name)."""
        return self.k

    @classmethod
    def from_backend(
        cls,
        backend_name: str,
        index: str,
        options: dict[str, Any] | None = None,
        *,
        embedding: Embeddings | None = None,
        **kw: Any,
    ) -> IndexplugRetriever:
        """Over backend ``backend_name`` opened with ``options``; with ``embedding`` (a
        LangChain model), a dense backend embeds queries (and documents) with it."""
        embedder = None if embedding is None else langchain_embedder(embedding)
        guard = indexplug.open_backend(backend_name, options, embedder=embedder)
        return cls(guard=guard, index=index, **kw)

    @classmethod
    def from_config(
        cls,
        index: str,
        config_path: str | Path | None = None,
        *,
        embedding: Embeddings | None = None,
        **kw: Any,
    ) -> IndexplugRetriever:
        """Over index ``index`` of an ``indexplug.toml`` (``config_path``, else the file the
        CLI would use: ``INDEXPLUG_CONFIG``, ``./indexplug.toml``, the user folder); with
        ``embedding``, as :meth:`from_backend`."""
        embedder = None if embedding is None else langchain_embedder(embedding)
        target = open_index(index, config_path, embedder=embedder)
        return cls(guard=target.guard, index=target.index, **kw)

    def _args(self, kwargs: dict[str, Any]) -> tuple[int, Any]:
        k = kwargs.pop("k", kwargs.pop("top_k", self.k))
        filters = filter_argument(kwargs, self.filters)
        refuse_kwargs(kwargs, "IndexplugRetriever.invoke")
        return k, filters

    def _documents(self, outcome: Any) -> list[Document]:
        if isinstance(outcome, indexplug.Searched):
            return [hit_document(h) for h in outcome.hits]
        if isinstance(outcome, indexplug.NoMatch) or (
            isinstance(outcome, indexplug.IndexEmpty) and not self.empty_is_error
        ):
            return []
        raise_outcome(outcome)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        k, filters = self._args(kwargs)
        if nothing_to_find(query, k):
            return []
        outcome = self.guard.search(
            self.index, query, top_k=k, deadline_s=self.deadline_s, filters=filters
        )
        return self._documents(outcome)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        k, filters = self._args(kwargs)
        if nothing_to_find(query, k):
            return []
        outcome = await self.guard.asearch(
            self.index, query, top_k=k, deadline_s=self.deadline_s, filters=filters
        )
        return self._documents(outcome)
