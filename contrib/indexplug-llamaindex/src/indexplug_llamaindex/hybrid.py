"""``VectorStoreQueryMode.HYBRID``: a query answered by a search that fuses a text ranking and
a vector ranking, sync and async.

The store answers it with the backend's own search when that search is already hybrid, which
the backend declares: its score scale is ``rrf`` (reciprocal rank fusion of several rankings)
and it claims ``dense`` (it embeds, so a ranking is by vector).  That is an indexplug fusion
index (``kind = "fusion"`` in ``indexplug.toml``, or :meth:`IndexplugVectorStore.fused`)
whose members include a vector index, and elastic in ``mode = "hybrid"``.  Its answer is
``hybrid_top_k`` nodes (``similarity_top_k`` when not given), scored on the ``rrf`` scale.
``sparse_top_k`` is not used (the backend chooses how deep each ranking goes: a fusion asks
each member for at least 100), nor is ``alpha``: reciprocal rank fusion adds ranks, it has no
weight between the two (as in LlamaIndex's Elasticsearch store).

Every other backend raises :class:`NoHybrid`, naming what would answer: a lexical one
(sqlite-fts5) has no vector ranking and a vector one (chroma, usearch) no text ranking, and an
indexplug backend declares one score scale for both its searches, so no backend offers a
lexical search and a vector search for the store to fuse itself.  A fusion of a lexical index
and a vector index does exactly that, under indexplug's contract checks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from indexplug.errors import InvalidRequest, NotSupported
from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryMode

if TYPE_CHECKING:
    from indexplug_llamaindex.store import IndexplugVectorStore

FUSED_SCALE = "rrf"
"""The score scale of a search that fuses rankings (indexplug fusion, elastic hybrid)."""


class NoHybrid(NotSupported):
    """A query in ``VectorStoreQueryMode.HYBRID`` on a backend whose search does not fuse a
    text ranking and a vector ranking (a ``BAD_REQUEST``; :attr:`capability` is ``hybrid``)."""

    def __init__(self, backend: str) -> None:
        InvalidRequest.__init__(
            self,
            f"backend '{backend}' cannot answer a query in HYBRID mode: its search does not "
            "fuse a text ranking and a vector ranking (it would declare the 'rrf' score scale "
            "and an embedder). Search a fusion index of a lexical index and a vector index "
            '(kind = "fusion" in indexplug.toml, or IndexplugVectorStore.fused(lexical, '
            'vector)), or elastic with mode = "hybrid"',
            field="query.mode",
        )
        self.backend = backend
        self.capability = "hybrid"


def wants_hybrid(query: VectorStoreQuery) -> bool:
    """Whether ``query`` is in HYBRID mode."""
    return query.mode == VectorStoreQueryMode.HYBRID


def is_hybrid(guard: Any) -> bool:
    """Whether the backend declares its search hybrid: the ``rrf`` scale, and an embedder."""
    scale = getattr(guard, "score_scale", None)
    return getattr(scale, "name", None) == FUSED_SCALE and bool(
        getattr(guard.capabilities, "dense", False)
    )


def hybrid_args(store: IndexplugVectorStore, query: VectorStoreQuery) -> int:
    """How many nodes a HYBRID query answers (``hybrid_top_k``, else ``similarity_top_k``);
    :class:`NoHybrid` when the backend's search is not hybrid, ``UnsupportedQuery`` when the
    query has no text to search."""
    from indexplug_llamaindex.store import UnsupportedQuery

    if not is_hybrid(store.client):
        raise NoHybrid(store.client.name)
    if query.query_str is None:
        raise UnsupportedQuery(
            "a query in HYBRID mode needs its text (query_str): the backend ranks by text "
            "and by the text's embedding"
        )
    return query.hybrid_top_k if query.hybrid_top_k is not None else query.similarity_top_k
