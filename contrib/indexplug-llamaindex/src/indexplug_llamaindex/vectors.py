"""What the LlamaIndex store does with vectors: a query by ``query_embedding``, and
``VectorStoreQueryMode.MMR`` (maximal marginal relevance), sync and async.

Both need a backend that claims indexplug's ``vectors`` capability (chroma, usearch): a query
with an embedding goes to ``Guard.search_vector``, stated to be of the store's ``embed_model``
(or, without one, of the index's own embedder), so vectors of another model are refused, never
compared.  MMR asks for ``similarity_top_k * mmr_prefetch_factor`` hits with their stored
vectors and picks ``similarity_top_k`` with LlamaIndex's own ``get_top_k_mmr_embeddings``
(``mmr_threshold``: the weight of relevance against diversity, 0.5 when not given); its query
vector is the ``query_embedding`` given, else the ``embed_model``'s, else the backend's
embedder's (``Guard.query_vector``).  On a backend without the capability both raise
:class:`NoVectors`, naming it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import indexplug
from indexplug.errors import NotSupported
from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryMode

if TYPE_CHECKING:
    from llama_index.core.schema import BaseNode

    from indexplug_llamaindex.store import IndexplugVectorStore

MMR_PREFETCH_FACTOR = 4
"""Candidates per result an MMR query reads (``mmr_prefetch_factor=`` overrides it)."""
DEFAULT_MMR_THRESHOLD = 0.5


class NoVectors(NotSupported):
    """A query by embedding, or in MMR mode, on a backend that does not claim the ``vectors``
    capability (a lexical one: sqlite-fts5)."""

    def __init__(self, backend: str, operation: str) -> None:
        super().__init__(backend, "vectors", operation)


def wants_vectors(query: VectorStoreQuery) -> bool:
    """Whether ``query`` is answered by vector: MMR mode, or an embedding and no text."""
    if query.mode == VectorStoreQueryMode.MMR:
        return True
    if query.mode == VectorStoreQueryMode.HYBRID:  # the backend's own hybrid search
        return False
    return query.query_embedding is not None and query.query_str is None


def _operation(query: VectorStoreQuery) -> str:
    if query.mode == VectorStoreQueryMode.MMR:
        return "answer a query in MMR mode"
    return "answer a query by query_embedding"


def _stated(store: IndexplugVectorStore) -> str | None:
    """The identity the query vector is of: the backend's embedder when it wraps the store's
    ``embed_model``, that model's name otherwise; None (the index's own) without one."""
    from indexplug_llamaindex.embedder import embedder_name

    model = store.embed_model
    if model is None:
        return None
    given = getattr(store.client, "embedder", None)
    if given is not None and getattr(given, "source", None) is model:
        return str(given.name)
    return embedder_name(model)


def _check(store: IndexplugVectorStore, query: VectorStoreQuery) -> None:
    if not getattr(store.client.capabilities, "vectors", False):
        raise NoVectors(store.client.name, _operation(query))


def _args(
    store: IndexplugVectorStore, query: VectorStoreQuery, filters: Any, kwargs: dict[str, Any]
) -> tuple[dict[str, Any], int]:
    """The ``search_vector`` arguments of ``query`` and how many results it wants."""
    k = query.similarity_top_k
    top_k = k
    if query.mode == VectorStoreQueryMode.MMR:
        factor = kwargs.get("mmr_prefetch_factor", MMR_PREFETCH_FACTOR)
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) or factor < 1:
            raise indexplug.InvalidRequest(
                f"mmr_prefetch_factor must be a number of at least 1, got {factor!r}",
                field="mmr_prefetch_factor",
            )
        top_k = min(max(k, int(k * factor)), 10_000)
    return {
        "top_k": top_k,
        "filters": filters,
        "deadline_s": store.deadline_s,
        "embedder": _stated(store),
        "with_vectors": query.mode == VectorStoreQueryMode.MMR,
    }, k


def _query_vector(store: IndexplugVectorStore, query: VectorStoreQuery) -> Any:
    if query.query_embedding is not None:
        return query.query_embedding
    model = store.embed_model
    if model is not None:
        return model.get_query_embedding(query.query_str or "")
    return store.client.query_vector(query.query_str or "")


async def _aquery_vector(store: IndexplugVectorStore, query: VectorStoreQuery) -> Any:
    if query.query_embedding is not None:
        return query.query_embedding
    model = store.embed_model
    if model is not None:
        return await model.aget_query_embedding(query.query_str or "")
    return await asyncio.to_thread(store.client.query_vector, query.query_str or "")


def _picked(
    query: VectorStoreQuery, vector: Any, outcome: Any, k: int
) -> tuple[list[Any], list[float]]:
    """The hits to answer with and their scores: MMR's choice among the candidates, or
    the search's own ranking."""
    from indexplug.outcomes import Searched

    if not isinstance(outcome, Searched):
        return [], []
    hits = list(outcome.hits)
    if query.mode != VectorStoreQueryMode.MMR:
        return hits, [h.score for h in hits]
    from llama_index.core.indices.query.embedding_utils import get_top_k_mmr_embeddings

    threshold = query.mmr_threshold if query.mmr_threshold is not None else DEFAULT_MMR_THRESHOLD
    import numpy as np

    q = np.asarray(vector, dtype=np.float64)
    q = q / (np.linalg.norm(q) or 1.0)
    scores, ids = get_top_k_mmr_embeddings(
        [float(x) for x in q],
        [list(h.vector or ()) for h in hits],
        similarity_top_k=k,
        embedding_ids=list(range(len(hits))),
        mmr_threshold=threshold,
    )
    return [hits[i] for i in ids], [float(s) for s in scores]


def vector_query(
    store: IndexplugVectorStore, query: VectorStoreQuery, filters: Any, kwargs: dict[str, Any]
) -> tuple[Any, list[Any], list[float]]:
    """The outcome of ``query`` answered by vector, and the hits chosen with their scores."""
    _check(store, query)
    args, k = _args(store, query, filters, kwargs)
    vector = _query_vector(store, query)
    out = store.client.search_vector(store.index, vector, **args)
    hits, scores = _picked(query, vector, out, k)
    return out, hits, scores


async def avector_query(
    store: IndexplugVectorStore, query: VectorStoreQuery, filters: Any, kwargs: dict[str, Any]
) -> tuple[Any, list[Any], list[float]]:
    """:func:`vector_query` through the guard's ``asearch_vector``."""
    _check(store, query)
    args, k = _args(store, query, filters, kwargs)
    vector = await _aquery_vector(store, query)
    out = await store.client.asearch_vector(store.index, vector, **args)
    hits, scores = _picked(query, vector, out, k)
    return out, hits, scores


def takes_embeddings(store: IndexplugVectorStore) -> bool:
    """Whether the store keeps the embeddings nodes arrive with as their vectors: it has an
    ``embed_model``, the backend embeds with it and claims the ``vectors`` capability."""
    from indexplug_llamaindex.embedder import is_wrapped

    model = store.embed_model
    return (
        model is not None
        and bool(getattr(store.client.capabilities, "vectors", False))
        and is_wrapped(store.client, model)
    )


def split_by_embedding(
    store: IndexplugVectorStore, nodes: Sequence[BaseNode], passages: list[indexplug.Passage]
) -> tuple[list[indexplug.Passage], list[indexplug.Passage], list[Any]]:
    """The passages to add as they are (the backend embeds them), and those to add with their
    nodes' embeddings (with those embeddings), when the store :func:`takes_embeddings`."""
    if not takes_embeddings(store):
        return passages, [], []
    embedding: dict[str | None, Any] = {
        n.node_id: n.embedding for n in nodes if n.embedding is not None
    }
    plain = [p for p in passages if p.key not in embedding]
    embedded = [p for p in passages if p.key in embedding]
    return plain, embedded, [embedding[p.key] for p in embedded]


def write(
    store: IndexplugVectorStore, nodes: Sequence[BaseNode], passages: list[indexplug.Passage]
) -> list[Any]:
    """Add ``passages``, those whose nodes carry embeddings with them; the outcomes."""
    plain, embedded, vectors = split_by_embedding(store, nodes, passages)
    outcomes: list[Any] = []
    if embedded:
        outcomes.append(
            store.client.add_vectors(
                store.index, embedded, vectors, embedder=_stated(store), deadline_s=store.deadline_s
            )
        )
    if plain:
        outcomes.append(store.client.add(store.index, plain, deadline_s=store.deadline_s))
    return outcomes


async def awrite(
    store: IndexplugVectorStore, nodes: Sequence[BaseNode], passages: list[indexplug.Passage]
) -> list[Any]:
    """:func:`write` through the guard's coroutines."""
    plain, embedded, vectors = split_by_embedding(store, nodes, passages)
    outcomes: list[Any] = []
    if embedded:
        outcomes.append(
            await store.client.aadd_vectors(
                store.index, embedded, vectors, embedder=_stated(store), deadline_s=store.deadline_s
            )
        )
    if plain:
        outcomes.append(await store.client.aadd(store.index, plain, deadline_s=store.deadline_s))
    return outcomes
