"""A LlamaIndex retriever whose failures are exceptions, never an empty list.

Hits become ``NodeWithScore`` (the node a passage keeps, see :mod:`indexplug_llamaindex.nodes`,
with the backend's score); ``NO_MATCH``, an empty index, ``similarity_top_k=0`` and a query with
no word in it are ``[]``, as from ``VectorStoreIndex(...).as_retriever()``; a failed,
timed-out or unavailable index raises the typed :class:`indexplug.OutcomeError` subclass for
its code.  The adapter's fields of each hit are under the node's ``indexplug`` metadata,
which neither the LLM nor an embedder sees.  ``aretrieve`` awaits the guard's ``asearch``: it
never blocks the event loop.
"""

from __future__ import annotations

import warnings
from typing import Any

import indexplug
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle

from indexplug_llamaindex.filters import FilterInput, translate
from indexplug_llamaindex.nodes import hit_to_node

DEFAULT_TOP_K = 4


def hits_to_nodes(
    outcome: indexplug.SearchOutcome, *, empty_is_error: bool = False
) -> list[NodeWithScore]:
    """The nodes of a search outcome: hits for ``SEARCHED``, ``[]`` for ``NO_MATCH`` and for
    ``INDEX_EMPTY`` (which raises when ``empty_is_error`` is true); any other outcome raises
    its typed :class:`indexplug.OutcomeError`."""
    if isinstance(outcome, indexplug.Searched):
        return [NodeWithScore(node=hit_to_node(h), score=h.score) for h in outcome.hits]
    indexplug.raise_for_outcome(outcome, empty_is_error=empty_is_error)
    return []


def nothing_to_find(query: Any, top_k: Any) -> bool:
    """Whether a search has an empty answer without asking the index: ``top_k`` is 0, or the
    query is text with no word in it (empty, blank, only punctuation).  A query that is not
    text, or a negative ``top_k``, still goes to the guard and is refused there."""
    if type(top_k) is int and top_k == 0:
        return True
    return isinstance(query, str) and not any(ch.isalnum() for ch in query)


DEPRECATED_BACKEND = (
    "'backend' as the retriever's guard is deprecated: give guard=... (the name every indexplug "
    "adapter uses for the indexplug.Guard it wraps)"
)


def one_guard(guard: indexplug.Guard | None, backend: indexplug.Guard | None) -> indexplug.Guard:
    """The guard a retriever wraps, given as ``guard`` or by its deprecated name ``backend``."""
    if backend is not None:
        if guard is not None:
            raise TypeError("give guard=... only ('backend' is its deprecated name)")
        warnings.warn(DEPRECATED_BACKEND, DeprecationWarning, stacklevel=3)
        return backend
    if guard is None:
        raise TypeError("IndexplugRetriever needs the indexplug.Guard it searches: guard=...")
    return guard


class IndexplugRetriever(BaseRetriever):
    """Retrieve from index ``index`` of a guarded backend (``guard``, from
    ``indexplug.open_backend(...)``; ``backend=`` is its deprecated name).

    ``similarity_top_k`` (``top_k`` is the older name of the same setting) bounds the hits;
    ``filters`` are LlamaIndex ``MetadataFilters`` or an indexplug filter
    (``{"year": {"$gte": 2020}}``), translated exactly or refused
    (:class:`indexplug_llamaindex.UnsupportedFilter`).
    """

    def __init__(
        self,
        guard: indexplug.Guard | None = None,
        index: str | None = None,
        *,
        backend: indexplug.Guard | None = None,
        similarity_top_k: int | None = None,
        top_k: int | None = None,
        filters: FilterInput = None,
        deadline_s: float | None = None,
        empty_is_error: bool = False,
        **kwargs: Any,
    ) -> None:
        guard = one_guard(guard, backend)
        if index is None:
            raise TypeError("IndexplugRetriever needs the index's name: index=...")
        indexplug.validate_index_name(index)
        if similarity_top_k is not None and top_k is not None and similarity_top_k != top_k:
            raise indexplug.InvalidRequest(
                f"similarity_top_k={similarity_top_k} and top_k={top_k} differ (top_k is the "
                "older name of similarity_top_k: give one)",
                field="similarity_top_k",
            )
        k = similarity_top_k if similarity_top_k is not None else top_k
        self.guard = guard
        self.index = index
        self.similarity_top_k = DEFAULT_TOP_K if k is None else k
        self.filters = translate(filters)
        self.deadline_s = deadline_s
        self.empty_is_error = empty_is_error
        super().__init__(**kwargs)

    @property
    def backend(self) -> indexplug.Guard:
        """The older name of :attr:`guard` (deprecated: it meant a backend's name in another
        adapter)."""
        warnings.warn(DEPRECATED_BACKEND, DeprecationWarning, stacklevel=2)
        return self.guard

    @property
    def top_k(self) -> int:
        """The older name of :attr:`similarity_top_k`."""
        return self.similarity_top_k

    def search_outcome(self, query: str) -> indexplug.SearchOutcome:
        """The guard's outcome of the search :meth:`retrieve` makes."""
        return self.guard.search(
            self.index,
            query,
            top_k=self.similarity_top_k,
            filters=self.filters,
            deadline_s=self.deadline_s,
        )

    async def asearch_outcome(self, query: str) -> indexplug.SearchOutcome:
        """:meth:`search_outcome` through the guard's ``asearch``."""
        return await self.guard.asearch(
            self.index,
            query,
            top_k=self.similarity_top_k,
            filters=self.filters,
            deadline_s=self.deadline_s,
        )

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        if nothing_to_find(query_bundle.query_str, self.similarity_top_k):
            return []
        outcome = self.search_outcome(query_bundle.query_str)
        return hits_to_nodes(outcome, empty_is_error=self.empty_is_error)

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        if nothing_to_find(query_bundle.query_str, self.similarity_top_k):
            return []
        outcome = await self.asearch_outcome(query_bundle.query_str)
        return hits_to_nodes(outcome, empty_is_error=self.empty_is_error)
