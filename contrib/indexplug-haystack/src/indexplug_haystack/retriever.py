"""A Haystack retriever component over an :class:`IndexplugDocumentStore`.

``run(query, top_k, filters)`` answers ``{"documents": [...]}``: the best documents for the
query by the index's own ranking (full text for sqlite-fts5, vectors for a dense backend), each
with ``Document.score`` and the adapter's fields under ``meta["indexplug"]`` (never over a
user's key: that key is refused on write).  As with Haystack's ``InMemoryBM25Retriever``: no
match, an empty store, ``run(top_k=0)`` and a query of blanks or punctuation only are an empty
list, while ``""`` and a ``top_k`` below 1 at construction raise ``ValueError``.  A failure,
timeout or unavailable backend raises the typed :class:`indexplug.OutcomeError`.
"""

from __future__ import annotations

from typing import Any

from haystack import component, default_from_dict, default_to_dict
from haystack.dataclasses import Document
from haystack.document_stores.types import FilterPolicy
from haystack.document_stores.types.filter_policy import apply_filter_policy
from haystack.errors import FilterError
from indexplug.guard import MAX_TOP_K
from indexplug.outcomes import Hit, IndexEmpty, NoMatch, Searched, SearchOutcome

from indexplug_haystack.codec import RECORD_KEY, to_document
from indexplug_haystack.document_store import IndexplugDocumentStore, raise_outcome, renamed
from indexplug_haystack.filters import Plan, residual

RETRIEVER_MODULE = "haystack_integrations.components.retrievers.indexplug"
"""Where Haystack finds the retriever (see
:mod:`haystack_integrations.components.retrievers.indexplug`)."""

_WIDEN = 4
"""How much more a search asks for, each round, when the filter is checked on the hits."""


def hit_to_document(hit: Hit) -> Document:
    """The document of a hit: its score in ``Document.score``, the adapter's fields under
    ``meta["indexplug"]``."""
    return _with_fields(to_document(hit.passage, score=hit.score), hit)


def _with_fields(doc: Document, hit: Hit) -> Document:
    p = hit.passage
    doc.meta[RECORD_KEY] = {
        "passage_id": p.id,
        "key": p.key,
        "rank": hit.rank,
        "score_scale": hit.score_scale,
        "untrusted": hit.untrusted,
        "uri": p.source.uri,
        "start": p.start,
        "end": p.end,
    }
    return doc


class RetrieverSettings:
    """What both retrievers hold and how they read it: the store, ``top_k``, ``filters`` with
    their ``filter_policy`` and ``deadline_s``; their (de)serialisation and the per-call
    request (the ``top_k`` and the merged filters a run asks with)."""

    document_store: IndexplugDocumentStore
    top_k: int
    filters: dict[str, Any] | None
    filter_policy: FilterPolicy
    deadline_s: float | None

    def _configure(
        self,
        document_store: IndexplugDocumentStore,
        top_k: int,
        filters: dict[str, Any] | None,
        filter_policy: FilterPolicy | str,
        deadline_s: float | None,
    ) -> None:
        _check_top_k(top_k)
        self.document_store = document_store
        self.top_k = top_k
        self.filters = filters
        self.filter_policy = (
            filter_policy
            if isinstance(filter_policy, FilterPolicy)
            else FilterPolicy.from_str(filter_policy)
        )
        self.deadline_s = deadline_s

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(
            self,
            document_store=self.document_store.to_dict(),
            top_k=self.top_k,
            filters=self.filters,
            filter_policy=self.filter_policy.value,
            deadline_s=self.deadline_s,
        )

    @staticmethod
    def _revive(data: dict[str, Any]) -> dict[str, Any]:
        """``data`` with its store and filter policy made objects again (for ``from_dict``)."""
        params = data.get("init_parameters", {})
        if "document_store" in params:
            params["document_store"] = IndexplugDocumentStore.from_dict(params["document_store"])
        if "filter_policy" in params:
            params["filter_policy"] = FilterPolicy.from_str(params["filter_policy"])
        return data

    def _request(
        self, top_k: int | None, filters: dict[str, Any] | None
    ) -> tuple[int, dict[str, Any] | None, Plan]:
        k = self.top_k if top_k is None else top_k
        if k != 0 or type(k) is not int:
            _check_top_k(k)
        merged = apply_filter_policy(self.filter_policy, self.filters, filters)
        return k, merged, self.document_store._plan(merged)


@component
class IndexplugRetriever(RetrieverSettings):
    """Retrieves documents from an :class:`IndexplugDocumentStore` by the index's ranking.

    ``filters`` (Haystack's syntax) narrow every search; ``filter_policy`` says whether the
    filters given to :meth:`run` replace them (``REPLACE``, the default) or are merged with
    them (``MERGE``).
    """

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
        self._configure(document_store, top_k, filters, filter_policy, deadline_s)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> IndexplugRetriever:
        return default_from_dict(
            cls, cls._revive(renamed(data, "indexplug_haystack.retriever", cls))
        )

    def _deadline(self) -> float | None:
        return self.deadline_s if self.deadline_s is not None else self.document_store.deadline_s

    def outcome(
        self, query: str, top_k: int | None = None, filters: dict[str, Any] | None = None
    ) -> SearchOutcome:
        """The index's own typed answer (``SEARCHED``, ``NO_MATCH``, ``INDEX_EMPTY`` or a
        failure) to the first search :meth:`run` makes, for callers who must tell an empty
        index from no match.  The part of ``filters`` checked after the search (see the docs
        page) is not applied to it."""
        k, _, plan = self._request(top_k, filters)
        store = self.document_store
        return store.guard.search(
            store.index, query, top_k=k, filters=plan.pushdown, deadline_s=self._deadline()
        )

    @component.output_types(documents=list[Document])
    def run(
        self, query: str, top_k: int | None = None, filters: dict[str, Any] | None = None
    ) -> dict[str, list[Document]]:
        """The ``top_k`` best documents for ``query`` that pass ``filters``."""
        k, merged, plan = self._request(top_k, filters)
        if _nothing_to_find(query, k):
            return {"documents": []}
        store = self.document_store
        ask = k
        while True:
            out = store.guard.search(
                store.index, query, top_k=ask, filters=plan.pushdown, deadline_s=self._deadline()
            )
            done, docs = _answer(out, k, ask, merged, plan)
            if done:
                return {"documents": docs}
            ask = min(ask * _WIDEN, MAX_TOP_K)

    @component.output_types(documents=list[Document])
    async def run_async(
        self, query: str, top_k: int | None = None, filters: dict[str, Any] | None = None
    ) -> dict[str, list[Document]]:
        """:meth:`run` on the guard's coroutine (the event loop is never blocked)."""
        k, merged, plan = self._request(top_k, filters)
        if _nothing_to_find(query, k):
            return {"documents": []}
        store = self.document_store
        ask = k
        while True:
            out = await store.guard.asearch(
                store.index, query, top_k=ask, filters=plan.pushdown, deadline_s=self._deadline()
            )
            done, docs = _answer(out, k, ask, merged, plan)
            if done:
                return {"documents": docs}
            ask = min(ask * _WIDEN, MAX_TOP_K)


def _nothing_to_find(query: Any, top_k: int) -> bool:
    """Whether a search has an empty answer without asking the index: ``top_k`` is 0, or the
    query is text with no word in it, as Haystack's in-memory store answers them; ``""``
    raises the ``ValueError`` that store raises."""
    if query == "":
        raise ValueError("Query should be a non-empty string")
    if top_k == 0:
        return True
    return isinstance(query, str) and not any(ch.isalnum() for ch in query)


def _check_top_k(top_k: Any) -> None:
    if type(top_k) is not int or not 1 <= top_k <= MAX_TOP_K:
        raise ValueError(f"top_k must be an integer from 1 to {MAX_TOP_K}, got {top_k!r}")


def _answer(
    out: Any, k: int, asked: int, filters: dict[str, Any] | None, plan: Plan
) -> tuple[bool, list[Document]]:
    """Whether the search is answered, and its documents.

    An exact filter ran in the backend: the hits are the answer.  Otherwise the hits are
    checked with Haystack's meaning of the filter; with fewer than ``k`` left while the index
    gave all ``asked``, more may pass further down, so the search is asked again for more."""
    if isinstance(out, (NoMatch, IndexEmpty)):
        return True, []
    if not isinstance(out, Searched):
        raise_outcome(out)
    if plan.exact:
        return True, [hit_to_document(h) for h in out.hits]
    # Haystack's meaning is checked on the documents as stored (before the adapter's fields)
    pairs = [(to_document(h.passage, score=h.score), h) for h in out.hits]
    kept = [_with_fields(d, h) for d, h in pairs if residual(filters, d)]
    if len(kept) >= k or len(out.hits) < asked:
        return True, kept[:k]
    if asked >= MAX_TOP_K:
        raise FilterError(
            f"only {len(kept)} of the best {MAX_TOP_K} hits pass the filters, which are checked "
            "after the search (see docs/adapters/haystack.md): narrow the query or the filters"
        )
    return False, []


# Pipelines saved before the component moved to ``haystack_integrations`` name it by its old
# module; Haystack looks components up by that name, so the old name stays registered (loading
# such a file still needs ``allowed_modules=["indexplug_haystack"]``, as it always did).
component.registry.setdefault(
    f"indexplug_haystack.retriever.{IndexplugRetriever.__name__}", IndexplugRetriever
)
