"""A Haystack embedding retriever over an :class:`IndexplugDocumentStore`: the component an
``embedder -> retriever`` pipeline maps to.

``run(query_embedding, top_k, filters)`` answers ``{"documents": [...]}``: the documents whose
stored vectors are nearest the query embedding (``Guard.search_vector``), with
``Document.score`` and the adapter's fields under ``meta["indexplug"]``, as
:class:`~indexplug_haystack.retriever.IndexplugRetriever` answers.  The embedding is stated to
be of the store's embedder pair when it has one, else of the index's own embedder; one of
another length or model is refused (``BAD_REQUEST``).  It needs a backend that claims the
``vectors`` capability (chroma, usearch): over another, construction raises
:class:`~indexplug_haystack.vectors.NoVectors`.  No match, an empty store and ``top_k=0`` are
an empty list, as with Haystack's ``InMemoryEmbeddingRetriever``.
"""

from __future__ import annotations

from typing import Any

from haystack import component, default_from_dict
from haystack.dataclasses import Document
from haystack.document_stores.types import FilterPolicy
from indexplug.guard import MAX_TOP_K

from indexplug_haystack.document_store import IndexplugDocumentStore
from indexplug_haystack.filters import Plan
from indexplug_haystack.retriever import _WIDEN, RETRIEVER_MODULE, RetrieverSettings, _answer
from indexplug_haystack.vectors import NoVectors, stated_embedder


@component
class IndexplugEmbeddingRetriever(RetrieverSettings):
    """Retrieves documents from an :class:`IndexplugDocumentStore` by a query embedding.

    ``filters`` and ``filter_policy`` as for
    :class:`~indexplug_haystack.retriever.IndexplugRetriever`."""

    # the public home Haystack trusts when loading a saved pipeline (set before ``@component``
    # registers the class under its module's name)
    __module__ = RETRIEVER_MODULE

    def __init__(
        self,
        document_store: IndexplugDocumentStore,
        *,
        top_k: int = 10,
        filters: dict[str, Any] | None = None,
        filter_policy: FilterPolicy | str = FilterPolicy.REPLACE,
        deadline_s: float | None = None,
    ) -> None:
        if not isinstance(document_store, IndexplugDocumentStore):
            raise ValueError("document_store must be an IndexplugDocumentStore")
        if not getattr(document_store.guard.capabilities, "vectors", False):
            raise NoVectors(document_store.guard.name, "retrieve by a query embedding")
        self._configure(document_store, top_k, filters, filter_policy, deadline_s)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> IndexplugEmbeddingRetriever:
        return default_from_dict(cls, cls._revive(data))

    def _args(self, ask: int, plan: Plan) -> dict[str, Any]:
        store = self.document_store
        return {
            "top_k": ask,
            "filters": plan.pushdown,
            "embedder": stated_embedder(store),
            "deadline_s": self.deadline_s if self.deadline_s is not None else store.deadline_s,
        }

    @component.output_types(documents=list[Document])
    def run(
        self,
        query_embedding: list[float],
        top_k: int | None = None,
        filters: dict[str, Any] | None = None,
    ) -> dict[str, list[Document]]:
        """The ``top_k`` documents nearest ``query_embedding`` that pass ``filters``."""
        k, merged, plan = self._request(top_k, filters)
        if k == 0:
            return {"documents": []}
        store = self.document_store
        ask = k
        while True:
            out = store.guard.search_vector(store.index, query_embedding, **self._args(ask, plan))
            done, docs = _answer(out, k, ask, merged, plan)
            if done:
                return {"documents": docs}
            ask = min(ask * _WIDEN, MAX_TOP_K)

    @component.output_types(documents=list[Document])
    async def run_async(
        self,
        query_embedding: list[float],
        top_k: int | None = None,
        filters: dict[str, Any] | None = None,
    ) -> dict[str, list[Document]]:
        """:meth:`run` on the guard's coroutine (the event loop is never blocked)."""
        k, merged, plan = self._request(top_k, filters)
        if k == 0:
            return {"documents": []}
        store = self.document_store
        ask = k
        while True:
            out = await store.guard.asearch_vector(
                store.index, query_embedding, **self._args(ask, plan)
            )
            done, docs = _answer(out, k, ask, merged, plan)
            if done:
                return {"documents": docs}
            ask = min(ask * _WIDEN, MAX_TOP_K)
