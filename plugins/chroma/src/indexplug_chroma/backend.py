"""The chroma backend: dense cosine search over Chroma, with embeddings from indexplug.

What each op guarantees, and how:

* **One embedder per index.** The first write records the embedder's name and dimension in the
  collection's metadata; every op compares them with the backend's embedder and refuses a
  mismatch (``INDEX_FAILED``, naming both), so vectors of two models are never mixed.
* **Exact passages.** Records carry the full provenance and the passage's digest
  (:mod:`indexplug_chroma.records`); a hit is the passage exactly as added, or, if it was
  altered behind our back, a passage whose id or digest no longer matches, which the guard
  refuses to serve.
* **Records lost behind the vectors.** Chroma keeps a record (document, metadata) apart from
  its vector (the HNSW index); a vector whose record was deleted behind it comes back from a
  query with no document.  Such an answer, or an index that counts no records while its
  vector index still answers, is ``INDEX_FAILED`` ("rebuild it"), never a shorter list, "no
  match" or "empty".
* **Known ids.** A passage whose id is stored already is reported known and not written again.
  Writes to one index are serialised within the process (a lock per collection, shared by every
  backend instance on the same folder or server collection), so threads adding the same passage
  at once count it once.
* **Complete answers.** Chroma's HNSW graph can hold a vector that no other node links to: it is
  stored (``get`` and ``count`` see it) but no graph search reaches it, with or without a
  filter.  Inserting near-identical vectors makes this likely: the conformance kit's 500-passage
  concurrency check lost one or two passages in about one run in six, in whatever order they were
  written.  A search that Chroma answers with fewer hits than ``top_k`` although more passages
  (matching the filter) are stored is therefore answered again by an exact scan of the stored
  embeddings.  A search for fewer passages than stored is approximate, as HNSW is.
* **Budgets.** Projected before anything is written, measured (embedded) or estimated (server)
  after; a refused write deletes what it wrote, and a refused first write removes the index, so
  a refusal leaves the collection as it was.  ``max_bytes`` lives in the collection's metadata.
* **Deadlines.** Checked before each step (embedding, writing, querying) and after the query, so
  a search that ran past its limit answers ``INDEX_TIMEOUT`` rather than late results.
* **Outages.** A server that does not answer gives ``INDEX_UNAVAILABLE``; the HTTP client is
  dropped and rebuilt on the next op, so the backend recovers when the server is back.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from indexplug.budget import effective_max_bytes, over_budget
from indexplug.deadlines import Deadline
from indexplug.embedcache import EmbeddingCache, cache_for, embed_passages
from indexplug.outcomes import (
    AddOutcome,
    Hit,
    Indexed,
    IndexEmpty,
    IndexFailed,
    IndexStatus,
    IndexTimeout,
    IndexUnavailable,
    NoMatch,
    Removed,
    RemoveOutcome,
    Searched,
    SearchOutcome,
    StatusOutcome,
)
from indexplug.passages import MetadataValue, Passage, passage_from_provenance
from indexplug.protocols import Capabilities, Embedder, Granularity, Readiness, Vector

from indexplug_chroma import records, sizes
from indexplug_chroma.errors import (
    ChromaProblem,
    DeadlinePassed,
    EmbedderMismatch,
    RecordLost,
    WriteLockBusy,
    chromadb_missing,
    failure_outcome,
)
from indexplug_chroma.scale import DESCRIPTION, SCALE
from indexplug_chroma.settings import ChromaSettings
from indexplug_chroma.stores import EmbeddedStore, ServerStore, Store, collection_name

EMBEDDER_KEY = "indexplug:embedder"
DIM_KEY = "indexplug:dim"
BUDGET_KEY = "indexplug:max_bytes"
PAYLOAD_KEY = "indexplug:payload_bytes"
SCHEMA_KEY = "indexplug:schema"
SCHEMA_VERSION = 1
RECORDS_KEY = "indexplug:records"
"""Where the collection's records keep their provenance, fixed when it is created:
:data:`IN_DOCUMENT` (after the text, :mod:`indexplug_chroma.records`) or ``"metadata"`` (the
``ip.prov`` key, ``plain_documents``).  A collection without the key predates it and holds
metadata-layout records; it keeps being written that way."""
IN_DOCUMENT = "document"


def _provenance_in_document(collection_meta: Mapping[str, Any]) -> bool:
    """Whether a collection (by its metadata) keeps each record's provenance in the document."""
    return collection_meta.get(RECORDS_KEY) == IN_DOCUMENT


EMBED_CHUNK = 256
"""Passages embedded between deadline checks (and written to the embedding cache)."""
ID_CHUNK = 1000
"""Ids per ``get``/``delete`` call."""

_WRITE_LOCKS: dict[str, threading.Lock] = {}
"""Store key (folder, or server URL and collection) -> the lock serialising its writes."""
_WRITE_LOCKS_LOCK = threading.Lock()


class ChromaBackend:
    """See the module docstring; settings are :class:`~indexplug_chroma.settings.ChromaSettings`."""

    name = "chroma"
    description = DESCRIPTION
    score_scale = SCALE

    def __init__(
        self,
        home: Path,
        settings: ChromaSettings | None = None,
        embedder_factory: Callable[[str], Embedder] | None = None,
    ) -> None:
        self.home = Path(home)
        self.settings = settings or ChromaSettings()
        server = self.settings.mode == "server"
        self.capabilities = Capabilities(
            filters=True,
            deletion=True,
            persistence=True,
            concurrent_writers=True,
            multiprocess_writers=False,
            server=server,
            dense=True,
            # Chroma keeps records apart from vectors in both modes; the kit's delete_rows
            # hook can reach an embedded folder's files only, so only that mode claims it
            separate_records=not server,
        )
        self._store: Store = (
            ServerStore(self.settings) if server else EmbeddedStore(self.home, self.settings)
        )
        self._embedder_factory = embedder_factory
        self._embedder: Embedder | None = None
        self._embedder_lock = threading.Lock()
        self._warming = False
        self._max_batch: int | None = None
        self._handles: dict[str, tuple[Any, Any, list[str]]] = {}
        """index -> (client, collection, what a query includes) for searches (see
        :meth:`_search_handle`)."""

    # -- embedder ----------------------------------------------------------------------------
    def embedder(self) -> Embedder:
        """The configured embedder, created on first use (creating one may be slow or fail)."""
        with self._embedder_lock:
            if self._embedder is None:
                factory = self._embedder_factory
                if factory is None:
                    from indexplug.plugins import get_registry

                    factory = get_registry().embedder
                self._embedder = factory(self.settings.embedder)
            return self._embedder

    def warm(self) -> None:
        """Load the embedder's model now, outside any deadline (the first embedding of a
        process otherwise pays the model load inside its op's deadline)."""
        emb = self.embedder()
        emb.embed_query("warm up", Granularity.TEXT)

    def _warm_in_background(self) -> None:
        """Start loading the model on a daemon thread, once per backend.

        Called when the backend is first found ready: the model (seconds of imports and
        weights) then loads while the first ops run, e.g. while an index is filled from the
        embedding cache, instead of inside the deadline of the first search.  A failure is
        ignored here; the op that needs the model reports it.
        """
        with self._embedder_lock:
            if self._warming:
                return
            self._warming = True

        def run() -> None:
            try:
                self.warm()
            except Exception:
                pass

        threading.Thread(target=run, name="indexplug-chroma-warm", daemon=True).start()

    def _cache(self, emb: Embedder) -> EmbeddingCache | None:
        if not self.settings.embed_cache:
            return None
        return cache_for(emb, root=self.settings.embed_cache_dir)

    def _embed(self, emb: Embedder, passages: Sequence[Passage], deadline: Deadline) -> list[Any]:
        cache = self._cache(emb)
        out: list[Any] = []
        for i in range(0, len(passages), EMBED_CHUNK):
            _in_time(deadline, "embedding the passages")
            chunk = embed_passages(
                emb, passages[i : i + EMBED_CHUNK], Granularity.TEXT, cache=cache
            )
            out.extend(_checked_vector(v, emb) for v in chunk)
        return out

    # -- readiness ---------------------------------------------------------------------------
    def readiness(self) -> Readiness:
        missing = chromadb_missing()
        if missing:
            return Readiness.no(missing)
        try:
            emb = self.embedder()
        except Exception as exc:
            return Readiness.no(
                f"embedder '{self.settings.embedder}' cannot be created: {type(exc).__name__}: "
                f"{exc}"
            )
        ready = emb.readiness()
        if not ready.ready:
            return Readiness.no(f"embedder '{emb.name}' is not ready: {ready.reason}")
        beat = self._store.heartbeat()
        if beat:
            return Readiness.no(beat)
        self._warm_in_background()
        return Readiness.yes()

    def close(self) -> None:
        self._handles.clear()
        self._store.close()

    # -- helpers -----------------------------------------------------------------------------
    @contextmanager
    def _write_lock(self, index: str, deadline: Deadline) -> Iterator[None]:
        with _WRITE_LOCKS_LOCK:
            lock = _WRITE_LOCKS.setdefault(self._store.key(index), threading.Lock())
        if not lock.acquire(timeout=deadline.remaining()):
            raise WriteLockBusy(f"another write to '{index}' held it past the deadline")
        try:
            yield
        finally:
            lock.release()

    def _check_embedder(self, index: str, collection: Any, emb: Embedder) -> dict[str, Any]:
        """The collection's metadata, after checking it was built with ``emb``."""
        meta = dict(collection.metadata or {})
        name, dim = meta.get(EMBEDDER_KEY), meta.get(DIM_KEY)
        if name is None or dim is None:
            raise EmbedderMismatch(
                f"collection '{collection.name}' records no indexplug embedder (it was not "
                "created by indexplug); refusing to mix embeddings with it"
            )
        if name != emb.name or int(dim) != emb.dim:
            raise EmbedderMismatch(
                f"index '{index}' was built with embedder {name} (dim {dim}) but this backend "
                f"is configured with {emb.name} (dim {emb.dim}); searching or writing it would "
                f"mix embeddings. Use --embedder {name} (option embedder={name}) for this "
                "index, or build a new index"
            )
        return meta

    def _existing(self, collection: Any, ids: Sequence[str]) -> set[str]:
        found: set[str] = set()
        for i in range(0, len(ids), ID_CHUNK):
            got = collection.get(ids=list(ids[i : i + ID_CHUNK]), include=[])
            found.update(got["ids"])
        return found

    def _batch_size(self, client: Any) -> int:
        if self._max_batch is None:
            try:
                self._max_batch = max(1, int(client.get_max_batch_size()))
            except Exception:
                self._max_batch = 1000
        return self._max_batch

    def _size(
        self, index: str, collection: Any | None, meta: Mapping[str, Any], dim: int
    ) -> int | None:
        """Measured (embedded) or estimated (server) bytes of the index now."""
        if not self._store.estimate_sizes:
            if self._store.exists(index) is False:
                return 0
            return self._store.disk_bytes(index)
        count = collection.count() if collection is not None else 0
        return sizes.estimated_bytes(count, int(meta.get(PAYLOAD_KEY, 0)), dim)

    def _failure(
        self, index: str, exc: BaseException, deadline: Deadline
    ) -> IndexFailed | IndexTimeout | IndexUnavailable:
        emb = self._embedder
        not_ready = None
        if emb is not None and not isinstance(exc, ChromaProblem):
            try:
                r = emb.readiness()
                not_ready = None if r.ready else f"embedder '{emb.name}': {r.reason}"
            except Exception:
                not_ready = None
        out = failure_outcome(
            index, self.name, exc, deadline, self.settings, embedder_not_ready=not_ready
        )
        if out.code == "INDEX_UNAVAILABLE" and isinstance(self._store, ServerStore):
            self._store.reset()
        return out

    # -- ops ---------------------------------------------------------------------------------
    def add(
        self, index: str, passages: Sequence[Passage], *, max_bytes: int | None, deadline: Deadline
    ) -> AddOutcome:
        try:
            _in_time(deadline, "starting the write")
            emb = self.embedder()
            dim = emb.dim
            ids = [p.id for p in passages]
            known: set[str] = set()
            if passages and self._store.exists(index) is not False:
                with self._store.use(index) as client:
                    coll = self._store.get(client, index)
                    if coll is not None:
                        self._check_embedder(index, coll, emb)
                        known = self._existing(coll, ids)
            todo = [p for p in passages if p.id not in known]
            vectors = dict(zip([p.id for p in todo], self._embed(emb, todo, deadline), strict=True))
            with self._write_lock(index, deadline):
                try:
                    return self._add_locked(index, passages, vectors, max_bytes, emb, dim, deadline)
                finally:
                    self._store.forget_count(index)
        except Exception as exc:
            return self._failure(index, exc, deadline)

    def _add_locked(
        self,
        index: str,
        passages: Sequence[Passage],
        vectors: dict[str, Vector],
        requested: int | None,
        emb: Embedder,
        dim: int,
        deadline: Deadline,
    ) -> AddOutcome:
        ids = [p.id for p in passages]
        coll: Any = None
        meta: dict[str, Any] = {}
        known: set[str] = set()
        if self._store.exists(index) is not False:
            with self._store.use(index) as client:
                coll = self._store.get(client, index)
                if coll is not None:
                    meta = self._check_embedder(index, coll, emb)
                    known = self._existing(coll, ids)
        new = [p for p in passages if p.id not in known]
        if coll is None and not new:  # nothing to write, and no index to record a budget in
            return Indexed(index=index, backend=self.name, added=0, known=0)
        stored = meta.get(BUDGET_KEY)
        budget = effective_max_bytes(int(stored) if stored is not None else None, requested)
        estimate = self._store.estimate_sizes
        if new and budget is not None:
            before = self._size(index, coll, meta, dim)
            if before is not None:
                if coll is None and not estimate and self._store.exists(index) is False:
                    before += sizes.EMPTY_FOLDER_BYTES
                added = (
                    sizes.payload_total(new) + len(new) * dim * sizes.FLOAT_BYTES
                    if estimate
                    else sizes.projected_bytes(new, dim)
                )
                before += added
            refused = over_budget(
                index,
                self.name,
                needed=before,
                max_bytes=budget,
                check="projected",
                estimate=estimate,
            )
            if refused:
                return refused
        _in_time(deadline, "writing")
        missing = [p for p in new if p.id not in vectors]
        if missing:  # removed by another writer since we looked: embed them now
            vectors.update(
                zip([p.id for p in missing], self._embed(emb, missing, deadline), strict=True)
            )
        created = False
        refused = None
        with self._store.use(index) as client:
            if coll is None and new:
                first = {
                    EMBEDDER_KEY: emb.name,
                    DIM_KEY: dim,
                    SCHEMA_KEY: SCHEMA_VERSION,
                    RECORDS_KEY: "metadata" if self.settings.plain_documents else IN_DOCUMENT,
                    PAYLOAD_KEY: 0,
                }
                if requested is not None:
                    first[BUDGET_KEY] = requested
                coll, created = self._store.create(client, index, first)
                meta = self._check_embedder(index, coll, emb)
                stored = meta.get(BUDGET_KEY)
            updated = dict(meta)
            try:
                if new:
                    self._write(client, coll, new, vectors, plain=not _provenance_in_document(meta))
                if coll is not None:
                    updated[PAYLOAD_KEY] = int(meta.get(PAYLOAD_KEY, 0)) + sizes.payload_total(new)
                    if stored is None and requested is not None:
                        updated[BUDGET_KEY] = requested
                    if updated != meta:
                        coll.modify(metadata=updated)
                size_after = self._size(index, coll, updated, dim) if coll is not None else 0
                if budget is not None and new:
                    refused = over_budget(
                        index,
                        self.name,
                        needed=size_after,
                        max_bytes=budget,
                        check="measured",
                        estimate=estimate,
                    )
            except BaseException:
                self._undo(client, coll, index, [p.id for p in new], meta, created)
                if created:
                    self._store_forget(index)
                raise
            if refused:
                self._undo(client, coll, index, [p.id for p in new], meta, created)
        if refused:
            if created:
                self._store_forget(index)
            return refused
        return Indexed.of_batch(
            index=index,
            backend=self.name,
            ids=ids,
            added_ids=[p.id for p in new],
            bytes_used=size_after,
            max_bytes=budget,
            estimate=estimate,
        )

    def _write(
        self,
        client: Any,
        coll: Any,
        new: Sequence[Passage],
        vectors: Mapping[str, Vector],
        *,
        plain: bool,
    ) -> None:
        """Add ``new`` in batches of the size Chroma accepts (the caller undoes a failure),
        each record in the collection's layout (``plain``: the provenance in a metadata key)."""
        step = self._batch_size(client)
        for i in range(0, len(new), step):
            chunk = new[i : i + step]
            documents, metadatas = zip(
                *(records.to_record(p, plain_document=plain) for p in chunk), strict=True
            )
            coll.add(
                ids=[p.id for p in chunk],
                embeddings=np.stack([vectors[p.id] for p in chunk]),
                documents=list(documents),
                metadatas=list(metadatas) if any(m is not None for m in metadatas) else None,
            )

    def _undo(
        self,
        client: Any,
        coll: Any,
        index: str,
        ids: Sequence[str],
        meta: Mapping[str, Any],
        created: bool,
    ) -> None:
        """Take a write back, best effort: delete its ids and restore the metadata; a
        collection this write created is deleted entirely, so a refused or failed first write
        leaves no index behind.  Errors here are swallowed: the caller reports the original
        refusal or error."""
        try:
            if created:
                self._handles.pop(index, None)
                client.delete_collection(collection_name(index))
                return
            if coll is None:
                return
            step = self._batch_size(client)
            for i in range(0, len(ids), step):
                coll.delete(ids=list(ids[i : i + step]))
            coll.modify(metadata=dict(meta))
        except Exception:
            pass

    def _store_forget(self, index: str) -> None:
        """After a first write was taken back: remove the embedded folder it made."""
        if isinstance(self._store, EmbeddedStore):
            try:
                self._store.drop(index)
            except Exception:
                pass

    def search(
        self,
        index: str,
        query: str,
        *,
        top_k: int,
        deadline: Deadline,
        filters: Mapping[str, MetadataValue] | None = None,
    ) -> SearchOutcome:
        from chromadb.errors import NotFoundError

        for attempt in (1, 2):
            try:
                return self._search(index, query, top_k, deadline, filters)
            except NotFoundError as exc:
                # A cached collection deleted (and perhaps re-created) behind our back: look
                # it up again once, so a re-created index is checked and searched afresh.
                self._handles.pop(index, None)
                if attempt == 2:
                    return self._failure(index, exc, deadline)
            except Exception as exc:
                self._handles.pop(index, None)
                return self._failure(index, exc, deadline)
        raise AssertionError("unreachable")

    def _search(
        self,
        index: str,
        query: str,
        top_k: int,
        deadline: Deadline,
        filters: Mapping[str, MetadataValue] | None,
    ) -> SearchOutcome:
        """One search: embed the query, one Chroma query, and as little else as possible.

        Embedding the query is the cost that matters, so the rest is cached: the collection
        handle with its embedder check (never changes for a collection), and the passage count
        (``count_ttl_s``; forgotten by every write of this process).  The count only names
        how many passages were searched, so a cached one never decides an answer alone: an
        index that looks empty is counted again, and a query that finds nothing without a
        filter means the index is empty now, whatever the cache said.
        """
        _in_time(deadline, "starting the search")
        if self._store.exists(index) is False:
            return IndexEmpty(index=index, backend=self.name)
        emb = self.embedder()
        with self._store.use(index) as client:
            handle = self._search_handle(client, index, emb)
            if handle is None:
                return IndexEmpty(index=index, backend=self.name)
            coll, include = handle
            count = self._store.count(index, coll)
            if count == 0:
                self._store.forget_count(index)
                count = self._store.count(index, coll)
                if count == 0:
                    if not self._vectors_without_records(coll, emb.dim):
                        return IndexEmpty(index=index, backend=self.name)
                    count = self._store.count(index, coll)  # written meanwhile: search it
            vector = _checked_vector(emb.embed_query(query, Granularity.TEXT), emb)
            if not np.any(vector):
                # The embedder saw nothing in the query (no word it knows): no direction to
                # rank by, so honestly nothing matches.
                return NoMatch(index=index, backend=self.name, searched=count)
            _in_time(deadline, "querying Chroma")
            where = records.where_clause(filters)
            exact = False
            try:
                res = coll.query(
                    query_embeddings=[vector],
                    n_results=top_k,
                    where=where,
                    include=include,
                )
            except Exception as exc:
                if not _vector_index_unwritten(exc):
                    raise
                _in_time(deadline, "the exact scan")
                res, exact = _exact_query(coll, vector, top_k, where), True
            got = len((res.get("ids") or [[]])[0])
            if got < top_k and not exact:
                # A short answer: every passage (matching the filter), or some the graph
                # cannot reach.  Count what is stored and scan exactly if the graph missed any.
                if where is None:
                    self._store.forget_count(index)
                    count = stored = self._store.count(index, coll)
                else:
                    stored = len(coll.get(where=where, include=[])["ids"])
                if got < stored:
                    _in_time(deadline, "the exact scan")
                    res = _exact_query(coll, vector, top_k, where)
        _in_time(deadline, "the results came back")
        if not (res.get("ids") or [[]])[0] and not filters:
            self._store.forget_count(index)  # emptied behind the cached count
            return IndexEmpty(index=index, backend=self.name)
        hits = _hits(res, filters)
        if not hits:
            return NoMatch(index=index, backend=self.name, searched=count)
        searched = max(count, len(hits))  # a count cached before another client's writes
        return Searched.from_stored(
            index=index, backend=self.name, hits=hits, searched=searched, scale=SCALE
        )

    @staticmethod
    def _vectors_without_records(coll: Any, dim: int) -> bool:
        """For a collection that counts no records: ``False`` if its vector index holds
        nothing either (truly empty), ``True`` if records were written meanwhile; raises
        :class:`RecordLost` if it holds vectors whose records are gone (deleted behind it),
        which would otherwise pass for an empty index."""
        try:
            res = coll.query(
                query_embeddings=[np.ones(dim, dtype=np.float32)],
                n_results=1,
                include=["distances"],
            )
        except Exception as exc:
            if _vector_index_unwritten(exc):
                return False
            raise
        ids = list((res.get("ids") or [[]])[0])
        if not ids:
            return False
        if coll.get(ids=ids, include=[])["ids"]:
            return True
        raise RecordLost(
            f"the index counts no passages, but its vector index still holds passage "
            f"{str(ids[0])[:12]}... (records deleted behind it); the index cannot be trusted: "
            "rebuild it"
        )

    def _search_handle(
        self, client: Any, index: str, emb: Embedder
    ) -> tuple[Any, list[str]] | None:
        """The index's collection, checked against ``emb``, and what its queries ask Chroma
        to include; cached for searches.

        What is cached never changes for a collection (its id, embedder, dimension and record
        layout); a collection deleted behind our back raises ``NotFoundError`` on use, and
        :meth:`search` then looks it up again.  Writes and drops of this instance forget it.
        Records keeping their provenance in the document need no metadata back: asking for
        it costs Chroma about 0.3 ms a top-100 query even where records have none.
        """
        cached = self._handles.get(index)
        if cached is not None and cached[0] is client:
            return cached[1], cached[2]
        coll = self._store.get(client, index)
        if coll is None:
            self._handles.pop(index, None)
            return None
        meta = self._check_embedder(index, coll, emb)
        include = ["documents", "distances"]
        if not _provenance_in_document(meta):
            include.insert(1, "metadatas")
        self._handles[index] = (client, coll, include)
        return coll, include

    def remove(self, index: str, ids: Sequence[str], *, deadline: Deadline) -> RemoveOutcome:
        try:
            _in_time(deadline, "starting the removal")
            missing_all = Removed(index=index, backend=self.name, removed=0, missing_ids=list(ids))
            if self._store.exists(index) is False:
                return missing_all
            emb = self.embedder()
            with self._write_lock(index, deadline), self._store.use(index) as client:
                coll = self._store.get(client, index)
                if coll is None:
                    return missing_all
                meta = self._check_embedder(index, coll, emb)
                present: dict[str, int] = {}
                for i in range(0, len(ids), ID_CHUNK):
                    got = coll.get(
                        ids=list(ids[i : i + ID_CHUNK]), include=["documents", "metadatas"]
                    )
                    for pid, doc, md in zip(
                        got["ids"], got["documents"], got["metadatas"], strict=True
                    ):
                        present[pid] = _record_payload(pid, doc, md)
                _in_time(deadline, "deleting")
                gone = list(present)
                step = self._batch_size(client)
                try:
                    for i in range(0, len(gone), step):
                        coll.delete(ids=gone[i : i + step])
                finally:
                    self._store.forget_count(index)
                if gone:
                    updated = dict(meta)
                    updated[PAYLOAD_KEY] = max(
                        0, int(meta.get(PAYLOAD_KEY, 0)) - sum(present.values())
                    )
                    coll.modify(metadata=updated)
        except Exception as exc:
            return self._failure(index, exc, deadline)
        return Removed.of_batch(index=index, backend=self.name, ids=ids, removed_ids=list(present))

    def status(self, index: str, *, deadline: Deadline) -> StatusOutcome:
        try:
            _in_time(deadline, "reading the status")
            absent = IndexStatus(index=index, backend=self.name, exists=False, passages=0)
            if self._store.exists(index) is False:
                return absent
            emb = self.embedder()
            with self._store.use(index) as client:
                coll = self._store.get(client, index)
                if coll is None:
                    return absent
                meta = self._check_embedder(index, coll, emb)
                count = int(coll.count())
                dim = int(meta[DIM_KEY])
                size = self._size(index, coll, meta, dim)
            _in_time(deadline, "the status came back")
        except Exception as exc:
            return self._failure(index, exc, deadline)
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

    # -- extras ------------------------------------------------------------------------------
    def op_drop(self, index: str, *, deadline: Deadline) -> IndexStatus | IndexFailed:
        """Delete the index entirely (its collection; embedded: its folder too)."""
        try:
            with self._write_lock(index, deadline):
                self._handles.pop(index, None)
                try:
                    self._store.drop(index)
                finally:
                    self._store.forget_count(index)
        except Exception as exc:
            return self._failure(index, exc, deadline)  # type: ignore[return-value]
        return IndexStatus(index=index, backend=self.name, exists=False, passages=0)

    def tamper(self, index: str, passage_id: str, text: str) -> None:
        """Conformance-kit hook: change a stored passage's text behind the backend's back
        (its embedding and provenance stay, as an outside edit would leave them)."""
        with self._store.use(index) as client:
            coll = self._store.get(client, index)
            if coll is None:
                raise LookupError(f"index '{index}' does not exist")
            got = coll.get(ids=[passage_id], include=["embeddings", "documents", "metadatas"])
            if not got["ids"]:
                raise LookupError(f"passage {passage_id} is not in '{index}'")
            if records.provenance_in_document(got["metadatas"][0]):
                _, prov = records.split_document(got["documents"][0])
                text = f"{text}{records.SEPARATOR}{prov}"
            coll.update(ids=[passage_id], documents=[text], embeddings=got["embeddings"])

    def tamper_record(self, index: str, passage_id: str, changes: Mapping[str, Any]) -> None:
        """Conformance-kit hook: alter fields of a stored record behind the backend's back
        (``text``, ``metadata``, ``licence``, ``provenance``, ``start``, ``end``), in the
        record's own layout, its id, digest and embedding kept
        (:func:`indexplug_chroma.records.altered`)."""
        with self._store.use(index) as client:
            coll = self._store.get(client, index)
            if coll is None:
                raise LookupError(f"index '{index}' does not exist")
            got = coll.get(ids=[passage_id], include=["embeddings", "documents", "metadatas"])
            if not got["ids"]:
                raise LookupError(f"passage {passage_id} is not in '{index}'")
            document, metadata = records.altered(
                passage_id, got["documents"][0], got["metadatas"][0], changes
            )
            # deleted and added again, so that metadata keys it no longer has are gone too
            coll.delete(ids=[passage_id])
            coll.add(
                ids=[passage_id],
                embeddings=got["embeddings"],
                documents=[document],
                metadatas=[metadata] if metadata else None,
            )
        self._store.forget_count(index)

    def delete_rows(self, index: str, ids: Sequence[str]) -> None:
        """Conformance-kit hook: delete passages' records from Chroma's record store (the
        folder's ``chroma.sqlite3``) but not their vectors from its HNSW index, as an outside
        edit of the file would; searches must then answer ``INDEX_FAILED``.

        Embedded mode only: a server's files are not this backend's to reach (server mode
        does not claim ``separate_records``, so the kit does not ask for this hook there)."""
        if not isinstance(self._store, EmbeddedStore):
            raise RuntimeError("delete_rows reaches an embedded index's files only, not a server's")
        path = self._store.folder(index) / "chroma.sqlite3"
        if not path.is_file():
            raise LookupError(f"index '{index}' does not exist")
        import sqlite3
        from contextlib import closing

        with closing(sqlite3.connect(path, timeout=30)) as db, db:
            for i in range(0, len(ids), 500):
                chunk = list(ids[i : i + 500])
                marks = ",".join("?" * len(chunk))
                rows = [
                    r[0]
                    for r in db.execute(
                        f"SELECT id FROM embeddings WHERE embedding_id IN ({marks})", chunk
                    )
                ]
                db.executemany("DELETE FROM embedding_metadata WHERE id = ?", [(r,) for r in rows])
                db.executemany("DELETE FROM embeddings WHERE id = ?", [(r,) for r in rows])
        self._store.forget_count(index)


def _in_time(deadline: Deadline, step: str) -> None:
    if deadline.expired():
        raise DeadlinePassed(f"the deadline of {deadline.seconds:g}s passed before {step}")


def _checked_vector(vector: Any, emb: Embedder) -> Vector:
    arr = np.asarray(vector, dtype=np.float32)
    if arr.shape != (emb.dim,):
        raise ValueError(
            f"embedder {emb.name} returned a vector of shape {arr.shape}, expected ({emb.dim},)"
        )
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"embedder {emb.name} returned a vector with NaN or infinity")
    return arr


UNWRITTEN_VECTOR_INDEX = "Nothing found on disk"
"""What Chroma (1.x) says when a query reaches a collection whose vector index has not been
written to disk yet, typically while another client's first writes to it are being flushed
("Error creating hnsw segment reader: Nothing found on disk", chroma-core/chroma#4212).  The
records are stored; only the graph is missing, so the search scans them exactly instead of
failing."""


def _vector_index_unwritten(exc: BaseException) -> bool:
    return UNWRITTEN_VECTOR_INDEX in str(exc)


def _exact_query(coll: Any, vector: Vector, top_k: int, where: Any) -> dict[str, Any]:
    """What ``coll.query`` answers, by an exact cosine scan of every stored embedding (those
    matching ``where``): for the passages Chroma's graph search cannot reach."""
    rows = coll.get(where=where, include=["embeddings"])
    ids = list(rows["ids"])
    if not ids:
        return {"ids": [[]], "documents": [[]], "metadatas": [[]], "distances": [[]]}
    emb = np.asarray(rows["embeddings"], dtype=np.float32)
    norms = np.linalg.norm(emb, axis=1) * float(np.linalg.norm(vector))
    with np.errstate(divide="ignore", invalid="ignore"):
        distances = 1.0 - (emb @ vector) / norms  # Chroma's cosine distance
    distances = np.where(np.isfinite(distances), distances, np.inf)
    order = np.argsort(distances, kind="stable")[:top_k]
    top = [ids[i] for i in order]
    got = coll.get(ids=top, include=["documents", "metadatas"])
    by_id = {
        pid: (doc, meta)
        for pid, doc, meta in zip(got["ids"], got["documents"], got["metadatas"], strict=True)
    }
    kept = [i for i in order if ids[i] in by_id]  # removed since the scan: left out
    return {
        "ids": [[ids[i] for i in kept]],
        "documents": [[by_id[ids[i]][0] for i in kept]],
        "metadatas": [[by_id[ids[i]][1] for i in kept]],
        "distances": [[float(distances[i]) for i in kept]],
    }


def _record_payload(pid: str, document: str | None, metadata: Mapping[str, Any] | None) -> int:
    try:
        return records.payload_bytes(records.from_record(pid, document, metadata))
    except Exception:
        return len((document or "").encode("utf-8"))


def _hits(res: Mapping[str, Any], filters: Mapping[str, MetadataValue] | None) -> list[Hit]:
    """Chroma's answer as hits: cosine similarity = 1 - cosine distance, best first.

    A hit whose distance is not finite (a degenerate stored vector) has no similarity to rank
    by and is dropped.  Records holding their provenance as one string (today's layout, in
    the document, or the one before, in a metadata key) become hits in one pass, each
    ``Hit.from_stored`` around :func:`~indexplug.passages.passage_from_provenance` (neither id
    nor digest checked here: the guard checks every hit); a filtered search, a record in the
    oldest layout, one that is not a passage at all or a vector whose record is gone takes
    :func:`_hits_one_by_one`, which also says which record is broken.
    """
    ids = (res.get("ids") or [[]])[0]
    docs = (res.get("documents") or [[None] * len(ids)])[0]
    metas = (res.get("metadatas") or [[None] * len(ids)])[0]
    dists = (res.get("distances") or [[math.nan] * len(ids)])[0]
    if filters:
        return _hits_one_by_one(ids, docs, metas, dists, filters)
    rows: list[tuple[str, float, str, str]] = []
    sep, in_document = records.SEPARATOR, records.provenance_in_document
    for pid, doc, meta, dist in zip(ids, docs, metas, dists, strict=True):
        if not isinstance(doc, str):
            return _hits_one_by_one(ids, docs, metas, dists, filters)  # named there
        score = 1.0 - float(dist)
        if not math.isfinite(score):
            continue
        if in_document(meta):  # today's layout: the provenance after the text
            text, found, prov = doc.rpartition(sep)
            if not found:
                return _hits_one_by_one(ids, docs, metas, dists, filters)
        else:  # the layout before, a key of its own (the first layout: one by one)
            text, prov = doc, meta.get(records.PROV)
            if not isinstance(prov, str):
                return _hits_one_by_one(ids, docs, metas, dists, filters)
        rows.append((pid, score, text, prov))
    try:
        return [
            Hit.from_stored(
                rank=rank,
                score=score,
                score_scale=SCALE.name,
                passage=passage_from_provenance(pid, text, prov),
            )
            for rank, (pid, score, text, prov) in enumerate(rows, start=1)
        ]
    except Exception:
        return _hits_one_by_one(ids, docs, metas, dists, filters)


def _hits_one_by_one(
    ids: Sequence[str],
    docs: Sequence[str | None],
    metas: Sequence[Mapping[str, Any] | None],
    dists: Sequence[float],
    filters: Mapping[str, MetadataValue] | None,
) -> list[Hit]:
    """:func:`_hits` a record at a time.  A hit whose stored metadata does not equal the
    filter with its exact type is dropped (Chroma compares ``1`` and ``1.0`` as equal); a
    record that is not an indexplug passage raises ``ValueError`` naming it, and a vector
    whose record is gone :class:`~indexplug_chroma.errors.RecordLost`."""
    hits: list[Hit] = []
    for pid, doc, meta, dist in zip(ids, docs, metas, dists, strict=True):
        try:
            passage = records.from_record(pid, doc, meta)
        except RecordLost:
            raise
        except Exception as exc:
            raise ValueError(
                f"stored record {pid[:12]}... is not an indexplug passage ({type(exc).__name__}: "
                f"{exc})"
            ) from exc
        score = 1.0 - float(dist)
        if not math.isfinite(score) or not records.matches(passage, filters):
            continue
        # from_stored: the guard checks every hit (ranks, scores, scale, id, digest) anyway.
        hits.append(
            Hit.from_stored(
                rank=len(hits) + 1, score=score, score_scale=SCALE.name, passage=passage
            )
        )
    return hits
