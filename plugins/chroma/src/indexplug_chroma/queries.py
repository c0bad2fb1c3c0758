"""The chroma backend's reads with the blocking client: ``search``, ``status``, ``get``,
``scan`` and ``indexes``, each written once as steps (:mod:`indexplug_chroma.steps`) that the
async forms (:mod:`indexplug_chroma.aqueries`) run too."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from indexplug.deadlines import Deadline
from indexplug.filters import Filter, parse_filter
from indexplug.outcomes import (
    GetOutcome,
    IndexEmpty,
    IndexesOutcome,
    IndexInfo,
    IndexList,
    IndexStatus,
    NoMatch,
    Scanned,
    ScanOutcome,
    Searched,
    SearchOutcome,
    StatusOutcome,
)
from indexplug.passages import MetadataValue, Passage
from indexplug.protocols import Embedder, Granularity, Vector

from indexplug_chroma import fields, sizes, steps
from indexplug_chroma.base import ChromaBase, _checked_vector
from indexplug_chroma.collection import (
    BUDGET_KEY,
    DIM_KEY,
    EMBEDDER_KEY,
    ID_CHUNK,
    PAYLOAD_KEY,
    SEARCH_ATTEMPTS,
    _provenance_in_document,
    _typed,
)
from indexplug_chroma.errors import RecordLost
from indexplug_chroma.reads import (
    ID_NOT_FOUND,
    Check,
    _exact_query,
    _got,
    _hits,
    _in_time,
    _live,
    _provenance_check,
    _scan_page,
    _stored_passages,
    _vector_index_unwritten,
    _vectors_without_records,
)
from indexplug_chroma.scale import SCALE
from indexplug_chroma.stores import ServerStore, collection_name, index_of


class ChromaQueries(ChromaBase):
    """``search``, ``status``, ``get``, ``scan`` and ``indexes`` with the blocking client."""

    def search(
        self,
        index: str,
        query: str,
        *,
        top_k: int,
        deadline: Deadline,
        filters: Mapping[str, MetadataValue] | Filter | None = None,
    ) -> SearchOutcome:
        """The ``top_k`` nearest passages (see :meth:`_search`).  ``filters`` is what the
        guard gives a backend claiming operators, a parsed :data:`~indexplug.filters.Filter`;
        an equality map (a direct caller) is parsed the same way."""
        return self._searched(index, query, top_k, deadline, filters)

    def _searched(
        self,
        index: str,
        query: str | Vector,
        top_k: int,
        deadline: Deadline,
        filters: Mapping[str, MetadataValue] | Filter | None,
    ) -> SearchOutcome:
        """:meth:`search` by a text or by a query vector (``search_vector``), tried again
        when the collection or a record changed under the query."""
        from chromadb.errors import NotFoundError

        for attempt in range(1, SEARCH_ATTEMPTS + 1):
            try:
                return self._search(index, query, top_k, deadline, parse_filter(filters))
            except Exception as exc:
                again = isinstance(exc, (NotFoundError, RecordLost)) or ID_NOT_FOUND in str(exc)
                if not again:
                    self._handles.pop(index, None)
                    return self._failure(index, exc, deadline)
                # NotFoundError: a cached collection deleted (and perhaps re-created) behind
                # our back: look it up again, so a re-created index is checked afresh.
                # RecordLost: a vector answered without its record, which a delete running
                # while the query read the vector index and then the records also gives; a
                # record really lost behind the vectors is lost on the next try too.
                self._handles.pop(index, None)
                if attempt == SEARCH_ATTEMPTS:
                    return self._failure(index, exc, deadline)
        raise AssertionError("unreachable")

    def _search(
        self,
        index: str,
        query: str | Vector,
        top_k: int,
        deadline: Deadline,
        filters: Filter | None,
    ) -> SearchOutcome:
        if self._store.exists(index) is False:
            _in_time(deadline, "starting the search")
            return IndexEmpty(index=index, backend=self.name)
        with self._store.use(index) as client:
            return steps.run(
                self._search_steps(index, query, top_k, deadline, filters),
                lambda step: self._do(step, client),
            )

    def _search_steps(
        self,
        index: str,
        query: str | Vector,
        top_k: int,
        deadline: Deadline,
        filters: Filter | None,
    ) -> steps.Steps[SearchOutcome]:
        """One search: embed the query, one Chroma query, and as little else as possible.

        Embedding the query is the cost that matters, so the rest is cached: the collection
        handle with its embedder check (never changes for a collection), and the passage count
        (``count_ttl_s``; forgotten by every write of this process).  The count only names
        how many passages were searched, so a cached one never decides an answer alone: an
        index that looks empty is counted again, and a query that finds nothing without a
        filter means the index is empty now, whatever the cache said.

        A filter Chroma serves exactly (:mod:`indexplug_chroma.fields`) goes to the query as
        its ``where``; one it can only narrow down (a string range, or a collection made
        before the typed fields) is checked on every candidate, and the candidates are then
        ranked by an exact scan of their embeddings.  Dead records (replaced by their key's
        new passages, about to be deleted) are dropped from every answer.  Written once as
        steps (:mod:`indexplug_chroma.steps`): :meth:`search` and :meth:`asearch` run it.
        """
        _in_time(deadline, "starting the search")
        handle = yield steps.Handle(index, self.embedder())
        if handle is None:
            return IndexEmpty(index=index, backend=self.name)
        coll, include, emb, typed = handle
        count = yield steps.Count(index, coll)
        if count == 0:
            count = yield steps.Count(index, coll, fresh=True)
            if count == 0:
                if not (yield from _vectors_without_records(coll, emb.dim)):
                    return IndexEmpty(index=index, backend=self.name)
                count = yield steps.Count(index, coll)  # written meanwhile: search it
        where: dict[str, Any] | None = None
        check: Check | None = None
        if filters is not None:
            if typed:
                translated = fields.translate(filters)
                if translated.clause is fields.FALSE:
                    return NoMatch(index=index, backend=self.name, searched=count)
                where = translated.clause or None
                if not translated.exact:
                    check = _provenance_check(filters)
            else:
                check = _provenance_check(filters)
        if isinstance(query, str):
            raw = yield steps.Embed(emb, query)
            vector = _checked_vector(raw, emb)
        else:  # search_vector: the caller's vector, checked by the guard
            vector = _checked_vector(query, emb)
        if not np.any(vector):
            # The embedder saw nothing in the query (no word it knows): no direction to
            # rank by, so honestly nothing matches.
            return NoMatch(index=index, backend=self.name, searched=count)
        _in_time(deadline, "querying Chroma")
        if check is not None:
            res = yield from _exact_query(coll, vector, top_k, where, check, typed=typed)
            exact = True
        else:
            exact = False
            try:
                res = yield steps.Call(
                    coll,
                    "query",
                    {
                        "query_embeddings": [vector],
                        "n_results": top_k,
                        "where": where,
                        "include": include,
                    },
                )
            except Exception as exc:
                if not _vector_index_unwritten(exc):
                    raise
                _in_time(deadline, "the exact scan")
                res = yield from _exact_query(coll, vector, top_k, where)
                exact = True
            res = _live(res)
        got = len((res.get("ids") or [[]])[0])
        if got < top_k and not exact:
            # A short answer: every passage (matching the filter), or some the graph cannot
            # reach (or dead ones dropped).  Count what is stored and scan exactly if the
            # graph missed any.
            if where is None:
                count = stored = yield steps.Count(index, coll, fresh=True)
            else:
                listed = yield steps.Call(coll, "get", {"where": where, "include": []})
                stored = len(listed["ids"])
            if got < stored:
                _in_time(deadline, "the exact scan")
                res = yield from _exact_query(coll, vector, top_k, where)
        _in_time(deadline, "the results came back")
        if not (res.get("ids") or [[]])[0] and filters is None:
            self._store.forget_count(index)  # emptied behind the cached count
            return IndexEmpty(index=index, backend=self.name)
        hits = _hits(res)
        if not hits:
            return NoMatch(index=index, backend=self.name, searched=count)
        searched = max(count, len(hits))  # a count cached before another client's writes
        return Searched.from_stored(
            index=index, backend=self.name, hits=hits, searched=searched, scale=SCALE
        )

    def _do(self, step: steps.Step, client: Any) -> Any:
        """One step with the blocking client (see :mod:`indexplug_chroma.steps`)."""
        if isinstance(step, steps.Call):
            return getattr(step.target, step.method)(**step.kwargs)
        if isinstance(step, steps.Embed):
            return step.embedder.embed_query(step.text, Granularity.TEXT)
        if isinstance(step, steps.Count):
            if step.fresh:
                self._store.forget_count(step.index)
            return self._store.count(step.index, step.collection)
        if isinstance(step, steps.Handle):
            return self._search_handle(client, step.index, step.embedder)
        return self._store.get(client, step.index)

    def _search_handle(
        self, client: Any, index: str, emb: Embedder
    ) -> tuple[Any, list[str], Embedder, bool] | None:
        """The index's collection, checked against ``emb``, what its queries ask Chroma to
        include, the embedder to use for it and whether its records hold typed filter
        fields; cached for searches.

        What is cached never changes for a collection (its id, embedder, dimension and record
        layout); a collection deleted behind our back raises ``NotFoundError`` on use, and
        :meth:`search` then looks it up again.  Writes and drops of this instance forget it.
        Records keeping their provenance in the document need no metadata back: asking for
        it costs Chroma about 0.3 ms a top-100 query even where records have none.
        """
        cached = self._handles.get(index)
        if cached is not None and cached[0] is client:
            return cached[1:]
        coll = self._store.get(client, index)
        if coll is None:
            self._handles.pop(index, None)
            return None
        meta, emb = self._check_embedder(index, coll, emb)
        include = ["documents", "distances"]
        if not _provenance_in_document(meta):
            include.insert(1, "metadatas")
        self._handles[index] = (client, coll, include, emb, _typed(meta))
        return coll, include, emb, _typed(meta)

    def status(self, index: str, *, deadline: Deadline) -> StatusOutcome:
        try:
            _in_time(deadline, "reading the status")
            if self._store.exists(index) is False:
                return IndexStatus(index=index, backend=self.name, exists=False, passages=0)
            emb = self.embedder()
            with self._store.use(index) as client:
                return steps.run(
                    self._status_steps(index, emb, deadline),
                    lambda step: self._do(step, client),
                )
        except Exception as exc:
            return self._failure(index, exc, deadline)

    def _status_steps(
        self, index: str, emb: Embedder, deadline: Deadline
    ) -> steps.Steps[StatusOutcome]:
        coll = yield steps.Open(index)
        if coll is None:
            return IndexStatus(index=index, backend=self.name, exists=False, passages=0)
        meta, _ = self._check_embedder(index, coll, emb)
        count = int((yield steps.Call(coll, "count", {})))
        dim = int(meta[DIM_KEY])
        if self._store.estimate_sizes:
            size: int | None = sizes.estimated_bytes(count, int(meta.get(PAYLOAD_KEY, 0)), dim)
        else:
            size = self._size(index, coll, meta, dim)
        _in_time(deadline, "the status came back")
        budget = meta.get(BUDGET_KEY)
        return IndexStatus(
            index=index,
            backend=self.name,
            exists=True,
            passages=count,
            bytes_used=size,
            max_bytes=int(budget) if budget is not None else None,
            estimate=self._store.estimate_sizes,
            embedder=str(meta[EMBEDDER_KEY]),
            details={
                **self._store.where(index),
                "collection": collection_name(index),
                "dim": dim,
                "payload_bytes": int(meta.get(PAYLOAD_KEY, 0)),
            },
        )

    def get(
        self, index: str, ids: Sequence[str], *, keys: Sequence[str], deadline: Deadline
    ) -> GetOutcome:
        """Stored passages by id (``collection.get(ids=...)``) and by caller key (a ``where``
        on the ``ip.key`` field); dead records are not passages any more."""
        try:
            _in_time(deadline, "starting the read")
            if self._store.exists(index) is False:
                return _got(index, self.name, ids, keys, {})
            with self._store.use(index) as client:
                return steps.run(
                    self._get_steps(index, ids, keys, deadline),
                    lambda step: self._do(step, client),
                )
        except Exception as exc:
            return self._failure(index, exc, deadline)

    def _get_steps(
        self, index: str, ids: Sequence[str], keys: Sequence[str], deadline: Deadline
    ) -> steps.Steps[GetOutcome]:
        found: dict[str, Passage] = {}
        coll = yield steps.Open(index)
        if coll is not None:
            for i in range(0, len(ids), ID_CHUNK):
                _in_time(deadline, "reading passages by id")
                got = yield steps.Call(
                    coll,
                    "get",
                    {"ids": list(ids[i : i + ID_CHUNK]), "include": ["documents", "metadatas"]},
                )
                found.update(_stored_passages(got))
            for i in range(0, len(keys), ID_CHUNK):
                _in_time(deadline, "reading passages by key")
                where = {fields.KEY_FIELD: {"$in": list(keys[i : i + ID_CHUNK])}}
                got = yield steps.Call(
                    coll, "get", {"where": where, "include": ["documents", "metadatas"]}
                )
                found.update(_stored_passages(got))
        _in_time(deadline, "the passages came back")
        return _got(index, self.name, ids, keys, found)

    def scan(
        self,
        index: str,
        *,
        filters: Filter | None,
        after: str | None,
        limit: int,
        deadline: Deadline,
    ) -> ScanOutcome:
        """One page in ascending id order.

        Chroma pages by its own insertion order, not by id, so each page lists the ids of
        every passage that passes the filter (one ``get`` with nothing included but ids; a
        filter Chroma can only narrow down also reads the candidates' metadata, or their
        documents in a collection made before the typed fields), sorts them, and reads the
        records of the first ``limit`` above ``after``.  A page costs a listing of the
        matching ids, O(n log n) in them: a full export by pages of ``limit`` lists them
        n / limit times.
        """
        try:
            _in_time(deadline, "starting the scan")
            if self._store.exists(index) is False:
                return Scanned(index=index, backend=self.name, passages=[], next_after=None)
            with self._store.use(index) as client:
                return steps.run(
                    self._scan_steps(index, parse_filter(filters), after, limit, deadline),
                    lambda step: self._do(step, client),
                )
        except Exception as exc:
            return self._failure(index, exc, deadline)

    def _scan_steps(
        self,
        index: str,
        filters: Filter | None,
        after: str | None,
        limit: int,
        deadline: Deadline,
    ) -> steps.Steps[ScanOutcome]:
        page: list[Passage] = []
        more = False
        coll = yield steps.Open(index)
        if coll is not None:
            page, more = yield from _scan_page(coll, filters, after, limit, deadline)
        _in_time(deadline, "the page came back")
        return Scanned(
            index=index,
            backend=self.name,
            passages=page,
            next_after=page[-1].id if more and page else None,
        )

    def indexes(self, *, deadline: Deadline) -> IndexesOutcome:
        """The indexes this backend holds (embedded: the folders under its home holding an
        indexplug collection; server: the collections named ``indexplug.*``), each with its
        count (Chroma's ``count``: for the moment between a key's replacement and the
        deletion of its old passages, those are counted too)."""
        try:
            _in_time(deadline, "listing the indexes")
            if isinstance(self._store, ServerStore):
                client = self._store.client()
                return steps.run(
                    self._server_indexes_steps(client, deadline),
                    lambda step: self._do(step, client),
                )
            found: list[IndexInfo] = []
            for name in self._store.names():
                _in_time(deadline, "counting an index")
                with self._store.use(name) as client:
                    coll = self._store.get(client, name)
                    if coll is None or EMBEDDER_KEY not in (coll.metadata or {}):
                        continue
                    found.append(IndexInfo(name=name, passages=int(coll.count())))
        except Exception as exc:
            return self._failure("", exc, deadline)  # type: ignore[return-value]
        return IndexList(index="", backend=self.name, indexes=found)

    def _server_indexes_steps(self, client: Any, deadline: Deadline) -> steps.Steps[IndexList]:
        """The server's ``indexplug.*`` collections with their counts."""
        names: set[str] = set()
        offset, page = 0, 100
        while True:
            batch = yield steps.Call(client, "list_collections", {"limit": page, "offset": offset})
            names.update(n for n in (index_of(str(c.name)) for c in batch) if n is not None)
            if len(batch) < page:
                break
            offset += page
        found: list[IndexInfo] = []
        for name in sorted(names):
            _in_time(deadline, "counting an index")
            coll = yield steps.Open(name)
            if coll is None or EMBEDDER_KEY not in (coll.metadata or {}):
                continue
            count = yield steps.Call(coll, "count", {})
            found.append(IndexInfo(name=name, passages=int(count)))
        return IndexList(index="", backend=self.name, indexes=found)
