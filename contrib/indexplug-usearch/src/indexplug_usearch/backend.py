"""Dense retrieval with usearch's HNSW graph, SQLite as the source of truth.

Why this split: usearch is a very fast single-file vector index, but it has no transactions and
no place for passages.  So each index folder holds

* ``store.sqlite``: passages with their provenance and their vectors (float32 blobs), the
  embedder, the budget and a *generation* counter, all written in one transaction per write;
* ``hnsw.usearch`` + ``hnsw.gen``: the HNSW graph, saved after each committed write and stamped
  with the generation it reflects.

On open, a graph whose stamp differs from the store's generation (a crash between the commit and
the save, a file deleted by hand) is rebuilt from the vectors in the store, so the graph can never
serve something the store does not hold.  Scores are cosine similarities (``1 - distance``).

Each passage is stored as ``Passage.model_dump_json()``, its digest included, and comes back
through ``Passage.from_stored`` (neither id nor digest checked here: the guard checks every hit
and refuses one altered behind the backend's back).  A graph key whose row is gone (deleted
from ``store.sqlite`` behind the graph), or a graph holding vectors while the store counts no
passage, answers ``INDEX_FAILED``: never a shorter answer, ``NO_MATCH`` or ``INDEX_EMPTY``.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from indexplug import (
    AddOutcome,
    BadRequest,
    Capabilities,
    Deadline,
    Embedder,
    Granularity,
    Hit,
    Indexed,
    IndexEmpty,
    IndexFailed,
    IndexStatus,
    IndexTimeout,
    NoMatch,
    Passage,
    Readiness,
    Removed,
    RemoveOutcome,
    ScoreScale,
    Searched,
    SearchOutcome,
    Source,
    StatusOutcome,
    effective_max_bytes,
    over_budget,
)

from indexplug_usearch.plugin import DESCRIPTION

SCALE = ScoreScale(
    name="cosine",
    higher_is_better=True,
    comparable_across_searches=True,
    meaning="Cosine similarity between the query and passage embeddings (-1..1).",
)
EXACT_BELOW = 10_000
"""Indexes up to this many passages are searched exhaustively: exact, and about as fast as the
graph at this size (a pass over 10,000 vectors of 256 floats: about 3 ms on a 2-core Xeon)."""
BUILD_THREADS = 1
"""Threads that insert into the graph.  One: an HNSW graph built by several threads depends on
how they interleave, so the same passages could give a different graph, and different
neighbours, from one run to the next (more so on a loaded machine).  Built by one thread, the
same passages added in the same order always give the same graph and the same answers."""
HNSW_OVERHEAD = 1.6
"""Bytes of graph per byte of vector (links and levels), measured on SciFact with dim 256/384."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS passages (
    key INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    passage TEXT NOT NULL,
    vector BLOB NOT NULL
);
"""


class _Open:
    """One open index: its SQLite connection and HNSW graph."""

    def __init__(self, folder: Path, dim: int) -> None:
        from usearch.index import Index

        self.folder = folder
        self.db = sqlite3.connect(
            folder / "store.sqlite", check_same_thread=False, timeout=10, isolation_level=None
        )
        self.db.executescript(_SCHEMA)
        self.lock = threading.RLock()
        self.dim = dim
        graph = folder / "hnsw.usearch"
        stamp = folder / "hnsw.gen"
        gen = self.generation()
        if graph.exists() and stamp.exists() and stamp.read_text().strip() == str(gen):
            self.graph = Index.restore(str(graph), view=False)
        else:
            self.graph = Index(ndim=dim, metric="cos", dtype="f32")
            rows = self.db.execute("SELECT key, vector FROM passages").fetchall()
            if rows:
                keys = np.array([k for k, _ in rows], dtype=np.uint64)
                vecs = np.stack([np.frombuffer(v, dtype=np.float32) for _, v in rows])
                self.graph.add(keys, vecs, threads=BUILD_THREADS)
            self.save()

    def meta(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def generation(self) -> int:
        return int(self.meta("generation") or 0)

    def count(self) -> int:
        return int(self.db.execute("SELECT count(*) FROM passages").fetchone()[0])

    def db_bytes(self) -> int:
        pages = self.db.execute("PRAGMA page_count").fetchone()[0]
        size = self.db.execute("PRAGMA page_size").fetchone()[0]
        return int(pages) * int(size)

    def save(self) -> None:
        tmp = self.folder / "hnsw.usearch.tmp"
        self.graph.save(str(tmp))
        os.replace(tmp, self.folder / "hnsw.usearch")
        (self.folder / "hnsw.gen").write_text(str(self.generation()))

    def close(self) -> None:
        self.db.close()


class UsearchBackend:
    """Settings: ``embedder`` (spec, default ``hashing:default``), ``expansion`` (HNSW search
    breadth, default 64)."""

    name = "usearch"
    description = DESCRIPTION
    score_scale = SCALE
    capabilities = Capabilities(
        filters=True,
        deletion=True,
        persistence=True,
        concurrent_writers=True,
        dense=True,
        separate_records=True,
        vectors=True,
    )

    def __init__(self, home: Path, *, embedder: Embedder, expansion: int = 64) -> None:
        self.home = Path(home)
        self.embedder = embedder
        self.expansion = int(expansion)
        self._open: dict[str, _Open] = {}
        self._lock = threading.Lock()

    # -- plumbing ------------------------------------------------------------------------
    def readiness(self) -> Readiness:
        try:
            import usearch  # noqa: F401
        except ImportError as exc:
            return Readiness.no(f"usearch is not installed ({exc})")
        if Granularity.TEXT not in self.embedder.granularities:
            return Readiness.no(f"embedder {self.embedder.name} has no text vectors")
        return self.embedder.readiness()

    def _index(self, index: str, *, create: bool) -> _Open | None:
        with self._lock:
            if index in self._open:
                return self._open[index]
            folder = self.home / index
            if not (folder / "store.sqlite").exists():
                if not create:
                    return None
                folder.mkdir(parents=True, exist_ok=True)
            opened = _Open(folder, self.embedder.dim)
            self._open[index] = opened
            return opened

    def _check_embedder(self, idx: _Open, index: str) -> IndexFailed | None:
        built = idx.meta("embedder")
        if built is None:
            return None
        name, dim = json.loads(built)
        if name != self.embedder.name or dim != self.embedder.dim:
            return IndexFailed(
                index=index,
                backend=self.name,
                reason=(
                    f"index was built with embedder {name} (dim {dim}); this backend is "
                    f"configured with {self.embedder.name} (dim {self.embedder.dim}); "
                    "refusing to mix vectors"
                ),
                error_type="EmbedderMismatch",
            )
        return None

    def _late(self, index: str, deadline: Deadline) -> IndexTimeout:
        return IndexTimeout(
            index=index,
            backend=self.name,
            deadline_s=deadline.seconds,
            reason="the deadline had passed before the op could start; nothing was changed",
        )

    def close(self) -> None:
        with self._lock:
            for idx in self._open.values():
                idx.close()
            self._open.clear()

    # -- the vector interface (Capabilities.vectors) ---------------------------------------
    def vector_space(self) -> tuple[str, int]:
        """The configured embedder's name and dimension: what each index records."""
        return self.embedder.name, int(self.embedder.dim)

    def query_vector(self, text: str) -> Any:
        """The configured embedder's query vector of ``text``."""
        return self.embedder.embed_query(text, Granularity.TEXT)

    def _other_embedder(self, idx: _Open | None, index: str, embedder: str) -> BadRequest | None:
        """A ``BadRequest`` when the index records another embedder than ``embedder``."""
        built = idx.meta("embedder") if idx is not None else None
        name = json.loads(built)[0] if built is not None else self.embedder.name
        if name == embedder:
            return None
        return BadRequest(
            index=index,
            backend=self.name,
            field="embedder",
            reason=f"index '{index}' holds vectors of embedder {name}, not of {embedder}",
        )

    def add_vectors(
        self,
        index: str,
        passages: Sequence[Passage],
        vectors: Sequence[Any],
        *,
        embedder: str,
        max_bytes: int | None,
        deadline: Deadline,
    ) -> AddOutcome | BadRequest:
        """``add`` with the caller's vectors (checked by the guard) stored as they are."""
        if deadline.expired():
            return self._late(index, deadline)
        bad = self._other_embedder(self._index(index, create=False), index, embedder)
        if bad:
            return bad
        given = {
            p.id: np.asarray(v, dtype=np.float32) for p, v in zip(passages, vectors, strict=True)
        }
        return self._add(index, passages, max_bytes, deadline, given)

    def search_vector(
        self,
        index: str,
        vector: Any,
        *,
        top_k: int,
        embedder: str,
        with_vectors: bool,
        deadline: Deadline,
        filters: Mapping[str, Any] | None = None,
    ) -> SearchOutcome | BadRequest:
        """The passages nearest ``vector``; with ``with_vectors`` each hit carries its own."""
        idx = self._index(index, create=False)
        if idx is None:
            return IndexEmpty(index=index, backend=self.name)
        bad = self._other_embedder(idx, index, embedder)
        if bad:
            return bad
        q = np.asarray(vector, dtype=np.float32)
        return self._nearest(idx, index, lambda: q, top_k, deadline, filters, with_vectors)

    # -- ops -----------------------------------------------------------------------------
    def add(
        self, index: str, passages: Sequence[Passage], *, max_bytes: int | None, deadline: Deadline
    ) -> AddOutcome:
        return self._add(index, passages, max_bytes, deadline, None)

    def _add(
        self,
        index: str,
        passages: Sequence[Passage],
        max_bytes: int | None,
        deadline: Deadline,
        given: Mapping[str, Any] | None,
    ) -> AddOutcome:
        """Store the new passages with ``given`` vectors by id, or embedded when ``None``."""
        if deadline.expired():
            return self._late(index, deadline)
        idx = self._index(index, create=True)
        assert idx is not None
        with idx.lock:
            bad = self._check_embedder(idx, index)
            if bad:
                return bad
            stored = idx.meta("max_bytes")
            budget = effective_max_bytes(int(stored) if stored else None, max_bytes)
            ids = [p.id for p in passages]
            known: set[str] = set()
            for i in range(0, len(ids), 500):
                chunk = ids[i : i + 500]
                marks = ",".join("?" * len(chunk))
                known.update(
                    r[0]
                    for r in idx.db.execute(f"SELECT id FROM passages WHERE id IN ({marks})", chunk)
                )
            new = [p for p in passages if p.id not in known]
            per_vector = self.embedder.dim * 4
            graph_now = int(len(idx.graph) * per_vector * HNSW_OVERHEAD)
            if new and budget is not None:
                payload = sum(len(p.model_dump_json()) + per_vector for p in new)
                refused = over_budget(
                    index,
                    self.name,
                    needed=idx.db_bytes()
                    + graph_now
                    + payload
                    + int(len(new) * per_vector * HNSW_OVERHEAD),
                    max_bytes=budget,
                    check="projected",
                )
                if refused:
                    return refused
            if deadline.expired():
                return IndexTimeout(index=index, backend=self.name, deadline_s=deadline.seconds)
            if not new:
                vectors = np.zeros((0, self.embedder.dim), dtype=np.float32)
            elif given is not None:
                vectors = np.stack([given[p.id] for p in new]).astype(np.float32)
            else:
                texts = [p.text for p in new]
                vectors = np.stack(self.embedder.embed_documents(texts, Granularity.TEXT))
            if deadline.expired():
                return IndexTimeout(
                    index=index,
                    backend=self.name,
                    deadline_s=deadline.seconds,
                    reason="embedding the batch ran past the deadline; nothing was written",
                )
            db = idx.db
            db.execute("BEGIN IMMEDIATE")
            try:
                if stored is None and max_bytes is not None:
                    db.execute("INSERT INTO meta VALUES ('max_bytes', ?)", (str(max_bytes),))
                if idx.meta("embedder") is None:
                    db.execute(
                        "INSERT INTO meta VALUES ('embedder', ?)",
                        (json.dumps([self.embedder.name, self.embedder.dim]),),
                    )
                cur = db.execute("SELECT coalesce(max(key), 0) FROM passages").fetchone()[0]
                keys = list(range(cur + 1, cur + 1 + len(new)))
                db.executemany(
                    "INSERT INTO passages(key, id, passage, vector) VALUES (?, ?, ?, ?)",
                    [
                        (k, p.id, p.model_dump_json(), v.astype(np.float32).tobytes())
                        for k, p, v in zip(keys, new, vectors, strict=True)
                    ],
                )
                db.execute(
                    "INSERT INTO meta VALUES ('generation', ?) ON CONFLICT(key) DO UPDATE "
                    "SET value = CAST(value AS INTEGER) + 1",
                    ("1",),
                )
                measured = idx.db_bytes() + int(
                    (len(idx.graph) + len(new)) * per_vector * HNSW_OVERHEAD
                )
                refused = over_budget(
                    index, self.name, needed=measured, max_bytes=budget, check="measured"
                )
                if refused:
                    db.execute("ROLLBACK")
                    return refused
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            if new:
                idx.graph.add(np.array(keys, dtype=np.uint64), vectors, threads=BUILD_THREADS)
            idx.save()
            return Indexed.of_batch(
                index=index,
                backend=self.name,
                ids=ids,
                added_ids=[p.id for p in new],
                bytes_used=measured,
                max_bytes=budget,
                estimate=True,
            )

    def search(
        self,
        index: str,
        query: str,
        *,
        top_k: int,
        deadline: Deadline,
        filters: Mapping[str, Any] | None = None,
    ) -> SearchOutcome:
        idx = self._index(index, create=False)
        if idx is None:
            return IndexEmpty(index=index, backend=self.name)

        def embedded() -> Any:
            return self.embedder.embed_query(query, Granularity.TEXT).astype(np.float32)

        return self._nearest(idx, index, embedded, top_k, deadline, filters, False)

    def _nearest(
        self,
        idx: _Open,
        index: str,
        vector: Callable[[], Any],
        top_k: int,
        deadline: Deadline,
        filters: Mapping[str, Any] | None,
        with_vectors: bool,
    ) -> SearchOutcome:
        """The ``top_k`` passages nearest ``vector()`` (called once the index is known to
        hold passages), each hit with its stored vector when ``with_vectors``."""
        with idx.lock:
            bad = self._check_embedder(idx, index)
            if bad:
                return bad
            total = idx.count()
            if total == 0:
                if len(idx.graph):
                    return self._lost(index, len(idx.graph))
                return IndexEmpty(index=index, backend=self.name)
            q = vector()
            if not np.any(q):
                return NoMatch(index=index, backend=self.name, searched=total)
            # filters: widen the search, then keep matching passages in rank order
            want = total if filters else min(top_k, total)
            # HNSW is approximate: when the caller asks for a large share of the index (or the
            # index is small) a brute-force pass costs about the same and misses nothing.
            exact = want * 2 >= total or total <= EXACT_BELOW
            idx.graph.expansion_search = max(self.expansion, want)
            matches = idx.graph.search(q, want, exact=exact)
            keys = [int(k) for k in matches.keys]
            dists = [float(d) for d in matches.distances]
            if deadline.expired():
                return IndexTimeout(index=index, backend=self.name, deadline_s=deadline.seconds)
            marks = ",".join("?" * len(keys))
            rows = {
                key: (passage, blob)
                for key, passage, blob in idx.db.execute(
                    f"SELECT key, passage, vector FROM passages WHERE key IN ({marks})", keys
                ).fetchall()
            }
        lost = sum(1 for key in keys if key not in rows)
        if lost:
            return self._lost(index, lost)
        found: list[tuple[float, Passage, tuple[float, ...] | None]] = []
        for key, dist in zip(keys, dists, strict=True):
            raw, blob = rows[key]
            data = json.loads(raw)
            meta = data.get("metadata") or {}
            if filters and any(meta.get(k) != v for k, v in filters.items()):
                continue
            passage = Passage.from_stored(
                id=data["id"],
                text=data["text"],
                source=Source.model_validate(data["source"]),
                start=data["start"],
                end=data["end"],
                document_sha256=data.get("document_sha256"),
                metadata=meta,
                digest=data.get("digest"),
            )
            stored = (
                tuple(float(x) for x in np.frombuffer(blob, dtype=np.float32))
                if with_vectors
                else None
            )
            found.append((1.0 - dist, passage, stored))
            if len(found) == top_k:
                break
        if not found:
            return NoMatch(index=index, backend=self.name, searched=total)
        # HNSW distances come back sorted; float noise can reorder equal scores, so make the
        # order exact for the guard's check.  Built without validation: the guard checks
        # every hit (ranks, scores, each passage's id and digest).
        found.sort(key=lambda f: -f[0])
        hits = [
            Hit.from_stored(
                rank=rank, score=score, score_scale=SCALE.name, passage=passage, vector=stored
            )
            for rank, (score, passage, stored) in enumerate(found, start=1)
        ]
        return Searched.from_stored(
            index=index, backend=self.name, hits=hits, searched=total, scale=SCALE
        )

    def _lost(self, index: str, count: int) -> IndexFailed:
        return IndexFailed(
            index=index,
            backend=self.name,
            reason=(
                f"the HNSW graph holds {count} passage(s) whose rows are not in store.sqlite "
                "(deleted behind the graph); the index cannot be trusted: rebuild it"
            ),
            error_type="Inconsistent",
        )

    def remove(self, index: str, ids: Sequence[str], *, deadline: Deadline) -> RemoveOutcome:
        if deadline.expired():
            return self._late(index, deadline)
        idx = self._index(index, create=False)
        if idx is None:
            return Removed(index=index, backend=self.name, removed=0, missing_ids=list(ids))
        with idx.lock:
            found = (
                dict(
                    idx.db.execute(
                        f"SELECT id, key FROM passages WHERE id IN ({','.join('?' * len(ids))})",
                        list(ids),
                    ).fetchall()
                )
                if ids
                else {}
            )
            idx.db.execute("BEGIN IMMEDIATE")
            try:
                idx.db.executemany("DELETE FROM passages WHERE id = ?", [(i,) for i in found])
                idx.db.execute(
                    "INSERT INTO meta VALUES ('generation', '1') ON CONFLICT(key) DO UPDATE "
                    "SET value = CAST(value AS INTEGER) + 1"
                )
                idx.db.execute("COMMIT")
            except BaseException:
                idx.db.execute("ROLLBACK")
                raise
            for key in found.values():
                idx.graph.remove(int(key))
            idx.save()
        return Removed.of_batch(index=index, backend=self.name, ids=ids, removed_ids=list(found))

    def status(self, index: str, *, deadline: Deadline) -> StatusOutcome:
        if deadline.expired():
            return self._late(index, deadline)
        idx = self._index(index, create=False)
        if idx is None:
            return IndexStatus(index=index, backend=self.name, exists=False, passages=0)
        with idx.lock:
            budget = idx.meta("max_bytes")
            graph_bytes = (idx.folder / "hnsw.usearch").stat().st_size
            return IndexStatus(
                index=index,
                backend=self.name,
                exists=True,
                passages=idx.count(),
                bytes_used=idx.db_bytes() + graph_bytes,
                max_bytes=int(budget) if budget else None,
                embedder=self.embedder.name,
            )

    # -- extras and kit hooks ------------------------------------------------------------
    def op_drop(self, index: str, *, deadline: Deadline) -> IndexStatus | IndexTimeout:
        import shutil

        if deadline.expired():  # the guard has given up on this call: delete nothing
            return self._late(index, deadline)
        with self._lock:
            opened = self._open.pop(index, None)
            if opened:
                opened.close()
        shutil.rmtree(self.home / index, ignore_errors=True)
        return IndexStatus(index=index, backend=self.name, exists=False, passages=0)

    def tamper(self, index: str, passage_id: str, text: str) -> None:
        """Conformance-kit hook: change a stored passage's text behind the backend's back."""
        idx = self._index(index, create=False)
        assert idx is not None
        with idx.lock:
            raw = idx.db.execute(
                "SELECT passage FROM passages WHERE id=?", (passage_id,)
            ).fetchone()
            data = json.loads(raw[0])
            data["text"] = text
            idx.db.execute(
                "UPDATE passages SET passage=? WHERE id=?", (json.dumps(data), passage_id)
            )
            idx.db.commit()

    def tamper_record(self, index: str, passage_id: str, changes: Mapping[str, Any]) -> None:
        """Conformance-kit hook: alter fields of a stored passage behind the backend's back
        (``text``, ``metadata``, ``licence``, ``provenance``, ``start``, ``end``; ``digest``:
        ``None`` removes it), its id, digest (unless named) and vector kept."""
        idx = self._index(index, create=False)
        if idx is None:
            raise LookupError(f"index {index!r} does not exist")
        with idx.lock:
            row = idx.db.execute(
                "SELECT passage FROM passages WHERE id=?", (passage_id,)
            ).fetchone()
            if row is None:
                raise LookupError(f"passage {passage_id[:12]} is not in index {index!r}")
            data = json.loads(row[0])
            for key in ("text", "metadata", "start", "end", "digest"):
                if key in changes:
                    data[key] = changes[key]
            for key in ("licence", "provenance"):
                if key in changes:
                    data["source"][key] = changes[key]
            idx.db.execute(
                "UPDATE passages SET passage=? WHERE id=?", (json.dumps(data), passage_id)
            )

    def delete_rows(self, index: str, ids: Sequence[str]) -> None:
        """Conformance-kit hook: delete passages' rows from ``store.sqlite`` but not their
        vectors from the HNSW graph (nor the generation), as an edit of the file behind the
        backend's back would: searches must then answer ``INDEX_FAILED``."""
        idx = self._index(index, create=False)
        if idx is None:
            raise LookupError(f"index {index!r} does not exist")
        with idx.lock:
            idx.db.executemany("DELETE FROM passages WHERE id = ?", [(i,) for i in ids])
