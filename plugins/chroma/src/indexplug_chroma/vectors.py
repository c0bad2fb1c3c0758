"""The chroma backend's vector interface (``Capabilities.vectors``): passages added with the
caller's own vectors, a search by a query vector, and the stored vectors returned with the
hits on request.

Both go through the same steps as ``add`` and ``search`` (known ids, keys, budgets, filters,
the exact scan of what the graph cannot reach), with the caller's vectors in place of the
embedder's.  The embedder the collection recorded must be the one the vectors are stated to
be of: another answers ``BAD_REQUEST`` (field ``embedder``), before anything is written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from indexplug.deadlines import Deadline
from indexplug.filters import Filter
from indexplug.outcomes import BadRequest, Hit, Searched, VectorAddOutcome, VectorSearchOutcome
from indexplug.passages import MetadataValue, Passage
from indexplug.protocols import Granularity, Vector

from indexplug_chroma import fields
from indexplug_chroma.aqueries import ChromaAsyncQueries
from indexplug_chroma.base import _checked_vector
from indexplug_chroma.collection import EMBEDDER_KEY
from indexplug_chroma.reads import _in_time
from indexplug_chroma.writes import ChromaWrites


class ChromaVectors(ChromaWrites, ChromaAsyncQueries):
    """``vector_space``, ``add_vectors`` and ``search_vector``."""

    def vector_space(self) -> tuple[str, int]:
        """The configured embedder's name and dimension (recorded with every new index)."""
        emb = self.embedder()
        return emb.name, int(emb.dim)

    def query_vector(self, text: str) -> Vector:
        """The configured embedder's query vector of ``text``."""
        return self.embedder().embed_query(text, Granularity.TEXT)

    def _other_embedder(self, index: str, embedder: str) -> BadRequest | None:
        """``BadRequest`` when the index records another embedder than ``embedder`` (an
        ``...@auto`` configuration accepts the concrete path an index recorded for its
        model, as ``add`` and ``search`` do)."""
        emb = self.embedder()
        recorded: Any = None
        if self._store.exists(index) is not False:
            with self._store.use(index) as client:
                coll = self._store.get(client, index)
                if coll is not None:
                    recorded = dict(coll.metadata or {}).get(EMBEDDER_KEY)
        recorded = emb.name if recorded is None else str(recorded)
        if recorded == embedder:
            return None
        if embedder == emb.name and self._recorded_embedder(recorded, emb) is not emb:
            return None
        return BadRequest(
            index=index,
            backend=self.name,
            field="embedder",
            reason=f"index '{index}' holds vectors of embedder {recorded}, not of {embedder}",
        )

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
        """``add`` with ``vectors[i]`` stored as passage ``i``'s embedding."""
        try:
            _in_time(deadline, "starting the write")
            for p in passages:
                fields.fields_of(p.metadata)  # a value Chroma cannot store: refused up front
            bad = self._other_embedder(index, embedder)
            if bad is not None:
                return bad
            emb = self.embedder()
            given = {p.id: _checked_vector(v, emb) for p, v in zip(passages, vectors, strict=True)}
            with self._write_lock(index, deadline):
                try:
                    return self._add_locked(index, passages, given, max_bytes, emb, deadline)
                finally:
                    self._store.forget_count(index)
        except Exception as exc:
            return self._failure(index, exc, deadline)

    def search_vector(
        self,
        index: str,
        vector: Vector,
        *,
        top_k: int,
        embedder: str,
        with_vectors: bool,
        deadline: Deadline,
        filters: Mapping[str, MetadataValue] | Filter | None = None,
    ) -> VectorSearchOutcome:
        """The ``top_k`` passages nearest ``vector``; with ``with_vectors`` each hit carries
        its stored embedding (read in one more call, after the search)."""
        try:
            bad = self._other_embedder(index, embedder)
        except Exception as exc:
            return self._failure(index, exc, deadline)
        if bad is not None:
            return bad
        out = self._searched(index, np.asarray(vector, dtype=np.float32), top_k, deadline, filters)
        if not with_vectors or type(out) is not Searched:
            return out
        try:
            return self._with_vectors(index, out, deadline)
        except Exception as exc:
            return self._failure(index, exc, deadline)

    def _with_vectors(self, index: str, out: Searched, deadline: Deadline) -> Searched:
        """``out`` with each hit's stored embedding (a hit removed meanwhile has none, and
        the guard then refuses the answer rather than pass on a hit without its vector)."""
        _in_time(deadline, "reading the hits' vectors")
        ids = [h.passage.id for h in out.hits]
        with self._store.use(index) as client:
            coll = self._store.get(client, index)
            got = coll.get(ids=ids, include=["embeddings"]) if coll is not None else None
        found: dict[str, Any] = {}
        if got is not None:
            found = dict(zip(got["ids"], got["embeddings"], strict=True))
        hits = [
            Hit.from_stored(
                rank=h.rank,
                score=h.score,
                score_scale=h.score_scale,
                passage=h.passage,
                vector=(
                    tuple(float(x) for x in found[h.passage.id]) if h.passage.id in found else None
                ),
            )
            for h in out.hits
        ]
        _in_time(deadline, "the hits' vectors came back")
        return Searched.from_stored(
            index=out.index, backend=out.backend, hits=hits, searched=out.searched, scale=out.scale
        )
