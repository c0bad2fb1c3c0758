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
* **Known ids.** A passage whose id is stored already (in a collection with typed fields: alive,
  with the same digest) is reported known and not written again.  Writes to one index are
  serialised within the process (a lock per collection, shared by every backend instance on the
  same folder or server collection), so threads adding the same passage at once count it once.
* **Complete answers.** Chroma's HNSW graph can hold a vector that no other node links to: it is
  stored (``get`` and ``count`` see it) but no graph search reaches it, with or without a
  filter.  Inserting near-identical vectors makes this likely: the conformance kit's 500-passage
  concurrency check lost one or two passages in about one run in six, in whatever order they were
  written.  A search that Chroma answers with fewer hits than ``top_k`` although more passages
  (matching the filter) are stored is therefore answered again by an exact scan of the stored
  embeddings.  A search for fewer passages than stored is approximate, as HNSW is.
* **Filters, keys and reads.** Every operator of :mod:`indexplug.filters` is served exactly
  through typed metadata fields (:mod:`indexplug_chroma.fields`); ``get`` reads by id and by
  caller key, ``scan`` pages in id order by listing and sorting the matching ids; a key's new
  passages replace its old ones in one Chroma upsert, the old rewritten as dead (dropped by
  every read) and deleted next (:meth:`ChromaBackend._write`).
* **Budgets.** Projected before anything is written, measured (embedded) or estimated (server)
  after; a refused write deletes what it wrote, and a refused first write removes the index, so
  a refusal leaves the collection as it was.  ``max_bytes`` lives in the collection's metadata.
* **Deadlines.** Checked before each step (embedding, writing, querying) and after the query, so
  a search that ran past its limit answers ``INDEX_TIMEOUT`` rather than late results.
* **Outages.** A server that does not answer gives ``INDEX_UNAVAILABLE``; the HTTP client is
  dropped and rebuilt on the next op, so the backend recovers when the server is back.
"""

from __future__ import annotations

import asyncio
import functools
import math
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from indexplug.budget import effective_max_bytes, over_budget
from indexplug.deadlines import Deadline
from indexplug.embedcache import EmbeddingCache, cache_for, embed_passages
from indexplug.filters import ALL_OPS, Filter, matches, parse_filter
from indexplug.outcomes import (
    AddOutcome,
    GetOutcome,
    Got,
    Hit,
    Indexed,
    IndexEmpty,
    IndexesOutcome,
    IndexFailed,
    IndexInfo,
    IndexList,
    IndexStatus,
    IndexTimeout,
    IndexUnavailable,
    NoMatch,
    Removed,
    RemoveOutcome,
    Scanned,
    ScanOutcome,
    Searched,
    SearchOutcome,
    StatusOutcome,
)
from indexplug.passages import MetadataValue, Passage, passage_from_provenance
from indexplug.protocols import Capabilities, Embedder, Granularity, Readiness, Vector

from indexplug_chroma import fields, records, sizes, steps
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
from indexplug_chroma.stores import (
    COUNTS,
    EmbeddedStore,
    ServerStore,
    Store,
    chroma_settings,
    collection_name,
    index_of,
)

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
FIELDS_KEY = "indexplug:fields"
"""``typed`` for a collection whose records hold typed filter fields, the digest and the
caller key (:mod:`indexplug_chroma.fields`); a collection without it predates them (its
records hold ``m.<key>`` copies): it is filtered by reading the exact metadata back, and
takes no passages with keys."""
TYPED_FIELDS = "typed"


def _provenance_in_document(collection_meta: Mapping[str, Any]) -> bool:
    """Whether a collection (by its metadata) keeps each record's provenance in the document."""
    return collection_meta.get(RECORDS_KEY) == IN_DOCUMENT


def _typed(collection_meta: Mapping[str, Any]) -> bool:
    """Whether a collection's records hold the typed filter fields (see :data:`FIELDS_KEY`)."""
    return collection_meta.get(FIELDS_KEY) == TYPED_FIELDS


def _known(p: Passage, stored: Mapping[str, Mapping[str, Any]], typed: bool) -> bool:
    """Whether ``p`` is stored already: its id (in a typed collection: alive, same digest)."""
    md = stored.get(p.id)
    if md is None:
        return False
    if not typed:
        return True
    return md.get(fields.DEAD_FIELD) is not True and md.get(fields.DIGEST_FIELD) == p.digest


EMBED_CHUNK = 256
"""Passages embedded between deadline checks (and written to the embedding cache)."""
ID_CHUNK = 1000
SEARCH_ATTEMPTS = 3
"""Tries of a search that met a collection gone or a vector without its record (see
:meth:`ChromaBackend.search`)."""
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
            filter_operators=ALL_OPS,
            get=True,
            scan=True,
            indexes=True,
            keys=True,
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
        self._recorded: dict[str, Embedder] = {}
        """Embedders built from names indexes recorded (see :meth:`_recorded_embedder`)."""
        self._max_batch: int | None = None
        self._aclient: Any = None
        """Server mode: chromadb's ``AsyncHttpClient`` for the coroutine ops, made on first use."""
        self._ahandles: dict[str, tuple[Any, Any, list[str], Embedder, bool]] = {}
        """:attr:`_handles` of the async client."""
        self._handles: dict[str, tuple[Any, Any, list[str], Embedder, bool]] = {}
        """index -> (client, collection, what a query includes, embedder, typed fields) for
        searches (see
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

    def prepare(self) -> None:
        """Load what a search embeds its query with, before the first search's deadline
        starts (the guard calls it once, see :meth:`indexplug.guard.Guard.prepare`).

        With the embedder's torch-free query encoder this is a fraction of a second; without
        it, torch and the model load (seconds).  On a terminal a line on stderr says so.  It
        replaces a daemon thread that loaded the model in the background: a daemon thread
        still inside torch when the interpreter exits aborts the process (SIGABRT, "terminate
        called without an active exception") after it printed its answer.
        """
        if chromadb_missing():
            return
        emb = self.embedder()
        if not emb.readiness().ready:
            return
        announce = sys.stderr.isatty()
        if announce:
            print(f"loading {emb.name} ...", file=sys.stderr, end="", flush=True)
        try:
            emb.embed_query("warm up", Granularity.TEXT)
        finally:
            if announce:
                print(" done", file=sys.stderr, flush=True)

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
        return Readiness.yes()

    def close(self) -> None:
        self._handles.clear()
        self._ahandles.clear()
        self._aclient = None
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

    def _check_embedder(
        self, index: str, collection: Any, emb: Embedder
    ) -> tuple[dict[str, Any], Embedder]:
        """The collection's metadata and the embedder to use for it, after checking it was
        built with ``emb`` (or, for an ``...@auto`` spec, with the concrete path ``auto``
        resolved to where the index was built: :meth:`_recorded_embedder`)."""
        meta = dict(collection.metadata or {})
        name, dim = meta.get(EMBEDDER_KEY), meta.get(DIM_KEY)
        if name is None or dim is None:
            raise EmbedderMismatch(
                f"collection '{collection.name}' records no indexplug embedder (it was not "
                "created by indexplug); refusing to mix embeddings with it"
            )
        if name != emb.name:
            emb = self._recorded_embedder(str(name), emb)
        if name != emb.name or int(dim) != emb.dim:
            raise EmbedderMismatch(
                f"index '{index}' was built with embedder {name} (dim {dim}) but this backend "
                f"is configured with {emb.name} (dim {emb.dim}); searching or writing it would "
                f"mix embeddings. Use --embedder {name} (option embedder={name}) for this "
                "index, or build a new index"
            )
        return meta, emb

    def _recorded_embedder(self, recorded: str, emb: Embedder) -> Embedder:
        """For a configured ``PROVIDER:MODEL@auto``: the embedder of the name the index
        recorded when that is the same model with a concrete path (``auto`` resolves per
        machine, so an index built elsewhere may record ``@bf16`` or no suffix, fp32, where
        ``auto`` here means ``@int8``); built from the recorded name, once.  Else ``emb``."""
        base, sep, path = self.settings.embedder.rpartition("@")
        if not sep or path.strip().lower() != "auto" or _model_of(recorded) != base:
            return emb
        with self._embedder_lock:
            made = self._recorded.get(recorded)
            if made is None:
                factory = self._embedder_factory
                if factory is None:
                    from indexplug.plugins import get_registry

                    factory = get_registry().embedder
                made = self._recorded[recorded] = factory(recorded)
        return made

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
            for p in passages:
                fields.fields_of(p.metadata)  # a value Chroma cannot store: refused up front
            emb = self.embedder()
            ids = [p.id for p in passages]
            known: set[str] = set()
            if passages and self._store.exists(index) is not False:
                with self._store.use(index) as client:
                    coll = self._store.get(client, index)
                    if coll is not None:
                        meta, emb = self._check_embedder(index, coll, emb)
                        stored = self._existing(coll, ids, typed=_typed(meta))
                        known = {p.id for p in passages if _known(p, stored, _typed(meta))}
            todo = [p for p in passages if p.id not in known]
            vectors = dict(zip([p.id for p in todo], self._embed(emb, todo, deadline), strict=True))
            with self._write_lock(index, deadline):
                try:
                    return self._add_locked(index, passages, vectors, max_bytes, emb, deadline)
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
        deadline: Deadline,
    ) -> AddOutcome:
        """The write, under the index's lock: what is new, the budget, then :meth:`_write`.

        A passage is *known* when its id is stored (in a collection with typed fields: alive,
        with the same digest, so a passage re-added with other metadata is written again; the
        key is part of the id).  Passages with caller keys replace every other passage of their keys
        (:meth:`_write`); ``Indexed.replaced`` counts those removed.
        """
        dim = emb.dim
        ids = [p.id for p in passages]
        coll: Any = None
        meta: dict[str, Any] = {}
        stored: dict[str, dict[str, Any]] = {}
        if self._store.exists(index) is not False:
            with self._store.use(index) as client:
                coll = self._store.get(client, index)
                if coll is not None:
                    meta, emb = self._check_embedder(index, coll, emb)
                    stored = self._existing(coll, ids, typed=_typed(meta))
        typed = coll is None or _typed(meta)
        keys = list(dict.fromkeys(p.key for p in passages if p.key is not None))
        if keys and not typed:
            raise ChromaProblem(
                f"index '{index}' was created before caller keys (its records have no typed "
                "fields); copy it to a new index to add passages with keys"
            )
        new = [p for p in passages if not _known(p, stored, typed)]
        if coll is None and not new:  # nothing to write, and no index to record a budget in
            return Indexed(index=index, backend=self.name, added=0, known=0)
        stored_budget = meta.get(BUDGET_KEY)
        budget = effective_max_bytes(
            int(stored_budget) if stored_budget is not None else None, requested
        )
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
        replaced: dict[str, tuple[Any, str | None, dict[str, Any] | None]] = {}
        with self._store.use(index) as client:
            if coll is None:
                first = {
                    EMBEDDER_KEY: emb.name,
                    DIM_KEY: dim,
                    SCHEMA_KEY: SCHEMA_VERSION,
                    RECORDS_KEY: "metadata" if self.settings.plain_documents else IN_DOCUMENT,
                    FIELDS_KEY: TYPED_FIELDS,
                    PAYLOAD_KEY: 0,
                }
                if requested is not None:
                    first[BUDGET_KEY] = requested
                coll, created = self._store.create(client, index, first)
                meta, emb = self._check_embedder(index, coll, emb)
                stored_budget = meta.get(BUDGET_KEY)
                if not created:  # another writer made it first: what does it hold already?
                    stored = self._existing(coll, ids, typed=_typed(meta))
            plain = not _provenance_in_document(meta)
            old = self._records_of_keys(coll, keys) if keys else {}
            batch_ids = set(ids)
            retire = {pid: rec for pid, rec in old.items() if pid not in batch_ids}
            before_images = self._full_records(coll, [p.id for p in new if p.id in stored])
            updated = dict(meta)
            try:
                self._write(
                    client, coll, new, vectors, stored, retire, plain=plain, typed=_typed(meta)
                )
                replaced = {
                    pid: rec for pid, rec in retire.items() if not records.is_dead(rec[1], rec[2])
                }
                gone = sum(_record_payload(pid, doc, md) for pid, (_, doc, md) in replaced.items())
                gone += sum(
                    _record_payload(pid, doc, md) for pid, (_, doc, md) in before_images.items()
                )
                updated[PAYLOAD_KEY] = max(
                    0, int(meta.get(PAYLOAD_KEY, 0)) + sizes.payload_total(new) - gone
                )
                if stored_budget is None and requested is not None:
                    updated[BUDGET_KEY] = requested
                if updated != meta:
                    coll.modify(metadata=updated)
                size_after = self._size(index, coll, updated, dim)
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
                self._undo(client, coll, index, new, {**before_images, **retire}, meta, created)
                if created:
                    self._store_forget(index)
                raise
            if refused:
                self._undo(client, coll, index, new, {**before_images, **retire}, meta, created)
        if refused:
            if created:
                self._store_forget(index)
            return refused
        out = Indexed.of_batch(
            index=index,
            backend=self.name,
            ids=ids,
            added_ids=[p.id for p in new],
            bytes_used=size_after,
            max_bytes=budget,
            estimate=estimate,
        )
        return out.model_copy(update={"replaced": len(replaced)}) if replaced else out

    def _existing(
        self, collection: Any, ids: Sequence[str], *, typed: bool
    ) -> dict[str, dict[str, Any]]:
        """The stored ids among ``ids``, each with its record's metadata (typed collections:
        whether it is dead, its digest, and which keys an overwrite must clear)."""
        found: dict[str, dict[str, Any]] = {}
        include = ["metadatas"] if typed else []
        for i in range(0, len(ids), ID_CHUNK):
            got = collection.get(ids=list(ids[i : i + ID_CHUNK]), include=include)
            metas = got.get("metadatas") or [None] * len(got["ids"])
            for pid, md in zip(got["ids"], metas, strict=True):
                found[pid] = dict(md or {})
        return found

    def _records_of_keys(
        self, coll: Any, keys: Sequence[str]
    ) -> dict[str, tuple[Any, str | None, dict[str, Any] | None]]:
        """Every stored record (alive or dead) of these caller keys: id -> (embedding,
        document, metadata), what a replacement rewrites and an undo restores."""
        out: dict[str, tuple[Any, str | None, dict[str, Any] | None]] = {}
        for i in range(0, len(keys), ID_CHUNK):
            chunk = list(keys[i : i + ID_CHUNK])
            got = coll.get(
                where={fields.KEY_FIELD: {"$in": chunk}},
                include=["embeddings", "documents", "metadatas"],
            )
            for pid, vec, doc, md in zip(
                got["ids"], got["embeddings"], got["documents"], got["metadatas"], strict=True
            ):
                out[pid] = (vec, doc, md)
        return out

    def _full_records(
        self, coll: Any, ids: Sequence[str]
    ) -> dict[str, tuple[Any, str | None, dict[str, Any] | None]]:
        """Stored records as (embedding, document, metadata): what an undo puts back."""
        out: dict[str, tuple[Any, str | None, dict[str, Any] | None]] = {}
        for i in range(0, len(ids), ID_CHUNK):
            got = coll.get(
                ids=list(ids[i : i + ID_CHUNK]), include=["embeddings", "documents", "metadatas"]
            )
            for pid, vec, doc, md in zip(
                got["ids"], got["embeddings"], got["documents"], got["metadatas"], strict=True
            ):
                out[pid] = (vec, doc, md)
        return out

    def _batch_size(self, client: Any) -> int:
        if self._max_batch is None:
            try:
                self._max_batch = max(1, int(client.get_max_batch_size()))
            except Exception:
                self._max_batch = 1000
        return self._max_batch

    def _write(
        self,
        client: Any,
        coll: Any,
        new: Sequence[Passage],
        vectors: Mapping[str, Vector],
        stored: Mapping[str, Mapping[str, Any]],
        retire: Mapping[str, tuple[Any, str | None, dict[str, Any] | None]],
        *,
        plain: bool,
        typed: bool,
    ) -> None:
        """Write ``new`` in batches of the size Chroma accepts (the caller undoes a failure),
        each record in the collection's layout (``plain``: the provenance in a metadata key).

        Passages without a key whose id is not stored are added.  Those overwriting a stored
        record (another version of the passage) are upserted, the keys the old record had and
        the new one has not set to None (an upsert merges metadata).  The passages of each
        caller key, with its records to retire (``retire``: the key's records not in the
        batch) rewritten as dead, go to Chroma in *one* upsert, so that a reader sees the
        key's old passages or its new ones, never both or neither (a search drops dead
        records; see the module docstring); the retired records are then deleted.  A key
        whose passages and retired records are more than one upsert can take is refused
        before anything is written.
        """
        step = self._batch_size(client)
        Row = tuple[str, Any, str | None, dict[str, Any] | None]

        def row(p: Passage) -> Row:
            document, metadata = records.to_record(p, plain_document=plain, typed=typed)
            old = stored.get(p.id)
            if old:
                metadata = {**{k: None for k in old}, **(metadata or {})}
            return (p.id, vectors[p.id], document, metadata)

        groups: dict[str, list[Row]] = {}
        fresh: list[Row] = []
        overwrite: list[Row] = []
        for p in new:
            if p.key is not None:
                groups.setdefault(p.key, []).append(row(p))
            elif p.id in stored:
                overwrite.append(row(p))
            else:
                fresh.append(row(p))
        for pid, (vec, doc, md) in retire.items():
            key = (md or {}).get(fields.KEY_FIELD)
            dead_doc, dead_md = records.dead_record(doc, md)
            groups.setdefault(str(key), []).append((pid, vec, dead_doc, dead_md))
        for key, rows in groups.items():
            if len(rows) > step:
                raise ChromaProblem(
                    f"caller key {key[:60]!r} has {len(rows)} passages to write or retire, more "
                    f"than one Chroma write takes ({step}); it cannot be replaced at once"
                )

        def send(method: Callable[..., Any], rows: Sequence[Row]) -> None:
            metadatas = [r[3] for r in rows]
            method(
                ids=[r[0] for r in rows],
                embeddings=np.stack([np.asarray(r[1], dtype=np.float32) for r in rows]),
                documents=[r[2] for r in rows],
                metadatas=metadatas if any(m is not None for m in metadatas) else None,
            )

        for i in range(0, len(fresh), step):
            send(coll.add, fresh[i : i + step])
        for i in range(0, len(overwrite), step):
            send(coll.upsert, overwrite[i : i + step])
        pending: list[Row] = []
        for rows in groups.values():  # whole keys per upsert, as many as fit
            if len(pending) + len(rows) > step:
                send(coll.upsert, pending)
                pending = []
            pending.extend(rows)
        if pending:
            send(coll.upsert, pending)
        dead = list(retire)
        for i in range(0, len(dead), step):
            coll.delete(ids=dead[i : i + step])

    def _undo(
        self,
        client: Any,
        coll: Any,
        index: str,
        new: Sequence[Passage],
        before: Mapping[str, tuple[Any, str | None, dict[str, Any] | None]],
        meta: Mapping[str, Any],
        created: bool,
    ) -> None:
        """Take a write back, best effort: delete what it wrote, put back the records it
        overwrote or retired (``before``) and restore the metadata; a collection this write
        created is deleted entirely, so a refused or failed first write leaves no index
        behind.  Errors here are swallowed: the caller reports the original refusal or
        error."""
        try:
            if created:
                self._handles.pop(index, None)
                client.delete_collection(collection_name(index))
                return
            if coll is None:
                return
            step = self._batch_size(client)
            ids = list(dict.fromkeys([p.id for p in new] + list(before)))
            for i in range(0, len(ids), step):
                coll.delete(ids=ids[i : i + step])
            back = list(before.items())
            for i in range(0, len(back), step):
                chunk = back[i : i + step]
                metadatas = [md for _, (_, _, md) in chunk]
                coll.add(
                    ids=[pid for pid, _ in chunk],
                    embeddings=np.stack(
                        [np.asarray(v, dtype=np.float32) for _, (v, _, _) in chunk]
                    ),
                    documents=[doc for _, (_, doc, _) in chunk],
                    metadatas=metadatas if any(m is not None for m in metadatas) else None,
                )
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
        filters: Mapping[str, MetadataValue] | Filter | None = None,
    ) -> SearchOutcome:
        """The ``top_k`` nearest passages (see :meth:`_search`).  ``filters`` is what the
        guard gives a backend claiming operators, a parsed :data:`~indexplug.filters.Filter`;
        an equality map (a direct caller) is parsed the same way."""
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
        query: str,
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
        query: str,
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
        raw = yield steps.Embed(emb, query)
        vector = _checked_vector(raw, emb)
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
                meta, _ = self._check_embedder(index, coll, emb)
                present: dict[str, int] = {}
                found: list[str] = []
                for i in range(0, len(ids), ID_CHUNK):
                    got = coll.get(
                        ids=list(ids[i : i + ID_CHUNK]), include=["documents", "metadatas"]
                    )
                    for pid, doc, md in zip(
                        got["ids"], got["documents"], got["metadatas"], strict=True
                    ):
                        found.append(pid)
                        if not records.is_dead(doc, md):  # a dead record is gone already
                            present[pid] = _record_payload(pid, doc, md)
                _in_time(deadline, "deleting")
                gone = found
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

    # -- async: chromadb's AsyncHttpClient in server mode ------------------------------------
    # The guard awaits these coroutines on the caller's event loop instead of running the
    # blocking methods on its worker threads.  In server mode they run the same steps as the
    # blocking ops (search, get, scan, status, indexes) with chromadb's async HTTP client, so
    # a slow search holds no thread and the guard's deadline cancels its request; the query
    # embedding, CPU work, runs on a thread.  Embedded mode has no async client: the blocking
    # op runs on a thread.  Writes, remove and drop are not native (the guard offloads them).

    async def asearch(
        self,
        index: str,
        query: str,
        *,
        top_k: int,
        deadline: Deadline,
        filters: Mapping[str, MetadataValue] | Filter | None = None,
    ) -> SearchOutcome:
        """:meth:`search` as a coroutine (see above)."""
        if not isinstance(self._store, ServerStore):
            return await asyncio.to_thread(
                self.search, index, query, top_k=top_k, deadline=deadline, filters=filters
            )
        from chromadb.errors import NotFoundError

        for attempt in range(1, SEARCH_ATTEMPTS + 1):
            try:
                client = await self._async_client()
                return await steps.arun(
                    self._search_steps(index, query, top_k, deadline, parse_filter(filters)),
                    functools.partial(self._ado, client=client),
                )
            except Exception as exc:
                self._ahandles.pop(index, None)
                again = isinstance(exc, (NotFoundError, RecordLost)) or ID_NOT_FOUND in str(exc)
                if not again or attempt == SEARCH_ATTEMPTS:
                    return self._afailure(index, exc, deadline)
        raise AssertionError("unreachable")

    async def aget(
        self, index: str, ids: Sequence[str], *, keys: Sequence[str], deadline: Deadline
    ) -> GetOutcome:
        """:meth:`get` as a coroutine (see above)."""
        if not isinstance(self._store, ServerStore):
            return await asyncio.to_thread(self.get, index, ids, keys=keys, deadline=deadline)
        try:
            _in_time(deadline, "starting the read")
            client = await self._async_client()
            return await steps.arun(
                self._get_steps(index, ids, keys, deadline), lambda step: self._ado(step, client)
            )
        except Exception as exc:
            return self._afailure(index, exc, deadline)

    async def ascan(
        self,
        index: str,
        *,
        filters: Filter | None,
        after: str | None,
        limit: int,
        deadline: Deadline,
    ) -> ScanOutcome:
        """:meth:`scan` as a coroutine (see above)."""
        if not isinstance(self._store, ServerStore):
            return await asyncio.to_thread(
                self.scan, index, filters=filters, after=after, limit=limit, deadline=deadline
            )
        try:
            _in_time(deadline, "starting the scan")
            client = await self._async_client()
            return await steps.arun(
                self._scan_steps(index, parse_filter(filters), after, limit, deadline),
                lambda step: self._ado(step, client),
            )
        except Exception as exc:
            return self._afailure(index, exc, deadline)

    async def astatus(self, index: str, *, deadline: Deadline) -> StatusOutcome:
        """:meth:`status` as a coroutine (see above)."""
        if not isinstance(self._store, ServerStore):
            return await asyncio.to_thread(self.status, index, deadline=deadline)
        try:
            _in_time(deadline, "reading the status")
            emb = self.embedder()
            client = await self._async_client()
            return await steps.arun(
                self._status_steps(index, emb, deadline),
                functools.partial(self._ado, client=client),
            )
        except Exception as exc:
            return self._afailure(index, exc, deadline)

    async def aindexes(self, *, deadline: Deadline) -> IndexesOutcome:
        """:meth:`indexes` as a coroutine (see above)."""
        if not isinstance(self._store, ServerStore):
            return await asyncio.to_thread(self.indexes, deadline=deadline)
        try:
            _in_time(deadline, "listing the indexes")
            client = await self._async_client()
            return await steps.arun(
                self._server_indexes_steps(client, deadline),
                functools.partial(self._ado, client=client),
            )
        except Exception as exc:
            return self._afailure("", exc, deadline)  # type: ignore[return-value]

    async def _async_client(self) -> Any:
        """The server's ``AsyncHttpClient``, made on first use (it serves every event loop:
        chromadb keeps an HTTP session per loop) and dropped after a connection error."""
        client = self._aclient
        if client is None:
            import chromadb

            client = await chromadb.AsyncHttpClient(
                host=self.settings.host,
                port=self.settings.port,
                ssl=self.settings.ssl,
                settings=chroma_settings(),
            )
            self._aclient = client
        return client

    def _afailure(
        self, index: str, exc: BaseException, deadline: Deadline
    ) -> IndexFailed | IndexTimeout | IndexUnavailable:
        out = self._failure(index, exc, deadline)
        if out.code == "INDEX_UNAVAILABLE":
            self._aclient = None
            self._ahandles.clear()
        return out

    async def _ado(self, step: steps.Step, client: Any) -> Any:
        """One step with the async client (see :mod:`indexplug_chroma.steps`)."""
        if isinstance(step, steps.Call):
            return await getattr(step.target, step.method)(**step.kwargs)
        if isinstance(step, steps.Embed):
            return await asyncio.to_thread(step.embedder.embed_query, step.text, Granularity.TEXT)
        if isinstance(step, steps.Count):
            key = self._store.key(step.index)
            if step.fresh:
                COUNTS.forget(key)
            count, generation = COUNTS.fresh(key, self.settings.count_ttl_s)
            if count is None:
                count = int(await step.collection.count())
                COUNTS.keep(key, generation, count)
            return count
        if isinstance(step, steps.Handle):
            return await self._ahandle(client, step.index, step.embedder)
        return await _aget(client, step.index)

    async def _ahandle(
        self, client: Any, index: str, emb: Embedder
    ) -> tuple[Any, list[str], Embedder, bool] | None:
        """:meth:`_search_handle` for the async client (cached apart)."""
        cached = self._ahandles.get(index)
        if cached is not None and cached[0] is client:
            return cached[1:]
        coll = await _aget(client, index)
        if coll is None:
            self._ahandles.pop(index, None)
            return None
        meta, emb = self._check_embedder(index, coll, emb)
        include = ["documents", "distances"]
        if not _provenance_in_document(meta):
            include.insert(1, "metadatas")
        self._ahandles[index] = (client, coll, include, emb, _typed(meta))
        return coll, include, emb, _typed(meta)

    # -- extras ------------------------------------------------------------------------------
    def op_drop(
        self, index: str, *, deadline: Deadline
    ) -> IndexStatus | IndexFailed | IndexTimeout | IndexUnavailable:
        """Delete the index entirely (its collection; embedded: its folder too); dropping an
        index that does not exist answers the same.  Past its deadline it does nothing."""
        try:
            _in_time(deadline, "starting the drop")
            with self._write_lock(index, deadline):
                self._handles.pop(index, None)
                self._ahandles.pop(index, None)
                try:
                    self._store.drop(index)
                finally:
                    self._store.forget_count(index)
        except Exception as exc:
            return self._failure(index, exc, deadline)
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
        (``text``, ``metadata``, ``licence``, ``provenance``, ``start``, ``end``, ``digest``),
        in the record's own layout, its id, digest (unless named) and embedding kept
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


def _model_of(name: str) -> str:
    """``PROVIDER:MODEL`` of an embedder name, without its ``@PATH`` suffix (a suffix with a
    ``/`` is part of a folder name, as the sentence-transformers plugin reads it)."""
    head, sep, tail = name.rpartition("@")
    if not sep or not head or "/" in tail or "\\" in tail:
        return name
    return head


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


ID_NOT_FOUND = "Error finding id"
"""What Chroma (1.5) raises from a query whose vector index answered an id that a delete
running at the same time removed from its records: worth asking again, like a vector
answered without its record (:data:`SEARCH_ATTEMPTS`)."""


Check = Callable[[str, str | None, Mapping[str, Any] | None], bool]
"""Whether a record (id, document, metadata) passes a filter Chroma could only narrow down."""


def _provenance_check(f: Filter) -> Check:
    """``f`` checked on the exact metadata in a record's provenance: the JSON that keeps
    every value's type and digits (a float as it was added, not as Chroma compares it).  For
    every filter Chroma can only narrow down, and collections made before the typed fields."""
    return lambda pid, doc, meta: matches(f, records.from_record(pid, doc, meta).metadata)


def _vectors_without_records(coll: Any, dim: int) -> steps.Steps[bool]:
    """For a collection that counts no records: ``False`` if its vector index holds nothing
    either (truly empty), ``True`` if records were written meanwhile; raises
    :class:`RecordLost` if it holds vectors whose records are gone (deleted behind it), which
    would otherwise pass for an empty index."""
    try:
        res = yield steps.Call(
            coll,
            "query",
            {
                "query_embeddings": [np.ones(dim, dtype=np.float32)],
                "n_results": 1,
                "include": ["distances"],
            },
        )
    except Exception as exc:
        if _vector_index_unwritten(exc):
            return False
        raise
    ids = list((res.get("ids") or [[]])[0])
    if not ids:
        return False
    found = yield steps.Call(coll, "get", {"ids": ids, "include": []})
    if found["ids"]:
        return True
    raise RecordLost(
        f"the index counts no passages, but its vector index still holds passage "
        f"{str(ids[0])[:12]}... (records deleted behind it); the index cannot be trusted: "
        "rebuild it"
    )


def _exact_query(
    coll: Any,
    vector: Vector,
    top_k: int,
    where: Any,
    check: Check | None = None,
    *,
    typed: bool = True,
) -> steps.Steps[dict[str, Any]]:
    """What ``coll.query`` answers, by an exact cosine scan of every stored embedding (those
    matching ``where``, alive, and passing ``check`` when given): for the passages Chroma's
    graph search cannot reach, and for filters Chroma can only narrow down.  ``check``
    reads every candidate's document (its provenance: the exact metadata)."""
    for whole in (False, True):
        include = ["embeddings", "metadatas"]
        if whole or check is not None:
            include.append("documents")
        rows = yield steps.Call(coll, "get", {"where": where, "include": include})
        docs = rows.get("documents") or [None] * len(rows["ids"])
        keep = [
            i
            for i, (pid, doc, meta) in enumerate(
                zip(rows["ids"], docs, rows["metadatas"], strict=True)
            )
            if not records.is_dead(doc, meta) and (check is None or check(pid, doc, meta))
        ]
        ids = [rows["ids"][i] for i in keep]
        if not ids:
            return {"ids": [[]], "documents": [[]], "metadatas": [[]], "distances": [[]]}
        emb = np.asarray([rows["embeddings"][i] for i in keep], dtype=np.float32)
        norms = np.linalg.norm(emb, axis=1) * float(np.linalg.norm(vector))
        with np.errstate(divide="ignore", invalid="ignore"):
            distances = 1.0 - (emb @ vector) / norms  # Chroma's cosine distance
        distances = np.where(np.isfinite(distances), distances, np.inf)
        order = np.argsort(distances, kind="stable")[:top_k]
        if whole:  # one read: documents and embeddings of one state of the collection
            by_id = {ids[i]: (docs[keep[i]], rows["metadatas"][keep[i]]) for i in range(len(ids))}
            break
        top = [ids[i] for i in order]
        got = yield steps.Call(coll, "get", {"ids": top, "include": ["documents", "metadatas"]})
        by_id = {
            pid: (doc, meta)
            for pid, doc, meta in zip(got["ids"], got["documents"], got["metadatas"], strict=True)
            if not records.is_dead(doc, meta)
        }
        if len(by_id) == len(top):
            break
        # Some were removed or replaced between the two reads (a key's new version written
        # meanwhile would be missing): read once more, documents and all, in one read.
    kept = [i for i in order if ids[i] in by_id]
    return {
        "ids": [[ids[i] for i in kept]],
        "documents": [[by_id[ids[i]][0] for i in kept]],
        "metadatas": [[by_id[ids[i]][1] for i in kept]],
        "distances": [[float(distances[i]) for i in kept]],
    }


def _live(res: dict[str, Any]) -> dict[str, Any]:
    """A query's answer without its dead records (see :func:`records.dead_record`)."""
    ids = (res.get("ids") or [[]])[0]
    docs = (res.get("documents") or [[None] * len(ids)])[0]
    metas = (res.get("metadatas") or [[None] * len(ids)])[0]
    dead = [i for i, (d, m) in enumerate(zip(docs, metas, strict=True)) if records.is_dead(d, m)]
    if not dead:
        return res
    out = dict(res)
    for field in ("ids", "documents", "metadatas", "distances"):
        column = (res.get(field) or [None])[0]
        if column is not None:
            out[field] = [[v for i, v in enumerate(column) if i not in dead]]
    return out


def _got(
    index: str,
    backend: str,
    ids: Sequence[str],
    keys: Sequence[str],
    found: Mapping[str, Passage],
) -> Got:
    seen_keys = {p.key for p in found.values()}
    return Got(
        index=index,
        backend=backend,
        passages=list(found.values()),
        missing_ids=[i for i in ids if i not in found],
        missing_keys=[k for k in keys if k not in seen_keys],
    )


def _scan_page(
    coll: Any,
    filters: Filter | None,
    after: str | None,
    limit: int,
    deadline: Deadline,
) -> steps.Steps[tuple[list[Passage], bool]]:
    """The passages of one scan page, and whether more may follow (see
    :meth:`ChromaBackend.scan`)."""
    typed = _typed(dict(coll.metadata or {}))
    where: dict[str, Any] | None = None
    check: Check | None = None
    if filters is not None:
        if typed:
            translated = fields.translate(filters)
            if translated.clause is fields.FALSE:
                return [], False
            where = translated.clause or None
            check = None if translated.exact else _provenance_check(filters)
        else:
            check = _provenance_check(filters)
    include: list[str] = []
    if check is not None:  # the provenance in the document, or in a key (plain documents)
        include = ["documents", "metadatas"]
    page: list[Passage] = []
    ids: list[str] = []
    pos = 0
    for attempt in range(1, SEARCH_ATTEMPTS + 1):
        listed = yield steps.Call(coll, "get", {"where": where, "include": include})
        n = len(listed["ids"])
        docs = listed.get("documents") or [None] * n
        metas = listed.get("metadatas") or [None] * n
        ids = sorted(
            pid
            for pid, doc, meta in zip(listed["ids"], docs, metas, strict=True)
            if (after is None or pid > after)
            and (check is None or (not records.is_dead(doc, meta) and check(pid, doc, meta)))
        )
        page = []
        pos = 0
        changed = False
        while pos < len(ids) and len(page) < limit:  # dead records dropped: read on
            _in_time(deadline, "reading a page")
            chunk = ids[pos : pos + min(limit - len(page), ID_CHUNK)]
            pos += len(chunk)
            read = yield steps.Call(
                coll, "get", {"ids": chunk, "include": ["documents", "metadatas"]}
            )
            got = _stored_passages(read)
            page.extend(got[pid] for pid in chunk if pid in got)
            changed = changed or len(got) < len(chunk)
        if not changed or attempt == SEARCH_ATTEMPTS:
            break
        # listed passages removed or replaced before they were read (a key's new version,
        # written meanwhile, would be missing from the page): list again
    return page, pos < len(ids)


async def _aget(client: Any, index: str) -> Any | None:
    """The index's collection through the async client, or None."""
    from chromadb.errors import NotFoundError

    try:
        return await client.get_collection(collection_name(index), embedding_function=None)
    except NotFoundError:
        return None
    except ValueError as exc:  # older clients say "does not exist" with a ValueError
        if "does not exist" in str(exc):
            return None
        raise


def _stored_passages(got: Mapping[str, Any]) -> dict[str, Passage]:
    """The passages of a ``get`` answer (ids, documents, metadatas), dead records left out."""
    out: dict[str, Passage] = {}
    for pid, doc, meta in zip(got["ids"], got["documents"], got["metadatas"], strict=True):
        if not records.is_dead(doc, meta):
            out[pid] = records.from_record(pid, doc, meta)
    return out


def _record_payload(pid: str, document: str | None, metadata: Mapping[str, Any] | None) -> int:
    try:
        return records.payload_bytes(records.from_record(pid, document, metadata))
    except Exception:
        return len((document or "").encode("utf-8"))


def _hits(res: Mapping[str, Any]) -> list[Hit]:
    """Chroma's answer as hits: cosine similarity = 1 - cosine distance, best first.

    A hit whose distance is not finite (a degenerate stored vector) has no similarity to rank
    by and is dropped.  Records holding their provenance as one string (today's layout, in
    the document, or the one before, in a metadata key) become hits in one pass, each
    ``Hit.from_stored`` around :func:`~indexplug.passages.passage_from_provenance` (neither id
    nor digest checked here: the guard checks every hit); a record in the
    oldest layout, one that is not a passage at all or a vector whose record is gone takes
    :func:`_hits_one_by_one`, which also says which record is broken.
    """
    ids = (res.get("ids") or [[]])[0]
    docs = (res.get("documents") or [[None] * len(ids)])[0]
    metas = (res.get("metadatas") or [[None] * len(ids)])[0]
    dists = (res.get("distances") or [[math.nan] * len(ids)])[0]
    rows: list[tuple[str, float, str, str]] = []
    sep, in_document = records.SEPARATOR, records.provenance_in_document
    for pid, doc, meta, dist in zip(ids, docs, metas, dists, strict=True):
        if not isinstance(doc, str):
            return _hits_one_by_one(ids, docs, metas, dists)  # named there
        score = 1.0 - float(dist)
        if not math.isfinite(score):
            continue
        if in_document(meta):  # today's layout: the provenance after the text
            text, found, prov = doc.rpartition(sep)
            if not found:
                return _hits_one_by_one(ids, docs, metas, dists)
        else:  # the layout before, a key of its own (the first layout: one by one)
            text, prov = doc, meta.get(records.PROV)
            if not isinstance(prov, str):
                return _hits_one_by_one(ids, docs, metas, dists)
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
        return _hits_one_by_one(ids, docs, metas, dists)


def _hits_one_by_one(
    ids: Sequence[str],
    docs: Sequence[str | None],
    metas: Sequence[Mapping[str, Any] | None],
    dists: Sequence[float],
) -> list[Hit]:
    """:func:`_hits` a record at a time: a record that is not an indexplug passage raises
    ``ValueError`` naming it, and a vector whose record is gone
    :class:`~indexplug_chroma.errors.RecordLost`."""
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
        if not math.isfinite(score):
            continue
        # from_stored: the guard checks every hit (ranks, scores, scale, id, digest) anyway.
        hits.append(
            Hit.from_stored(
                rank=len(hits) + 1, score=score, score_scale=SCALE.name, passage=passage
            )
        )
    return hits
