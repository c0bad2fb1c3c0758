"""A LangChain ``VectorStore`` over any indexplug backend.

Each LangChain document is one passage, its id the passage's caller key: adding again under an
id replaces that document (upsert), ``delete`` and ``get_by_ids`` go by key.  The backend ranks
with the ``embedding`` given: a dense backend (chroma) embeds documents and queries with that
LangChain model (:mod:`indexplug_langchain.embedder`) and records its identity with the index;
without one it embeds with its configured embedder.  A lexical backend (sqlite-fts5, BM25)
never calls it.

LangChain's convention sets the return shapes: an empty store, ``k=0`` and a query with no
word in it are an empty list, as in LangChain's in-memory store.  A search returns what the
backend ranked: on a lexical backend that is only the documents sharing a term with the query,
never documents that do not match (``fill_to_k=True`` pads to ``k`` with them).  A failure,
timeout or unavailable backend raises the typed :class:`indexplug.OutcomeError` subclass,
never an empty list; :meth:`IndexplugVectorStore.search_outcome` gives the typed outcome itself.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import indexplug
from indexplug.config import open_index
from indexplug.embedders.wrapped import FunctionEmbedder
from indexplug.errors import InvalidRequest
from indexplug.names import validate_index_name
from indexplug.outcomes import Got, Scanned
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore

from indexplug_langchain._convert import (
    NoRelevanceScale,
    filter_argument,
    lookup,
    nothing_to_find,
    passage_document,
    raise_outcome,
    refuse_kwargs,
    to_passage,
)
from indexplug_langchain.embedder import embedder_name, is_wrapped, langchain_embedder
from indexplug_langchain.vectors import VectorSearches


def _embedder(kwargs: Mapping[str, Any]) -> FunctionEmbedder | None:
    """The indexplug embedder for the ``embedding`` among a constructor's keywords."""
    embedding = kwargs.get("embedding")
    return None if embedding is None else langchain_embedder(embedding)


MAX_FILL = 10_000
"""The largest scan page (``indexplug.guard.MAX_SCAN``): the most documents a fill reads."""
FILL_SCORE = 0.0
"""The score of a document a search fills in after the ranked ones: what BM25 gives a document
sharing no term with the query."""


class IndexplugVectorStore(VectorSearches, VectorStore):
    """Index ``index`` of a guarded indexplug backend as a LangChain vector store.

    Build it from a guard (``indexplug.open_backend(...)``), from a backend name and options
    (:meth:`from_backend`) or from an ``indexplug.toml`` index (:meth:`from_config`).

    * ``embedding``: the LangChain model a dense backend embeds documents and queries with.
      :meth:`from_backend`, :meth:`from_config` and ``from_texts`` open the backend with it;
      a guard given directly must have been opened with it
      (``indexplug.open_backend(name, options, embedder=langchain_embedder(embedding))``),
      else :class:`~indexplug.errors.InvalidRequest` says so rather than embedding with
      another model.  Left out, a dense backend uses its configured embedder.  A lexical
      backend never calls it.
    * ``max_bytes``: the index's size budget for writes (``OverBudgetError`` past it).
    * ``deadline_s``: the deadline of each search and read (writes have none but the guard's
      backstop, as in LangChain).
    * Search by vector and maximal marginal relevance (``search_type="mmr"``) on a backend
      that claims the ``vectors`` capability (:mod:`indexplug_langchain.vectors`); on
      another, :class:`~indexplug_langchain.vectors.NoVectors`.
    * ``fill_to_k``: ``True`` follows a search that ranks fewer than ``k`` documents (a
      lexical backend ranks only those sharing a term with the query) with other documents
      passing the filter, in passage-id order, with score :data:`FILL_SCORE`, up to ``k``
      (needs a backend with ``scan``), for code that expects ``k`` documents from every search
      as from a dense store.  By default only what the backend ranked is returned.
    """

    def __init__(
        self,
        guard: indexplug.Guard,
        index: str,
        *,
        embedding: Embeddings | None = None,
        max_bytes: int | None = None,
        deadline_s: float | None = None,
        fill_to_k: bool = False,
    ) -> None:
        validate_index_name(index)
        if not callable(getattr(guard, "search", None)):
            raise InvalidRequest(
                "guard must be a guarded backend (indexplug.open_backend(...)), not "
                f"{type(guard).__name__}",
                field="guard",
            )
        if (
            embedding is not None
            and getattr(guard.capabilities, "dense", False)
            and not is_wrapped(guard, embedding)
        ):
            raise InvalidRequest(
                f"the {guard.name} backend embeds, and was opened without this embedding "
                f"({embedder_name(embedding)}): it would embed with another model. Use "
                "IndexplugVectorStore.from_backend(name, index, options, embedding=...), or "
                "indexplug.open_backend(name, options, embedder=langchain_embedder(embedding))",
                field="embedding",
            )
        self.guard = guard
        self.index = index
        self.max_bytes = max_bytes
        self.deadline_s = deadline_s
        self.fill_to_k = fill_to_k
        self._embedding = embedding

    # -- construction --------------------------------------------------------------------
    @classmethod
    def from_backend(
        cls,
        backend_name: str,
        index: str,
        options: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> IndexplugVectorStore:
        """Over index ``index`` of backend ``backend_name`` opened with ``options`` (and, with
        ``embedding=``, embedding with that model)."""
        guard = indexplug.open_backend(backend_name, options, embedder=_embedder(kwargs))
        return cls(guard, index, **kwargs)

    @classmethod
    def from_config(
        cls, index: str, config_path: str | Path | None = None, **kwargs: Any
    ) -> IndexplugVectorStore:
        """Over index ``index`` of an ``indexplug.toml`` (``config_path``, else the file the
        CLI would use), with its backend, settings and ``max_bytes``."""
        target = open_index(index, config_path, embedder=_embedder(kwargs))
        kwargs.setdefault("max_bytes", target.max_bytes)
        return cls(target.guard, target.index, **kwargs)

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
        lexical store and a vector one, a hybrid search (BM25 and embeddings).  It only
        searches: add documents through the member stores (closing it leaves them open).
        ``name`` defaults to ``fused-<member>-<member>``."""
        from indexplug.fusion import fuse_open

        if len(stores) < 2 or not all(isinstance(s, IndexplugVectorStore) for s in stores):
            raise InvalidRequest("fused() takes two or more IndexplugVectorStore", field="stores")
        target = fuse_open([(s.guard, s.index) for s in stores], name=name, rrf_k=rrf_k)
        return cls(target.guard, target.index, deadline_s=deadline_s)

    @classmethod
    def _opened(cls, embedding: Embeddings | None, kwargs: dict[str, Any]) -> IndexplugVectorStore:
        index = kwargs.pop("index", None)
        if not isinstance(index, str):
            raise InvalidRequest("from_texts needs index= (the index's name)", field="index")
        guard = kwargs.pop("guard", None)
        backend = kwargs.pop("backend", None)
        options = kwargs.pop("options", None)
        config_path = kwargs.pop("config_path", None)
        if guard is not None:
            return cls(guard, index, embedding=embedding, **kwargs)
        if backend is not None:
            return cls.from_backend(backend, index, options, embedding=embedding, **kwargs)
        return cls.from_config(index, config_path, embedding=embedding, **kwargs)

    @classmethod
    def from_texts(
        cls,
        texts: list[str],
        embedding: Embeddings,
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> IndexplugVectorStore:
        """A store with ``texts`` added.  ``kwargs``: ``index=`` and one of ``guard=``,
        ``backend=`` (with ``options=``) or ``config_path=`` (or the indexplug.toml found as the
        CLI finds it), then the constructor's keywords."""
        store = cls._opened(embedding, kwargs)
        store.add_texts(texts, metadatas, ids=ids)
        return store

    @classmethod
    async def afrom_texts(
        cls,
        texts: list[str],
        embedding: Embeddings,
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> IndexplugVectorStore:
        """:meth:`from_texts`, adding through the guard's ``aadd``."""
        store = cls._opened(embedding, kwargs)
        await store.aadd_texts(texts, metadatas, ids=ids)
        return store

    @property
    def embeddings(self) -> Embeddings | None:
        """The ``embedding`` given at construction: what a dense backend embeds with."""
        return self._embedding

    # -- writes --------------------------------------------------------------------------
    @staticmethod
    def _documents(texts: Iterable[str], metadatas: list[dict[str, Any]] | None) -> list[Document]:
        texts_ = list(texts)
        if metadatas is not None and len(metadatas) != len(texts_):
            raise InvalidRequest(
                f"{len(metadatas)} metadatas for {len(texts_)} texts", field="metadatas"
            )
        metas = metadatas if metadatas is not None else [{} for _ in texts_]
        return [Document(page_content=t, metadata=m) for t, m in zip(texts_, metas, strict=True)]

    def _passages(
        self, documents: Sequence[Document], kwargs: dict[str, Any]
    ) -> tuple[list[indexplug.Passage], list[str]]:
        """The passages to write and the ids to answer: ``ids=`` first, then each document's
        own ``id``, else a new uuid4; of two documents with one id, the later wins."""
        ids = kwargs.pop("ids", None)
        refuse_kwargs(kwargs, "add_documents")
        if ids is not None and len(ids) != len(documents):
            raise InvalidRequest(f"{len(ids)} ids for {len(documents)} documents", field="ids")
        keys: list[str] = []
        by_key: dict[str, indexplug.Passage] = {}
        for n, doc in enumerate(documents):
            given = ids[n] if ids is not None else None
            key = given or doc.id or str(uuid.uuid4())
            if not isinstance(key, str):
                raise InvalidRequest(f"id {key!r} is not a string", field="ids")
            keys.append(key)
            by_key.pop(key, None)
            by_key[key] = to_passage(doc.page_content, doc.metadata, key)
        return list(by_key.values()), keys

    def add_texts(
        self,
        texts: Iterable[str],
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        """Add (or replace, by id) one document per text; answers their ids."""
        return self.add_documents(self._documents(texts, metadatas), ids=ids, **kwargs)

    def add_documents(self, documents: list[Document], **kwargs: Any) -> list[str]:
        """Add (or replace, by id) ``documents``; answers their ids (``ids=`` if given).
        ``batch_size=`` (LangChain's ``index()`` passes it) writes that many documents per
        call to the backend; a failed batch raises, the batches before it stay written."""
        batch = _batch_size(kwargs)
        passages, keys = self._passages(documents, kwargs)
        for chunk in _batches(passages, batch):
            self._written(self.guard.add(self.index, chunk, max_bytes=self.max_bytes))
        return keys

    async def aadd_texts(
        self,
        texts: Iterable[str],
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        """:meth:`add_texts` through the guard's ``aadd``."""
        return await self.aadd_documents(self._documents(texts, metadatas), ids=ids, **kwargs)

    async def aadd_documents(self, documents: list[Document], **kwargs: Any) -> list[str]:
        """:meth:`add_documents` through the guard's ``aadd``."""
        batch = _batch_size(kwargs)
        passages, keys = self._passages(documents, kwargs)
        for chunk in _batches(passages, batch):
            self._written(await self.guard.aadd(self.index, chunk, max_bytes=self.max_bytes))
        return keys

    @staticmethod
    def _written(outcome: Any) -> None:
        if not isinstance(outcome, indexplug.Indexed):
            raise_outcome(outcome)

    def _remove_args(self, ids: list[str] | None, kwargs: dict[str, Any]) -> dict[str, Any]:
        filters = filter_argument(kwargs, None)
        refuse_kwargs(kwargs, "delete")
        if ids is None and filters is None:
            raise InvalidRequest(
                "delete needs ids or filter= (deleting everything is guard.drop(index))",
                field="ids",
            )
        pids, keys = lookup(ids or [])
        return {"ids": pids, "keys": keys, "filters": filters}

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool:
        """Delete the documents with these ids (and/or those passing ``filter=``); ids that
        are not there are no error.  ``True``, or the typed error of a failure."""
        args = self._remove_args(ids, kwargs)
        if not args["keys"] and args["filters"] is None:
            return True
        out = self.guard.remove(self.index, args["ids"], keys=args["keys"], filters=args["filters"])
        if not isinstance(out, indexplug.Removed):
            raise_outcome(out)
        return True

    async def adelete(self, ids: list[str] | None = None, **kwargs: Any) -> bool:
        """:meth:`delete` through the guard's ``aremove``."""
        args = self._remove_args(ids, kwargs)
        if not args["keys"] and args["filters"] is None:
            return True
        out = await self.guard.aremove(
            self.index, args["ids"], keys=args["keys"], filters=args["filters"]
        )
        if not isinstance(out, indexplug.Removed):
            raise_outcome(out)
        return True

    # -- reads ---------------------------------------------------------------------------
    @staticmethod
    def _got(outcome: Any) -> list[Document]:
        if not isinstance(outcome, Got):
            raise_outcome(outcome)
        return [passage_document(p) for p in outcome.passages]

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """The stored documents with these ids (those not there are left out)."""
        pids, keys = lookup(ids)
        if not keys:
            return []
        return self._got(self.guard.get(self.index, pids, keys=keys, deadline_s=self.deadline_s))

    async def aget_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """:meth:`get_by_ids` through the guard's ``aget``."""
        pids, keys = lookup(ids)
        if not keys:
            return []
        out = await self.guard.aget(self.index, pids, keys=keys, deadline_s=self.deadline_s)
        return self._got(out)

    def search_outcome(self, query: str, k: int = 4, **kwargs: Any) -> indexplug.SearchOutcome:
        """The guard's typed outcome of the search (``SEARCHED``, ``NO_MATCH``,
        ``INDEX_EMPTY``, or the failure) with every hit's rank, score, scale and provenance;
        ``filter=`` as in :meth:`similarity_search`.  Nothing is filled in."""
        return self.guard.search(self.index, query, **self._search_args(k, kwargs))

    async def asearch_outcome(
        self, query: str, k: int = 4, **kwargs: Any
    ) -> indexplug.SearchOutcome:
        """:meth:`search_outcome` through the guard's ``asearch``."""
        return await self.guard.asearch(self.index, query, **self._search_args(k, kwargs))

    @staticmethod
    def _ranked(outcome: Any) -> list[tuple[indexplug.Passage, float]] | None:
        """The ranked passages of a search outcome with their scores; ``None`` for an empty
        index (nothing to fill from); the typed error for a failure."""
        if isinstance(outcome, indexplug.Searched):
            return [(h.passage, h.score) for h in outcome.hits]
        if isinstance(outcome, indexplug.NoMatch):
            return []
        if isinstance(outcome, indexplug.IndexEmpty):
            return None
        raise_outcome(outcome)

    def _wants_fill(self, ranked: list[tuple[indexplug.Passage, float]], k: int) -> bool:
        return (
            self.fill_to_k
            and len(ranked) < k
            and bool(getattr(self.guard.capabilities, "scan", False))
        )

    @staticmethod
    def _filled(
        page: Any, ranked: list[tuple[indexplug.Passage, float]], k: int
    ) -> list[tuple[indexplug.Passage, float]]:
        """``ranked`` followed by the scanned passages it does not hold, up to ``k``."""
        if not isinstance(page, Scanned):
            raise_outcome(page)
        seen = {p.id for p, _ in ranked}
        extra = [(p, FILL_SCORE) for p in page.passages if p.id not in seen]
        return ranked + extra[: k - len(ranked)]

    @staticmethod
    def _scored(
        ranked: list[tuple[indexplug.Passage, float]] | None,
    ) -> list[tuple[Document, float]]:
        return [(passage_document(p), score) for p, score in ranked or []]

    def similarity_search_with_score(
        self, query: str, k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """The ``k`` nearest documents with their scores on the backend's scale (higher is
        better; see ``guard.score_scale``).  ``filter=``: an indexplug operator filter."""
        args = self._search_args(k, kwargs)
        if nothing_to_find(query, k):
            return []
        ranked = self._ranked(self.guard.search(self.index, query, **args))
        if ranked is not None and self._wants_fill(ranked, k):
            page = self.guard.scan(
                self.index,
                filters=args["filters"],
                limit=min(k, MAX_FILL),
                deadline_s=self.deadline_s,
            )
            ranked = self._filled(page, ranked, k)
        return self._scored(ranked)

    async def asimilarity_search_with_score(
        self, query: str, k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """:meth:`similarity_search_with_score` through the guard's ``asearch`` and ``ascan``."""
        args = self._search_args(k, kwargs)
        if nothing_to_find(query, k):
            return []
        ranked = self._ranked(await self.guard.asearch(self.index, query, **args))
        if ranked is not None and self._wants_fill(ranked, k):
            page = await self.guard.ascan(
                self.index,
                filters=args["filters"],
                limit=min(k, MAX_FILL),
                deadline_s=self.deadline_s,
            )
            ranked = self._filled(page, ranked, k)
        return self._scored(ranked)

    def similarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        """The ``k`` nearest documents (see :meth:`similarity_search_with_score`)."""
        return [d for d, _ in self.similarity_search_with_score(query, k, **kwargs)]

    async def asimilarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        """:meth:`similarity_search` through the guard's async ops."""
        return [d for d, _ in await self.asimilarity_search_with_score(query, k, **kwargs)]

    def _select_relevance_score_fn(self) -> Callable[[float], float]:
        """Scores as LangChain relevance: a cosine similarity is one already (LangChain's own
        ``1 - cosine distance``); other scales (BM25, comparable within one search only) have
        none."""
        scale = self.guard.score_scale
        if getattr(scale, "name", None) == "cosine":
            return _same
        raise NoRelevanceScale(
            f"scores on scale {getattr(scale, 'name', scale)!r} have no relevance from 0 to 1 "
            "(use similarity_search_with_score)",
            field="score_scale",
        )


def _same(score: float) -> float:
    return score


def _batch_size(kwargs: dict[str, Any]) -> int | None:
    """``batch_size=`` popped from ``kwargs`` (LangChain's ``index()`` passes it): a positive
    integer, or ``None`` (not given: every document in one write)."""
    value = kwargs.pop("batch_size", None)
    if value is None:
        return None
    if type(value) is not int or value < 1:
        raise InvalidRequest(
            f"batch_size must be a positive integer, got {value!r}", field="batch_size"
        )
    return value


def _batches(passages: list[indexplug.Passage], size: int | None) -> list[list[indexplug.Passage]]:
    """``passages`` in writes of ``size`` (all in one without a size; none when empty)."""
    if not passages:
        return []
    step = size or len(passages)
    return [passages[i : i + step] for i in range(0, len(passages), step)]
