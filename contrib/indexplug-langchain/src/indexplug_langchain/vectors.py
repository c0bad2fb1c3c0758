"""What a LangChain vector store does with vectors: search by a vector, and maximal marginal
relevance (``max_marginal_relevance_search``, ``search_type="mmr"``), sync and async.

They need a backend that claims indexplug's ``vectors`` capability (chroma, usearch): a search
by vector goes to ``Guard.search_vector``, and MMR asks it for ``fetch_k`` hits with their
stored vectors, then picks ``k`` with LangChain's own ``maximal_marginal_relevance``.  The
query vector of a text comes from the ``embedding`` the store was given, else from the
backend's embedder (``Guard.query_vector``).  The vectors are stated to be of the store's
embedding model, so vectors of another model than the index's are refused, never compared.
On a backend without the capability each raises :class:`NoVectors`, naming it.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import indexplug
from indexplug.errors import NotSupported
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from indexplug_langchain._convert import (
    filter_argument,
    nothing_to_find,
    passage_document,
    raise_outcome,
    refuse_kwargs,
)
from indexplug_langchain.embedder import embedder_name

if TYPE_CHECKING:
    from indexplug.outcomes import Hit


class NoVectors(NotSupported, NotImplementedError):
    """A search that needs vectors (maximal marginal relevance, search by a given vector) on a
    backend that does not claim the ``vectors`` capability (a lexical one: sqlite-fts5).  A
    ``NotImplementedError`` too, which is what LangChain's own stores raise for it."""

    def __init__(self, backend: str, operation: str) -> None:
        super().__init__(backend, "vectors", operation)
        self.args = (
            f"{operation} needs a backend that claims the 'vectors' capability (chroma, "
            f"usearch); backend '{backend}' does not. Use similarity_search, or "
            'as_retriever(search_type="similarity")',
        )

    def __str__(self) -> str:
        return str(self.args[0])


class VectorSearches:
    """The vector searches of :class:`~indexplug_langchain.IndexplugVectorStore` (a mixin:
    listed before LangChain's ``VectorStore``, whose versions raise)."""

    guard: indexplug.Guard
    index: str
    deadline_s: float | None
    _embedding: Embeddings | None

    def _search_args(self, k: int, kwargs: dict[str, Any]) -> dict[str, Any]:
        """The guard's search arguments for ``k`` and LangChain's keywords (``filter=``; any
        other keyword is refused): shared by the text and the vector searches."""
        filters = filter_argument(kwargs, None)
        refuse_kwargs(kwargs, "similarity_search")
        return {"top_k": k, "filters": filters, "deadline_s": self.deadline_s}

    # -- plumbing --------------------------------------------------------------------------
    def _needs_vectors(self, operation: str) -> None:
        if not getattr(self.guard.capabilities, "vectors", False):
            raise NoVectors(self.guard.name, operation)

    def _stated(self) -> str | None:
        """The identity of the store's embedding model (None: the index's own embedder): the
        name the backend's embedder was given when it wraps that model."""
        if self._embedding is None:
            return None
        given = getattr(self.guard, "embedder", None)
        if given is not None and getattr(given, "source", None) is self._embedding:
            return str(given.name)
        return embedder_name(self._embedding)

    def _query_vector(self, query: str) -> Any:
        if self._embedding is not None:
            return self._embedding.embed_query(query)
        return self.guard.query_vector(query)

    async def _aquery_vector(self, query: str) -> Any:
        if self._embedding is not None:
            return await self._embedding.aembed_query(query)
        return await asyncio.to_thread(self.guard.query_vector, query)

    def _vector_args(self, k: int, kwargs: dict[str, Any]) -> dict[str, Any]:
        args = self._search_args(k, kwargs)
        args["embedder"] = self._stated()
        return args

    @staticmethod
    def _hits(outcome: Any) -> list[Hit]:
        if isinstance(outcome, indexplug.Searched):
            return list(outcome.hits)
        if isinstance(outcome, (indexplug.NoMatch, indexplug.IndexEmpty)):
            return []
        raise_outcome(outcome)

    @staticmethod
    def _mmr(query: Any, hits: list[Hit], k: int, lambda_mult: float) -> list[Document]:
        import numpy as np
        from langchain_core.vectorstores.utils import maximal_marginal_relevance

        if not hits:
            return []
        vectors = [list(h.vector or ()) for h in hits]
        chosen = maximal_marginal_relevance(
            np.asarray(query, dtype=np.float32), vectors, lambda_mult=lambda_mult, k=k
        )
        return [passage_document(hits[i].passage) for i in chosen]

    @staticmethod
    def _fetch(k: int, fetch_k: int) -> int:
        if type(fetch_k) is not int or fetch_k < 1:
            raise indexplug.InvalidRequest(
                f"fetch_k must be a positive integer, got {fetch_k!r}", field="fetch_k"
            )
        return max(k, fetch_k)

    # -- search by vector ------------------------------------------------------------------
    def similarity_search_with_score_by_vector(
        self, embedding: list[float], k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """The ``k`` documents nearest ``embedding`` (a vector of the store's model), with
        their scores on the backend's scale; ``filter=`` as in ``similarity_search``."""
        self._needs_vectors("search by vector (similarity_search_by_vector)")
        args = self._vector_args(k, kwargs)
        if nothing_to_find(None, k):
            return []
        out = self.guard.search_vector(self.index, embedding, **args)
        return [(passage_document(h.passage), h.score) for h in self._hits(out)]

    async def asimilarity_search_with_score_by_vector(
        self, embedding: list[float], k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """:meth:`similarity_search_with_score_by_vector` through ``asearch_vector``."""
        self._needs_vectors("search by vector (similarity_search_by_vector)")
        args = self._vector_args(k, kwargs)
        if nothing_to_find(None, k):
            return []
        out = await self.guard.asearch_vector(self.index, embedding, **args)
        return [(passage_document(h.passage), h.score) for h in self._hits(out)]

    def similarity_search_by_vector(
        self, embedding: list[float], k: int = 4, **kwargs: Any
    ) -> list[Document]:
        """The ``k`` documents nearest ``embedding`` (see
        :meth:`similarity_search_with_score_by_vector`)."""
        return [d for d, _ in self.similarity_search_with_score_by_vector(embedding, k, **kwargs)]

    async def asimilarity_search_by_vector(
        self, embedding: list[float], k: int = 4, **kwargs: Any
    ) -> list[Document]:
        """:meth:`similarity_search_by_vector` through ``asearch_vector``."""
        found = await self.asimilarity_search_with_score_by_vector(embedding, k, **kwargs)
        return [d for d, _ in found]

    # -- maximal marginal relevance --------------------------------------------------------
    def max_marginal_relevance_search_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        **kwargs: Any,
    ) -> list[Document]:
        """``k`` documents among the ``fetch_k`` nearest ``embedding``, each chosen for its
        similarity to the query less ``1 - lambda_mult`` times its similarity to those
        chosen before (LangChain's ``maximal_marginal_relevance``, on the stored vectors)."""
        self._needs_vectors("maximal marginal relevance search (search_type='mmr')")
        args = self._vector_args(self._fetch(k, fetch_k), kwargs)
        if nothing_to_find(None, k):
            return []
        out = self.guard.search_vector(self.index, embedding, with_vectors=True, **args)
        return self._mmr(embedding, self._hits(out), k, lambda_mult)

    async def amax_marginal_relevance_search_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        **kwargs: Any,
    ) -> list[Document]:
        """:meth:`max_marginal_relevance_search_by_vector` through ``asearch_vector``."""
        self._needs_vectors("maximal marginal relevance search (search_type='mmr')")
        args = self._vector_args(self._fetch(k, fetch_k), kwargs)
        if nothing_to_find(None, k):
            return []
        out = await self.guard.asearch_vector(self.index, embedding, with_vectors=True, **args)
        return self._mmr(embedding, self._hits(out), k, lambda_mult)

    def max_marginal_relevance_search(
        self,
        query: str,
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        **kwargs: Any,
    ) -> list[Document]:
        """:meth:`max_marginal_relevance_search_by_vector` for the query vector of ``query``
        (the store's ``embedding``, else the backend's embedder); what ``search_type="mmr"``
        runs."""
        self._needs_vectors("maximal marginal relevance search (search_type='mmr')")
        if nothing_to_find(query, k):
            self._vector_args(self._fetch(k, fetch_k), kwargs)  # refuse bad arguments anyway
            return []
        vector = self._query_vector(query)
        return self.max_marginal_relevance_search_by_vector(
            vector, k, fetch_k, lambda_mult, **kwargs
        )

    async def amax_marginal_relevance_search(
        self,
        query: str,
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        **kwargs: Any,
    ) -> list[Document]:
        """:meth:`max_marginal_relevance_search` through ``asearch_vector``."""
        self._needs_vectors("maximal marginal relevance search (search_type='mmr')")
        if nothing_to_find(query, k):
            self._vector_args(self._fetch(k, fetch_k), kwargs)
            return []
        vector = await self._aquery_vector(query)
        return await self.amax_marginal_relevance_search_by_vector(
            vector, k, fetch_k, lambda_mult, **kwargs
        )
