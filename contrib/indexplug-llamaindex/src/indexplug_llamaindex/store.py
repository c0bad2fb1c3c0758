"""A LlamaIndex vector store over one indexplug index, any backend.

Nodes are passages keyed by the node id (adding a node again replaces it); ``delete(ref_doc_id)``
removes every node of that document; queries are the backend's own search of
``query.query_str`` with ``similarity_top_k``, ``filters``, ``node_ids`` and ``doc_ids``.
indexplug backends embed (or index) the text themselves: a dense backend (chroma) with the
``embed_model`` given to the store (:mod:`indexplug_llamaindex.embedder`), recorded with the
index, else with its configured embedder; a lexical one (sqlite-fts5) embeds nothing.  The
embeddings nodes arrive with (from an ``IngestionPipeline`` or a ``VectorStoreIndex``) are
stored as they are where the backend claims ``vectors`` and embeds with the store's
``embed_model``, and ignored elsewhere (nothing says which model made them); queries are
embedded by the backend (``is_embedding_query`` is ``False``).
:meth:`IndexplugVectorStore.as_index` gives the ``VectorStoreIndex`` the store's
``embed_model`` where its vectors are kept, else a one-dimension ``MockEmbedding``, rather than
letting LlamaIndex look for its default model (OpenAI's package).  On a backend that claims
indexplug's ``vectors`` capability (chroma, usearch), a query by ``query_embedding`` and
``VectorStoreQueryMode.MMR`` are answered by vector (:mod:`indexplug_llamaindex.vectors`).
``VectorStoreQueryMode.HYBRID`` is answered by a backend whose own search fuses a text and a
vector ranking (a fusion index, :meth:`IndexplugVectorStore.fused`; elastic's hybrid mode)
and refused by any other (:mod:`indexplug_llamaindex.hybrid`).

Every outcome that is not an answer raises the typed :class:`indexplug.OutcomeError` subclass
(``IndexFailedError``, ``IndexTimeoutError`` ...), which carries the outcome; an empty store and
no match are an empty result, as LlamaIndex expects.  ``query_outcome``/``aquery_outcome``
give the guard's outcome itself.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

import indexplug
from indexplug.outcomes import Got, Indexed, IndexStatus, NoMatch, Removed, Scanned, Searched
from llama_index.core import VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.schema import BaseNode
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)
from pydantic import PrivateAttr

from indexplug_llamaindex.embedder import embedder_name, is_wrapped, llamaindex_embedder
from indexplug_llamaindex.filters import FilterInput, all_of, one_of, translate
from indexplug_llamaindex.hybrid import hybrid_args, wants_hybrid
from indexplug_llamaindex.nodes import (
    NODE_ID,
    REF_DOC_ID,
    hit_to_node,
    last_per_key,
    node_to_passage,
    passage_to_node,
)
from indexplug_llamaindex.retriever import nothing_to_find
from indexplug_llamaindex.vectors import (
    avector_query,
    awrite,
    takes_embeddings,
    vector_query,
    wants_vectors,
    write,
)

_MODES = (VectorStoreQueryMode.DEFAULT, VectorStoreQueryMode.TEXT_SEARCH)
SCAN_PAGE = 500


class MissingCapability(indexplug.InvalidRequest):
    """The backend does not offer what the call needs (the message names the capability)."""

    def __init__(self, capability: str, message: str) -> None:
        super().__init__(message, field=f"capabilities.{capability}")
        self.capability = capability


class UnsupportedQuery(indexplug.InvalidRequest):
    """A ``VectorStoreQuery`` the store cannot answer as asked (no text, another mode)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, field="query")


def _fail(outcome: object) -> NoReturn:
    """Raise the typed error for an outcome that is not the answer hoped for."""
    indexplug.raise_for_outcome(outcome)
    raise indexplug.OutcomeError(outcome)


class IndexplugVectorStore(BasePydanticVectorStore):
    """The nodes of index ``index`` of a guarded backend (``indexplug.open_backend(...)``).

    ``IndexplugVectorStore(guard, "notes")``, or :meth:`from_backend` (a backend by name and
    options) or :meth:`from_config` (an index of ``indexplug.toml``).  ``deadline_s`` bounds
    each search and read (writes have none unless it is given).

    ``embed_model``: the LlamaIndex model a dense backend embeds nodes and queries with.
    :meth:`from_backend` and :meth:`from_config` open the backend with it; a guard given
    directly must have been opened with it (``indexplug.open_backend(name, options,
    embedder=llamaindex_embedder(embed_model))``), else ``InvalidRequest`` says so rather than
    embedding with another model.  Left out, a dense backend uses its configured embedder.
    A lexical backend never calls it.  Build the index with :meth:`as_index`.
    """

    stores_text: bool = True
    is_embedding_query: bool = False
    flat_metadata: bool = False  # nested metadata is kept (indexplug_llamaindex.nodes)
    index: str
    deadline_s: float | None = None

    _guard: indexplug.Guard = PrivateAttr()
    _embed_model: BaseEmbedding | None = PrivateAttr(default=None)

    def __init__(
        self,
        guard: indexplug.Guard,
        index: str,
        *,
        embed_model: BaseEmbedding | None = None,
        deadline_s: float | None = None,
    ) -> None:
        indexplug.validate_index_name(index)
        if (
            embed_model is not None
            and getattr(guard.capabilities, "dense", False)
            and not is_wrapped(guard, embed_model)
        ):
            raise indexplug.InvalidRequest(
                f"the {guard.name} backend embeds, and was opened without this embed_model "
                f"({embedder_name(embed_model)}): it would embed with another model. Use "
                "IndexplugVectorStore.from_backend(name, index, options, embed_model=...), or "
                "indexplug.open_backend(name, options, embedder=llamaindex_embedder(model))",
                field="embed_model",
            )
        super().__init__(stores_text=True, index=index, deadline_s=deadline_s)
        self._guard = guard
        self._embed_model = embed_model

    @classmethod
    def from_backend(
        cls,
        name: str,
        index: str,
        options: Mapping[str, Any] | None = None,
        *,
        embed_model: BaseEmbedding | None = None,
        deadline_s: float | None = None,
    ) -> IndexplugVectorStore:
        """A store over index ``index`` of backend ``name`` opened with ``options`` (and, with
        ``embed_model``, embedding with that model)."""
        embedder = None if embed_model is None else llamaindex_embedder(embed_model)
        guard = indexplug.open_backend(name, options, embedder=embedder)
        return cls(guard, index, embed_model=embed_model, deadline_s=deadline_s)

    @classmethod
    def from_config(
        cls,
        name: str,
        config: str | Path | None = None,
        *,
        embed_model: BaseEmbedding | None = None,
        deadline_s: float | None = None,
    ) -> IndexplugVectorStore:
        """A store over the index ``name`` of ``indexplug.toml`` (``config``, else the file
        indexplug finds: ``INDEXPLUG_CONFIG``, ``./indexplug.toml``, the user folder); with
        ``embed_model``, as :meth:`from_backend`."""
        from indexplug.config import open_index

        embedder = None if embed_model is None else llamaindex_embedder(embed_model)
        target = open_index(name, config, embedder=embedder)
        return cls(target.guard, target.index, embed_model=embed_model, deadline_s=deadline_s)

    @classmethod
    def fused(
        cls,
        *stores: IndexplugVectorStore,
        name: str | None = None,
        rrf_k: int = 60,
        deadline_s: float | None = None,
    ) -> IndexplugVectorStore:
        """A store whose search fuses the searches of ``stores`` by reciprocal rank fusion
        (an indexplug fusion index, as ``kind = "fusion"`` in ``indexplug.toml``): over a
        lexical store and a vector one, a store that answers ``VectorStoreQueryMode.HYBRID``.
        It only searches: add nodes through the member stores (closing it leaves them open).
        ``name`` defaults to ``fused-<member>-<member>``."""
        from indexplug.fusion import fuse_open

        if len(stores) < 2 or not all(isinstance(s, IndexplugVectorStore) for s in stores):
            raise indexplug.InvalidRequest(
                "fused() takes two or more IndexplugVectorStore", field="stores"
            )
        target = fuse_open([(s.guard, s.index) for s in stores], name=name, rrf_k=rrf_k)
        return cls(target.guard, target.index, deadline_s=deadline_s)

    @property
    def embed_model(self) -> BaseEmbedding | None:
        """The ``embed_model`` given: what a dense backend embeds with."""
        return self._embed_model

    def as_index(self, **kwargs: Any) -> VectorStoreIndex:
        """A ``VectorStoreIndex`` over this store, with ``kwargs`` passed on.  Its
        ``embed_model``, unless given, is the store's :attr:`embed_model` where the store
        keeps the vectors LlamaIndex computes on insert (a backend that claims ``vectors``
        and embeds with that model: each node is embedded once, by LlamaIndex), else a
        one-dimension ``MockEmbedding`` (the backend embeds or indexes the text itself, so
        the vectors LlamaIndex computes would not be used); no default model (OpenAI's) is
        looked for."""
        model = self._embed_model if takes_embeddings(self) else None
        kwargs.setdefault("embed_model", model or MockEmbedding(embed_dim=1))
        return VectorStoreIndex.from_vector_store(self, **kwargs)

    @classmethod
    def class_name(cls) -> str:
        return "IndexplugVectorStore"

    @property
    def client(self) -> indexplug.Guard:
        """The guarded backend (LlamaIndex's name for what a store wraps)."""
        return self._guard

    @property
    def guard(self) -> indexplug.Guard:
        """The guarded backend, under the name the LangChain and Haystack stores give it
        (``store.guard.close()`` closes it)."""
        return self._guard

    # -- writing -------------------------------------------------------------------------
    def _passages(self, nodes: Sequence[BaseNode]) -> list[indexplug.Passage]:
        if not self._guard.capabilities.keys:
            raise MissingCapability(
                "keys",
                f"backend {self._guard.name!r} does not claim Capabilities.keys, so it cannot "
                "keep nodes by id (adding a node again would duplicate it); use a backend "
                "that does (sqlite-fts5, chroma, colbert)",
            )
        return last_per_key([node_to_passage(n) for n in nodes])

    def add(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[str]:
        """Store ``nodes`` (each replacing the node of the same id); their ids, in order.
        A node's ``embedding`` is stored as its vector, not computed again, when the backend
        claims ``vectors`` and embeds with the store's ``embed_model``
        (:func:`~indexplug_llamaindex.vectors.takes_embeddings`); otherwise the backend
        embeds (or indexes) the text itself."""
        if not nodes:
            return []
        for out in write(self, nodes, self._passages(nodes)):
            if not isinstance(out, Indexed):
                _fail(out)
        return [n.node_id for n in nodes]

    async def async_add(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[str]:
        """:meth:`add` through the guard's ``aadd``."""
        if not nodes:
            return []
        for out in await awrite(self, nodes, self._passages(nodes)):
            if not isinstance(out, Indexed):
                _fail(out)
        return [n.node_id for n in nodes]

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        """Remove every node whose source document is ``ref_doc_id``."""
        out = self._guard.remove(
            self.index, filters={REF_DOC_ID: ref_doc_id}, deadline_s=self.deadline_s
        )
        if not isinstance(out, Removed):
            _fail(out)

    async def adelete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        """:meth:`delete` through the guard's ``aremove``."""
        out = await self._guard.aremove(
            self.index, filters={REF_DOC_ID: ref_doc_id}, deadline_s=self.deadline_s
        )
        if not isinstance(out, Removed):
            _fail(out)

    def _remove_args(
        self, node_ids: Sequence[str] | None, filters: FilterInput
    ) -> dict[str, Any] | None:
        f = translate(filters)
        if f is None:
            return {"keys": list(node_ids)} if node_ids else None
        return {"filters": all_of(one_of(NODE_ID, node_ids) if node_ids else None, f)}

    def delete_nodes(
        self,
        node_ids: list[str] | None = None,
        filters: MetadataFilters | None = None,
        **delete_kwargs: Any,
    ) -> None:
        """Remove the nodes with these ids that pass ``filters`` (either may be left out;
        with neither, nothing is removed)."""
        args = self._remove_args(node_ids, filters)
        if args is None:
            return
        out = self._guard.remove(self.index, deadline_s=self.deadline_s, **args)
        if not isinstance(out, Removed):
            _fail(out)

    async def adelete_nodes(
        self,
        node_ids: list[str] | None = None,
        filters: MetadataFilters | None = None,
        **delete_kwargs: Any,
    ) -> None:
        """:meth:`delete_nodes` through the guard's ``aremove``."""
        args = self._remove_args(node_ids, filters)
        if args is None:
            return
        out = await self._guard.aremove(self.index, deadline_s=self.deadline_s, **args)
        if not isinstance(out, Removed):
            _fail(out)

    def clear(self) -> None:
        """Drop the whole index."""
        out = self._guard.drop(self.index, deadline_s=self.deadline_s)
        if not isinstance(out, IndexStatus):
            _fail(out)

    async def aclear(self) -> None:
        """:meth:`clear` through the guard's ``adrop``."""
        out = await self._guard.adrop(self.index, deadline_s=self.deadline_s)
        if not isinstance(out, IndexStatus):
            _fail(out)

    # -- reading -------------------------------------------------------------------------
    def get_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None
    ) -> list[BaseNode]:
        """The nodes with these ids (in that order; absent ones left out), or those passing
        ``filters`` (with ids too: those of them that pass), or every node."""
        f = translate(filters)
        if node_ids is not None and f is None:
            if not node_ids:
                return []
            got = self._guard.get(self.index, keys=list(node_ids), deadline_s=self.deadline_s)
            if not isinstance(got, Got):
                _fail(got)
            return [passage_to_node(p) for p in got.passages]
        scan = all_of(one_of(NODE_ID, node_ids) if node_ids else None, f)
        nodes = [passage_to_node(p) for p in self._scan(scan)]
        return _in_order(nodes, node_ids)

    async def aget_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None
    ) -> list[BaseNode]:
        """:meth:`get_nodes` through the guard's ``aget`` and ``ascan``."""
        f = translate(filters)
        if node_ids is not None and f is None:
            if not node_ids:
                return []
            got = await self._guard.aget(
                self.index, keys=list(node_ids), deadline_s=self.deadline_s
            )
            if not isinstance(got, Got):
                _fail(got)
            return [passage_to_node(p) for p in got.passages]
        scan = all_of(one_of(NODE_ID, node_ids) if node_ids else None, f)
        nodes = [passage_to_node(p) async for p in self._ascan(scan)]
        return _in_order(nodes, node_ids)

    def _scan(self, filters: dict[str, Any] | None) -> Iterator[indexplug.Passage]:
        for page in self._guard.scan_all(
            self.index, filters=filters, page=SCAN_PAGE, deadline_s=self.deadline_s
        ):
            if not isinstance(page, Scanned):
                _fail(page)
            yield from page.passages

    async def _ascan(self, filters: dict[str, Any] | None) -> AsyncIterator[indexplug.Passage]:
        async for page in self._guard.ascan_all(
            self.index, filters=filters, page=SCAN_PAGE, deadline_s=self.deadline_s
        ):
            if not isinstance(page, Scanned):
                _fail(page)
            for p in page.passages:
                yield p

    # -- querying ------------------------------------------------------------------------
    def _search_args(self, query: VectorStoreQuery) -> tuple[str, dict[str, Any]]:
        top_k = query.similarity_top_k
        if wants_hybrid(query):
            top_k = hybrid_args(self, query)
        elif query.mode not in _MODES:
            raise UnsupportedQuery(
                f"query mode {query.mode.value!r}: the store answers default, text_search, "
                "mmr and hybrid"
            )
        text = query.query_str
        if text is None:
            raise UnsupportedQuery(
                "the query has neither text (query_str) nor an embedding (query_embedding)"
            )
        return text, {
            "top_k": top_k,
            "filters": _filters(query),
            "deadline_s": self.deadline_s,
        }

    def query_outcome(self, query: VectorStoreQuery) -> indexplug.SearchOutcome:
        """The guard's outcome of the search :meth:`query` makes (``Searched``, ``NoMatch``,
        ``IndexEmpty``, ``IndexFailed`` ...)."""
        text, args = self._search_args(query)
        return self._guard.search(self.index, text, **args)

    async def aquery_outcome(self, query: VectorStoreQuery) -> indexplug.SearchOutcome:
        """:meth:`query_outcome` through the guard's ``asearch``."""
        text, args = self._search_args(query)
        return await self._guard.asearch(self.index, text, **args)

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        """The ``similarity_top_k`` best nodes for ``query.query_str`` that pass its filters,
        node ids and document ids (``node_ids=[]``, as ``as_retriever()`` sends, is no
        restriction).  Scores are the backend's, on its score scale (in each node's
        ``indexplug`` metadata).  An empty store, ``similarity_top_k=0`` and a query with no
        word in it are an empty result.  A query with a ``query_embedding`` and no text, or in
        ``VectorStoreQueryMode.MMR``, is answered by vector (:mod:`indexplug_llamaindex.vectors`;
        ``mmr_prefetch_factor=`` among ``kwargs``); one in ``VectorStoreQueryMode.HYBRID`` by
        the backend's own hybrid search, ``hybrid_top_k`` nodes
        (:mod:`indexplug_llamaindex.hybrid`)."""
        if wants_vectors(query):
            if nothing_to_find(query.query_str, query.similarity_top_k):
                return _empty_result()
            return _chosen(*vector_query(self, query, _filters(query), kwargs))
        text, args = self._search_args(query)
        if nothing_to_find(text, args["top_k"]):
            return _empty_result()
        return _result(self._guard.search(self.index, text, **args))

    async def aquery(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        """:meth:`query` through the guard's ``asearch``: the event loop is never blocked."""
        if wants_vectors(query):
            if nothing_to_find(query.query_str, query.similarity_top_k):
                return _empty_result()
            return _chosen(*await avector_query(self, query, _filters(query), kwargs))
        text, args = self._search_args(query)
        if nothing_to_find(text, args["top_k"]):
            return _empty_result()
        return _result(await self._guard.asearch(self.index, text, **args))


def _filters(query: VectorStoreQuery) -> dict[str, Any] | None:
    """The indexplug filter of ``query``: its node ids, document ids and metadata filters."""
    return all_of(
        one_of(NODE_ID, query.node_ids) if query.node_ids else None,
        one_of(REF_DOC_ID, query.doc_ids) if query.doc_ids else None,
        translate(query.filters),
    )


def _chosen(outcome: Any, hits: list[Any], scores: list[float]) -> VectorStoreQueryResult:
    """The result of a query answered by vector: ``hits`` (MMR's choice, or the ranking) with
    ``scores``; the typed error for a failure."""
    if isinstance(outcome, Searched):
        nodes = [hit_to_node(h) for h in hits]
        return VectorStoreQueryResult(
            nodes=nodes, similarities=scores, ids=[n.node_id for n in nodes]
        )
    if isinstance(outcome, NoMatch) or getattr(outcome, "code", None) == "INDEX_EMPTY":
        return _empty_result()
    _fail(outcome)


def _result(outcome: indexplug.SearchOutcome) -> VectorStoreQueryResult:
    if isinstance(outcome, Searched):
        nodes = [hit_to_node(h) for h in outcome.hits]
        return VectorStoreQueryResult(
            nodes=nodes,
            similarities=[h.score for h in outcome.hits],
            ids=[n.node_id for n in nodes],
        )
    if isinstance(outcome, NoMatch) or outcome.code == "INDEX_EMPTY":
        return _empty_result()
    _fail(outcome)


def _empty_result() -> VectorStoreQueryResult:
    return VectorStoreQueryResult(nodes=[], similarities=[], ids=[])


def _in_order(nodes: list[Any], node_ids: Sequence[str] | None) -> list[BaseNode]:
    """``nodes`` in the order of ``node_ids`` when given (scans answer in passage id order)."""
    if not node_ids:
        return nodes
    rank = {nid: i for i, nid in enumerate(node_ids)}
    return sorted(nodes, key=lambda n: rank.get(n.node_id, len(rank)))
