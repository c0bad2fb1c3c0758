"""The ``elastic`` backend: indexplug indexes as Elasticsearch 8 indices.

One indexplug index is one Elasticsearch index named ``<prefix><name>`` whose mapping carries
indexplug's mark and facts in ``_meta`` (see :mod:`indexplug_elastic.mapping`).  The pieces:

* :mod:`~indexplug_elastic.options` validates the settings; :mod:`~indexplug_elastic.connection`
  makes the client lazily (making a backend never connects) and answers readiness;
* :mod:`~indexplug_elastic.context` holds what the ops share, including each index's facts;
* :mod:`~indexplug_elastic.writes` adds (with :mod:`~indexplug_elastic.bulk`),
  :mod:`~indexplug_elastic.reads` searches (with :mod:`~indexplug_elastic.search`), and
  :mod:`~indexplug_elastic.failures` turns every error into a typed outcome;
* this module ties them into the five ops, ``op_drop`` and the kit's hooks (``tamper``,
  ``tamper_record``, ``delete_rows``).

Every request is bounded by what is left of the op's deadline (the client's request timeout,
and the server-side ``timeout`` of searches and writes), so an op answers ``IndexTimeout``
itself instead of being abandoned by the guard.  Every write is refreshed before it returns:
an ``INDEXED`` answer means a search started afterwards sees the passages.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, cast

import numpy as np
import orjson
from elasticsearch import ApiError
from indexplug.deadlines import Deadline
from indexplug.filters import ALL_OPS
from indexplug.outcomes import (
    AddOutcome,
    GetOutcome,
    IndexesOutcome,
    IndexFailed,
    IndexStatus,
    Removed,
    RemoveOutcome,
    ScanOutcome,
    SearchOutcome,
    StatusOutcome,
    VectorAddOutcome,
    VectorSearchOutcome,
)
from indexplug.passages import Passage
from indexplug.protocols import Capabilities, Embedder, Granularity, Readiness, Vector

from indexplug_elastic import migrate, reads, writes
from indexplug_elastic.connection import Connection
from indexplug_elastic.context import Context
from indexplug_elastic.documents import Stored, inner_hits, key_doc_id, nested, parent, record_of
from indexplug_elastic.failures import Failure, failure, is_index_missing, late
from indexplug_elastic.filtering import terms_of
from indexplug_elastic.mapping import (
    KEY,
    MO,
    MV,
    PID,
    PROV,
    PROV_PATH,
    TERMS,
    TEXT,
    TEXT_PATH,
    VECTOR,
    FlatLayout,
    ForeignIndex,
)
from indexplug_elastic.options import ElasticOptions, parse_options
from indexplug_elastic.plugin import DESCRIPTION
from indexplug_elastic.search import SCALES

T = TypeVar("T")


class ElasticBackend:
    """See the module docstring and ``docs/backends/elastic.md`` for every option."""

    name = "elastic"
    description = DESCRIPTION

    def __init__(
        self,
        options: Mapping[str, Any] | ElasticOptions | None = None,
        *,
        embedder_factory: Callable[[str], Embedder] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.opts = options if isinstance(options, ElasticOptions) else parse_options(options or {})
        self.mode = self.opts.search_mode
        self.score_scale = SCALES[self.mode]
        self.capabilities = Capabilities(
            filters=True,
            # Every operator, served by the bool queries of indexplug_elastic.filtering over
            # typed keyword terms: exactly indexplug.filters.matches (held by a property test
            # against it on a real server).
            filter_operators=ALL_OPS,
            get=True,
            scan=True,
            indexes=True,
            # One document per key, its passages nested: replacing a key is one index request,
            # atomic in Lucene, so no reader sees both versions or neither.
            keys=True,
            deletion=True,
            persistence=True,
            concurrent_writers=True,
            multiprocess_writers=True,
            server=True,
            dense=self.opts.embedder is not None,
            # The vector interface (add_vectors, search_vector, with_vectors): kNN and hybrid
            # modes, whose indexes hold one dense_vector per passage.  Not in bm25 mode, whose
            # score scale (es_bm25) a search by vector cannot answer on.
            vectors=self.opts.embedder is not None and self.mode != "bm25",
            # A passage's record (text, prov in _source) is apart from what searches match
            # (the terms postings, the vector): a document found without its record is
            # INDEX_FAILED (documents.RecordLost), held by the kit's integrity.rows.
            separate_records=True,
            # A claim (shown on the card; the guard runs every op on a worker thread anyway):
            # a BM25 search's requests go through Connection.bounded (one try per node, each
            # with what is left of the deadline as its timeout), so it stops by itself at its
            # deadline.  Not claimed with an embedder (loading a model is not bounded) nor for
            # writes (a failed add rolls back past its deadline).
            cooperative_deadlines=(frozenset({"search"}) if self.opts.embedder is None else False),
        )
        self._cx = Context(self.opts, Connection(self.opts, environ), embedder_factory)

    def es_index(self, index: str) -> str:
        """The Elasticsearch index behind ``index``."""
        return self._cx.es_index(index)

    def readiness(self) -> Readiness:
        ready = self._cx.conn.ping()
        if not ready.ready or not self.opts.embedder:
            return ready
        try:
            return self._cx.embedder().readiness()
        except Exception as exc:
            return Readiness.no(f"embedder {self.opts.embedder}: {type(exc).__name__}: {exc}")

    def close(self) -> None:
        self._cx.conn.close()

    async def aclose(self) -> None:
        """Close the async client of the running event loop (the blocking one stays)."""
        await self._cx.conn.aclose()

    def _guarded(
        self, index: str, doing: str, deadline: Deadline, op: Callable[[], T]
    ) -> T | Failure:
        """Run ``op`` with the rules every op shares: late is a timeout, a foreign index a
        failure, and any exception the outcome :func:`~indexplug_elastic.failures.failure`
        says (with a note when part of a write is known to have reached the server)."""
        if t := late(index, self.name, deadline, doing):
            return t
        try:
            return op()
        except Exception as exc:
            return self._failed(exc, index, doing, deadline)

    async def _aguarded(
        self, index: str, doing: str, deadline: Deadline, plan: Callable[[], reads.Plan[T]]
    ) -> T | Failure:
        """:meth:`_guarded` for a read plan run on the event loop (:func:`reads.adrive`)."""
        if t := late(index, self.name, deadline, doing):
            return t
        try:
            return await reads.adrive(self._cx, deadline, plan())
        except Exception as exc:
            return self._failed(exc, index, doing, deadline)

    def _failed(self, exc: Exception, index: str, doing: str, deadline: Deadline) -> Failure:
        if isinstance(exc, ForeignIndex):
            return self._cx.failed(index, str(exc), "ForeignIndex")
        if isinstance(exc, FlatLayout):
            return self._cx.failed(index, str(exc), "FlatLayout")
        if isinstance(exc, migrate.MigrationFailed):
            return self._cx.failed(index, str(exc), "MigrationFailed")
        out = failure(exc, index=index, backend=self.name, deadline=deadline, doing=doing)
        written = getattr(exc, "partial", None)
        if written is not None and written.done:
            note = (
                f"; {len(written.done)} passage(s) were stored before that (adding them "
                "again reports them as known)"
            )
            out = out.model_copy(update={"reason": out.reason + note})
        return out

    def add(
        self, index: str, passages: Sequence[Passage], *, max_bytes: int | None, deadline: Deadline
    ) -> AddOutcome:
        es_index = self._cx.es_index(index)
        try:
            out = self._guarded(
                index,
                "adding",
                deadline,
                lambda: writes.add(self._cx, index, es_index, passages, max_bytes, deadline),
            )
            return cast(AddOutcome, out)  # without vectors given: never BAD_REQUEST
        finally:
            self._cx.forget_count(es_index)  # even a failed add may have stored some

    # -- the vector interface (Capabilities.vectors: kNN and hybrid modes) ----------------
    def vector_space(self) -> tuple[str, int]:
        """The configured embedder's name and dimension (recorded in ``_meta`` with every
        index this backend creates; an index recording another is refused by every op)."""
        emb = self._cx.embedder()
        return emb.name, int(emb.dim)

    def query_vector(self, text: str) -> Vector:
        """The configured embedder's query vector of ``text``: the one a kNN leg searches by."""
        return self._cx.embedder().embed_query(text, Granularity.TEXT)

    def add_vectors(
        self,
        index: str,
        passages: Sequence[Passage],
        vectors: Sequence[Vector],
        *,
        embedder: str,
        max_bytes: int | None,
        deadline: Deadline,
    ) -> VectorAddOutcome:
        """``add``, with ``vectors[i]`` written as passage ``i``'s ``dense_vector`` instead
        of one the embedder makes: the same bulk write, keys, budget and rollback.  A passage
        already stored is *known* and keeps its vector (a key written again keeps the vectors
        of the passages it held).  Vectors of another embedder than the index records answer
        ``BadRequest`` (field ``embedder``) before anything is written."""
        es_index = self._cx.es_index(index)
        given = writes.Given(
            vectors={
                p.id: np.asarray(v, dtype=np.float32)
                for p, v in zip(passages, vectors, strict=True)
            },
            embedder=embedder,
            dim=int(np.asarray(vectors[0]).shape[0]) if len(vectors) else None,
        )
        try:
            return self._guarded(
                index,
                "adding",
                deadline,
                lambda: writes.add(self._cx, index, es_index, passages, max_bytes, deadline, given),
            )
        finally:
            self._cx.forget_count(es_index)

    def search_vector(
        self,
        index: str,
        vector: Vector,
        *,
        top_k: int,
        embedder: str,
        with_vectors: bool,
        deadline: Deadline,
        filters: Any = None,
    ) -> VectorSearchOutcome:
        """The ``top_k`` passages nearest ``vector`` by the kNN leg alone, with the outcomes
        of ``search`` (a fresh count decides ``NO_MATCH`` from ``INDEX_EMPTY``).  In hybrid
        mode a vector has no text for BM25: the hits are the kNN leg's reciprocal ranks (the
        ``rrf`` scale of that one leg).  With ``with_vectors`` each hit carries its stored
        vector, read by the same search (doc values of ``passages.vector``)."""
        es_index = self._cx.es_index(index)
        query = reads.ByVector(
            vector=np.asarray(vector, dtype=np.float32),
            embedder=embedder,
            with_vectors=with_vectors,
        )
        return self._guarded(
            index,
            "searching",
            deadline,
            lambda: reads.search_vector(self._cx, index, es_index, query, top_k, filters, deadline),
        )

    def search(
        self,
        index: str,
        query: str,
        *,
        top_k: int,
        deadline: Deadline,
        filters: Any = None,
    ) -> SearchOutcome:
        es_index = self._cx.es_index(index)
        return self._guarded(
            index,
            "searching",
            deadline,
            lambda: reads.search(self._cx, index, es_index, query, top_k, filters, deadline),
        )

    async def asearch(
        self,
        index: str,
        query: str,
        *,
        top_k: int,
        deadline: Deadline,
        filters: Any = None,
    ) -> SearchOutcome:
        """:meth:`search` on the event loop (``AsyncElasticsearch``; a query embedding on a
        thread)."""
        es_index = self._cx.es_index(index)
        out = await self._aguarded(
            index,
            "searching",
            deadline,
            lambda: reads.search_plan(self._cx, index, es_index, query, top_k, filters, deadline),
        )
        return cast(SearchOutcome, out)  # a text search: never BAD_REQUEST

    def get(
        self, index: str, ids: Sequence[str], *, keys: Sequence[str] = (), deadline: Deadline
    ) -> GetOutcome:
        """Passages by id (``_mget``); a missing index has every id missing."""
        es_index = self._cx.es_index(index)
        plan = reads.get_plan(self._cx, index, es_index, ids, keys, deadline)
        return self._guarded(
            index, "reading passages", deadline, lambda: reads.drive(self._cx, deadline, plan)
        )

    async def aget(
        self, index: str, ids: Sequence[str], *, keys: Sequence[str] = (), deadline: Deadline
    ) -> GetOutcome:
        """:meth:`get` on the event loop."""
        es_index = self._cx.es_index(index)
        return await self._aguarded(
            index,
            "reading passages",
            deadline,
            lambda: reads.get_plan(self._cx, index, es_index, ids, keys, deadline),
        )

    def scan(
        self, index: str, *, filters: Any, after: str | None, limit: int, deadline: Deadline
    ) -> ScanOutcome:
        """A page in id order (sorted on ``pid``, ``search_after`` the cursor)."""
        es_index = self._cx.es_index(index)
        plan = reads.scan_plan(self._cx, index, es_index, filters, after, limit, deadline)
        return self._guarded(
            index, "scanning", deadline, lambda: reads.drive(self._cx, deadline, plan)
        )

    async def ascan(
        self, index: str, *, filters: Any, after: str | None, limit: int, deadline: Deadline
    ) -> ScanOutcome:
        """:meth:`scan` on the event loop."""
        es_index = self._cx.es_index(index)
        return await self._aguarded(
            index,
            "scanning",
            deadline,
            lambda: reads.scan_plan(self._cx, index, es_index, filters, after, limit, deadline),
        )

    def indexes(self, *, deadline: Deadline) -> IndexesOutcome:
        """The marked indexes under this backend's ``prefix``, with their counts."""
        plan = reads.indexes_plan(self._cx, deadline)
        return self._guarded(
            "", "listing indexes", deadline, lambda: reads.drive(self._cx, deadline, plan)
        )

    async def aindexes(self, *, deadline: Deadline) -> IndexesOutcome:
        """:meth:`indexes` on the event loop."""
        return await self._aguarded(
            "", "listing indexes", deadline, lambda: reads.indexes_plan(self._cx, deadline)
        )

    def remove(self, index: str, ids: Sequence[str], *, deadline: Deadline) -> RemoveOutcome:
        es_index = self._cx.es_index(index)

        def op() -> RemoveOutcome:
            client = self._cx.conn.within(deadline)
            if self._cx.meta(client, es_index, deadline, fresh=True) is None:
                return Removed(index=index, backend=self.name, removed=0, missing_ids=list(ids))
            return writes.remove(self._cx, index, es_index, ids, deadline)

        try:
            return self._guarded(index, "removing", deadline, op)
        finally:
            self._cx.forget_count(es_index)

    def status(self, index: str, *, deadline: Deadline) -> StatusOutcome:
        es_index = self._cx.es_index(index)

        def op() -> StatusOutcome:
            client = self._cx.conn.within(deadline)
            meta = self._cx.meta(client, es_index, deadline, fresh=True)
            if meta is None:
                return IndexStatus(index=index, backend=self.name, exists=False, passages=0)
            try:
                count = self._cx.count(client, es_index)
            except ApiError as exc:
                if exc.meta.status != 503 or not self._cx.being_created(client, es_index):
                    raise
                count = 0  # a writer is creating it this very moment: it holds nothing yet
            stats = client.indices.stats(index=es_index, metric="store")
            store = self._cx.stats_of(stats, es_index)
            return IndexStatus(
                index=index,
                backend=self.name,
                exists=True,
                passages=count,
                bytes_used=int(store["primaries"]["store"]["size_in_bytes"]),
                max_bytes=meta.max_bytes,
                embedder=meta.embedder,
                details={
                    "es_index": es_index,
                    "analysis": f"{meta.analyzer} ({meta.analysis})",
                    "mode": self.mode,
                    "bytes_with_replicas": int(store["total"]["store"]["size_in_bytes"]),
                },
            )

        return self._guarded(index, "reading the status", deadline, op)

    def op_drop(self, index: str, *, deadline: Deadline) -> IndexStatus | IndexFailed | Any:
        """Delete the whole Elasticsearch index -- only if indexplug made it."""
        es_index = self._cx.es_index(index)

        def op() -> IndexStatus:
            client = self._cx.conn.within(deadline)
            if self._cx.meta(client, es_index, deadline, fresh=True, flat_ok=True) is not None:
                wait = self._cx.server_timeout(deadline)
                # a migrated index is deleted through the index behind its alias (and with it
                # the alias): Elasticsearch deletes no index by an alias's name
                concrete = list(client.indices.get(index=es_index, features="aliases"))
                try:
                    client.indices.delete(
                        index=",".join(concrete), timeout=wait, master_timeout=wait
                    )
                except ApiError as exc:
                    if not is_index_missing(exc):  # someone else dropped it first: fine
                        raise
            self._cx.forget(es_index)
            return IndexStatus(index=index, backend=self.name, exists=False, passages=0)

        return self._guarded(index, "dropping", deadline, op)

    def op_migrate(self, index: str, *, deadline: Deadline) -> StatusOutcome:
        """Move an index of the flat layout of earlier versions (one document per passage) to
        the current layout behind an alias (:mod:`indexplug_elastic.migrate`); resumable, and
        nothing for an index that has the current layout already.  Answers its status."""
        es_index = self._cx.es_index(index)

        def op() -> StatusOutcome:
            migrate.migrate(self._cx, index, es_index, deadline)
            return self.status(index, deadline=deadline)

        try:
            return self._guarded(index, "migrating", deadline, op)
        finally:
            self._cx.forget(es_index)

    def op_optimize(self, index: str, *, deadline: Deadline) -> StatusOutcome:
        """Merge the index into one segment (``_forcemerge``): after a large bulk load, searches
        then visit one segment instead of one per refresh (measured on SciFact: ES CPU per
        top-100 search down by about a third).  Heavy; meant for indexes that are done growing."""
        es_index = self._cx.es_index(index)

        def op() -> StatusOutcome:
            client = self._cx.conn.within(deadline)
            if self._cx.meta(client, es_index, deadline, fresh=True) is not None:
                client.indices.forcemerge(index=es_index, max_num_segments=1)
            return self.status(index, deadline=deadline)

        return self._guarded(index, "optimizing", deadline, op)

    # -- conformance-kit hooks ---------------------------------------------------------
    def tamper(self, index: str, passage_id: str, new_text: str) -> None:
        """Conformance-kit hook: change a stored passage's text behind the backend's back.

        The document is rewritten with the new text but its old id, provenance and vector, and
        with the terms of both texts, so the searches that found it still do and the guard
        gets to see (and refuse) a passage whose text no longer matches its id.
        """
        self.tamper_record(index, passage_id, {"text": new_text})

    def tamper_record(self, index: str, passage_id: str, changes: Mapping[str, Any]) -> None:
        """Conformance-kit hook: alter fields of a stored passage's record behind the
        backend's back (``text``, ``metadata``, ``licence``, ``provenance``, ``start``,
        ``end``; ``digest``: ``None`` removes it), its id and digest (unless named) kept in
        ``prov``.

        The search structure is left finding it: its vector (of the old text), the terms of
        both texts (client analysis) and the filter terms of the metadata it now has, so the
        searches that found it still do and the guard gets to see (and refuse) it.
        """
        es_index, client, meta, key, stored = self._stored(index, passage_id)
        old = stored[passage_id]
        old_text = _field(old, TEXT_PATH)
        prov = orjson.loads(_field(old, PROV_PATH))
        source = dict(prov["source"])
        for name in ("licence", "provenance"):
            if name in changes:
                source[name] = changes[name]
        prov["source"] = source
        for name in ("start", "end", "metadata", "digest"):
            if name in changes:
                prov[name] = changes[name]
        text = str(changes.get("text", old_text))
        doc = self._structure(meta, passage_id, old_text, prov.get("metadata") or {}, also=text)
        doc[TEXT] = text
        doc[PROV] = orjson.dumps(prov).decode()
        self._rewrite(es_index, client, meta, key, stored, {passage_id: doc})

    def delete_rows(self, index: str, ids: Sequence[str]) -> None:
        """Conformance-kit hook: delete passages' records (their stored ``text`` and ``prov``)
        but not what searches match (terms, vector, filter terms).

        Elasticsearch keeps a passage's stored fields and its postings together, so this is
        the closest equivalent: each passage's document is rewritten with the passage's search
        structure alone (with server analysis the text is its postings and stays; its ``prov``
        goes).  Searches that find one must answer ``INDEX_FAILED``.
        """
        for pid in ids:
            es_index, client, meta, key, stored = self._stored(index, pid)
            old = stored[pid]
            if _field(old, PROV_PATH) is None:
                continue  # its record is gone already
            prov = orjson.loads(_field(old, PROV_PATH))
            text = _field(old, TEXT_PATH)
            doc = self._structure(meta, pid, text, prov.get("metadata") or {})
            if meta.analysis != "client":
                doc[TEXT] = text
            self._rewrite(es_index, client, meta, key, stored, {pid: doc})

    def _stored(
        self, index: str, passage_id: str
    ) -> tuple[str, Any, Any, str | None, dict[str, Stored]]:
        """(Elasticsearch index, client, facts, key, every passage of its document as stored)
        of a stored passage, for the hooks."""
        es_index = self._cx.es_index(index)
        deadline = Deadline.after(30.0)
        client = self._cx.conn.within(deadline)
        meta = self._cx.meta(client, es_index, deadline, fresh=True)
        if meta is None:
            raise LookupError(f"index {index} does not exist")
        client.indices.refresh(index=es_index)
        found = client.search(index=es_index, **reads.get_body([passage_id], [], 30_000))
        hits = found["hits"]["hits"]
        if not hits:
            raise LookupError(f"passage {passage_id} is not in index {index}")
        key = (hits[0].get("_source") or {}).get(KEY)
        if key is None:
            return es_index, client, meta, None, {s.pid: s for s in inner_hits(hits[0])}
        every = client.search(index=es_index, **reads.get_body([], [key], 30_000))
        stored = {s.pid: s for h in every["hits"]["hits"] for s in inner_hits(h)}
        return es_index, client, meta, key, stored

    def _rewrite(
        self,
        es_index: str,
        client: Any,
        meta: Any,
        key: str | None,
        stored: Mapping[str, Stored],
        altered: Mapping[str, dict[str, Any]],
    ) -> None:
        """Write a document again, its passages as stored except ``altered`` (nested documents
        as they are), for the hooks."""
        children: list[dict[str, Any]] = []
        passages = []
        analysis = self._cx.analysis if meta.analysis == "client" else None
        for pid, s in sorted(stored.items()):
            if pid in altered:
                children.append(altered[pid])
                continue
            p = record_of(s)
            passages.append(p)
            vec = None
            if meta.embedder is not None and self.opts.embedder:
                vec = self._cx.embedder().embed_documents([p.text], Granularity.TEXT)[0]
            children.append(nested(p, analysis=analysis, vector=vec))
        doc = parent(key, passages, children)
        doc_id = key_doc_id(key) if key is not None else next(iter(stored))
        client.index(index=es_index, id=doc_id, document=doc, refresh=True)

    def _structure(
        self, meta: Any, pid: str, text: str, metadata: Mapping[str, Any], *, also: str = ""
    ) -> dict[str, Any]:
        """What searches match for a passage of ``text`` (and ``also``'s terms): the client's
        terms, the vector of ``text`` and the filter terms of ``metadata``."""
        doc: dict[str, Any] = {}
        doc[MV], doc[MO] = terms_of(metadata)
        doc[PID] = pid
        if meta.analysis == "client":
            doc[TERMS] = self._cx.analysis.analyze(f"{text} {also}".strip())
        if meta.embedder is not None and self.opts.embedder:
            vec = self._cx.embedder().embed_documents([text], Granularity.TEXT)[0]
            doc[VECTOR] = [float(x) for x in vec]
        return doc


def _field(stored: Stored, name: str) -> Any:
    values = stored.fields.get(name)
    return values[0] if isinstance(values, list) and values else None
