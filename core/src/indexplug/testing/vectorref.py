"""A small, correct in-memory backend of the vector interface (``Capabilities.vectors``).

The kit's own tests need a backend that passes every vector check, so that deliberately broken
variants can show those checks have teeth; and a backend author can read it as a worked
example of :class:`~indexplug.protocols.VectorStore`: the embedder's name and dimension are
recorded with each index when it is created, vectors stated to be of another embedder are
answered ``BadRequest`` (field ``embedder``), a passage already stored keeps its vector, and a
vector search answers the stored vectors on request.

Plain ``add`` and ``search`` embed with a deterministic embedder (``hashing:64`` unless given
another); scores are cosines.  It lives in memory only and serves one process (one lock).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from indexplug.deadlines import Deadline
from indexplug.embedders.hashing import HashingEmbedder
from indexplug.filters import ALL_OPS, matches, parse_filter
from indexplug.outcomes import (
    AddOutcome,
    BadRequest,
    Hit,
    Indexed,
    IndexEmpty,
    IndexStatus,
    IndexTimeout,
    NoMatch,
    Removed,
    RemoveOutcome,
    ScoreScale,
    Searched,
    SearchOutcome,
    StatusOutcome,
    VectorAddOutcome,
    VectorSearchOutcome,
)
from indexplug.passages import Passage
from indexplug.protocols import Capabilities, Embedder, Granularity, Readiness

if TYPE_CHECKING:
    from indexplug.protocols import Vector

SCALE = ScoreScale(
    name="cosine",
    higher_is_better=True,
    comparable_across_searches=True,
    meaning="cosine similarity of L2-normalised vectors, -1..1",
)


@dataclass
class _VIndex:
    embedder: str
    dim: int
    passages: dict[str, Passage] = field(default_factory=dict)
    vectors: dict[str, Any] = field(default_factory=dict)


class VectorReference:
    """See the module docstring."""

    name = "vector-reference"
    description = "In-memory reference backend of the vector interface (cosine, hashing:64)."
    score_scale = SCALE

    def __init__(self, embedder: Embedder | None = None) -> None:
        self.embedder: Embedder = embedder or HashingEmbedder(64)
        self.capabilities = Capabilities(
            filters=True, filter_operators=ALL_OPS, deletion=True, dense=True, vectors=True
        )
        self._lock = threading.Lock()
        self._indexes: dict[str, _VIndex] = {}

    def readiness(self) -> Readiness:
        return Readiness.yes()

    def close(self) -> None:
        pass

    # -- the vector interface ----------------------------------------------------------------
    def vector_space(self) -> tuple[str, int]:
        return self.embedder.name, int(self.embedder.dim)

    def query_vector(self, text: str) -> Vector:
        return self.embedder.embed_query(text, Granularity.TEXT)

    def _mismatch(self, index: str, embedder: str) -> BadRequest | None:
        ix = self._indexes.get(index)
        recorded = ix.embedder if ix is not None else self.embedder.name
        if embedder != recorded:
            return BadRequest(
                index=index,
                backend=self.name,
                field="embedder",
                reason=f"index '{index}' holds vectors of {recorded}, not {embedder}",
            )
        return None

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
        if deadline.expired():
            return IndexTimeout(index=index, backend=self.name, deadline_s=deadline.seconds)
        with self._lock:
            if out := self._mismatch(index, embedder):
                return out
            return self._store(index, passages, vectors)

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
        with self._lock:
            if out := self._mismatch(index, embedder):
                return out
            return self._nearest(index, vector, top_k, filters, with_vectors)

    # -- the plain ops -----------------------------------------------------------------------
    def add(
        self, index: str, passages: Sequence[Passage], *, max_bytes: int | None, deadline: Deadline
    ) -> AddOutcome:
        vectors = self.embedder.embed_documents([p.text for p in passages], Granularity.TEXT)
        with self._lock:
            out = self._store(index, passages, vectors)
        assert not isinstance(out, BadRequest)
        return out

    def search(
        self, index: str, query: str, *, top_k: int, deadline: Deadline, filters: Any = None
    ) -> SearchOutcome:
        vector = self.embedder.embed_query(query, Granularity.TEXT)
        with self._lock:
            out = self._nearest(index, vector, top_k, filters, False)
        assert not isinstance(out, BadRequest)
        return out

    def remove(self, index: str, ids: Sequence[str], *, deadline: Deadline) -> RemoveOutcome:
        with self._lock:
            ix = self._indexes.get(index)
            gone = [i for i in ids if ix is not None and i in ix.passages]
            for pid in gone:
                assert ix is not None
                del ix.passages[pid]
                del ix.vectors[pid]
        return Removed.of_batch(index=index, backend=self.name, ids=ids, removed_ids=gone)

    def status(self, index: str, *, deadline: Deadline) -> StatusOutcome:
        with self._lock:
            ix = self._indexes.get(index)
            return IndexStatus(
                index=index,
                backend=self.name,
                exists=ix is not None,
                passages=len(ix.passages) if ix is not None else 0,
            )

    # -- storage -----------------------------------------------------------------------------
    def _store(
        self, index: str, passages: Sequence[Passage], vectors: Sequence[Any]
    ) -> Indexed | BadRequest:
        import numpy as np

        ix = self._indexes.get(index)
        if ix is None:
            ix = self._indexes[index] = _VIndex(self.embedder.name, int(self.embedder.dim))
        new = [(p, v) for p, v in zip(passages, vectors, strict=True) if p.id not in ix.passages]
        for p, v in new:
            ix.passages[p.id] = p
            ix.vectors[p.id] = np.array(v, dtype=np.float32)
        return Indexed.of_batch(
            index=index,
            backend=self.name,
            ids=[p.id for p in passages],
            added_ids=[p.id for p, _ in new],
        )

    def _nearest(
        self, index: str, vector: Any, top_k: int, filters: Any, with_vectors: bool
    ) -> Searched | NoMatch | IndexEmpty:
        import numpy as np

        ix = self._indexes.get(index)
        if ix is None or not ix.passages:
            return IndexEmpty(index=index, backend=self.name)
        flt = parse_filter(filters)
        query = np.asarray(vector, dtype=np.float32)
        scored = [
            (float(np.dot(query, ix.vectors[pid])), n, pid)
            for n, (pid, p) in enumerate(ix.passages.items())
            if flt is None or matches(flt, p.metadata)
        ]
        scored.sort(key=lambda t: (-t[0], t[1]))
        hits = [
            Hit.from_stored(
                rank=rank,
                score=score,
                score_scale=SCALE.name,
                passage=ix.passages[pid],
                vector=self._vector_out(ix.vectors[pid]) if with_vectors else None,
            )
            for rank, (score, _, pid) in enumerate(scored[:top_k], start=1)
        ]
        if not hits:
            return NoMatch(index=index, backend=self.name, searched=len(ix.passages))
        return Searched.from_stored(
            index=index, backend=self.name, hits=hits, searched=len(ix.passages), scale=SCALE
        )

    def _vector_out(self, stored: Any) -> tuple[float, ...]:
        """The stored vector as a hit carries it (a broken variant may override it)."""
        return tuple(float(x) for x in stored)
