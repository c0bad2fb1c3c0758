"""``similarity``: score a query against texts, or against stored passages by id, with an
index's own scorer, never a number the index would not give.

* A dense backend that offers ``rerank`` (:class:`indexplug.protocols.Reranker`, e.g. colbert's
  MaxSim) scores through it, under the guard: its score is the one its searches give.
* Another dense backend scores with its own embedder (its ``embedder`` attribute, or what its
  ``embedder()`` method makes): the cosine of the two texts' vectors for a text embedder,
  MaxSim (for each query token, the best cosine with a passage token, summed) for a token
  embedder.  Passages named by id are read back (``get``) and their text embedded again with
  the same embedder.
* A lexical backend (BM25 and its kin score a query against an index's term statistics, not one
  text against another) answers :class:`NotSupported`.

The whole op keeps one deadline: the ``get`` and the rerank run under the guard, and embedding
runs on a worker thread the caller stops waiting for at the deadline (``IndexTimeout``); an
embedder that raises is ``IndexFailed``, never an exception out of the op.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

from indexplug.deadlines import Deadline
from indexplug.guard import Guard
from indexplug.ops import SimilarityData, SimilarityScore
from indexplug.outcomes import Got, IndexFailed, IndexTimeout, NoMatch, ScoreScale, Searched
from indexplug.passages import Passage
from indexplug.pools import LazyPool, discard
from indexplug.protocols import Embedder, Granularity

_EMBEDDING = LazyPool(2, "indexplug-similarity")
"""Where embedding runs, so that a caller can stop waiting for it at the deadline."""

COSINE = ScoreScale(
    name="cosine",
    higher_is_better=True,
    comparable_across_searches=True,
    meaning="cosine of the index embedder's vectors, from -1 to 1",
)
MAXSIM = ScoreScale(
    name="maxsim",
    higher_is_better=True,
    comparable_across_searches=False,
    meaning="sum over the query's tokens of the best cosine with a passage token",
)


@dataclass(frozen=True)
class NotSupported:
    """The index has no similarity of two texts (a lexical scorer)."""

    reason: str


Slot = tuple[int, str | None]
"""Where a scored passage was in the request: its position, and its id when asked by id."""


def _passages(
    guard: Guard, index: str, texts: list[str] | None, ids: list[str] | None, deadline_s: Any
) -> tuple[list[Passage], list[Slot], list[str]] | Any:
    """The passages to score, the slot of each, and the ids not found; or the outcome of a
    ``get`` that failed."""
    if texts is not None:
        made = [Passage.create(t, f"similarity://text/{i}") for i, t in enumerate(texts)]
        return made, [(i, None) for i in range(len(made))], []
    got = guard.get(index, ids or [], deadline_s=deadline_s)
    if not isinstance(got, Got):
        return got
    by_id = {p.id: p for p in got.passages}
    slots: list[Slot] = [(n, i) for n, i in enumerate(ids or []) if i in by_id]
    return [by_id[i] for _, i in slots if i is not None], slots, list(got.missing_ids)


def score(
    guard: Guard,
    index: str,
    query: str,
    *,
    texts: list[str] | None = None,
    ids: list[str] | None = None,
    deadline_s: float | None = None,
) -> SimilarityData | NotSupported | Any:
    """Scores of ``query`` against each of ``texts`` or of the passages ``ids`` (in the order
    given), :class:`NotSupported` for a lexical index, or the outcome of a read that failed."""
    deadline = Deadline.after(deadline_s)
    backend = guard.backend
    embedder = getattr(backend, "embedder", None)
    dense = bool(getattr(backend.capabilities, "dense", False))
    rerank = callable(getattr(backend, "op_rerank", None))
    if dense and not rerank and not isinstance(embedder, Embedder) and callable(embedder):
        embedder = embedder()  # a backend that makes its embedder on first use (chroma)
    if not dense or not (rerank or isinstance(embedder, Embedder)):
        return NotSupported(
            f"backend '{guard.name}' scores by {backend.score_scale.name}, which weighs a query's "
            "words against the whole index, not one text against another: it has no similarity "
            "to answer (use a dense index)"
        )
    got = _passages(guard, index, texts, ids, _left(deadline))
    if not isinstance(got, tuple):
        return got
    passages, shown, missing = got
    if not passages:
        return SimilarityData(scores=[], scale=None, scorer="none", missing_ids=missing)
    if rerank:
        out = guard.call_extra("rerank", index, _left(deadline), query=query, passages=passages)
        if isinstance(out, NoMatch):
            return SimilarityData(scores=[], scorer="rerank", missing_ids=missing)
        if not isinstance(out, Searched):
            return out
        by_id = {h.passage.id: h.score for h in out.hits}
        scale = out.scale or backend.score_scale
        scores = [
            SimilarityScore(n=slot[0], id=slot[1], score=by_id[p.id])
            for slot, p in zip(shown, passages, strict=True)
            if p.id in by_id
        ]
        return SimilarityData(scores=scores, scale=scale, scorer="rerank", missing_ids=missing)
    assert isinstance(embedder, Embedder)
    model = embedder
    return _within(
        guard, index, deadline, lambda: _embedded(model, query, passages, shown, missing)
    )


def _left(deadline: Deadline) -> float:
    """What is left of ``deadline`` for a guarded read (a guard takes no zero deadline: at
    the end it answers ``IndexTimeout`` at once)."""
    return max(deadline.remaining(), 1e-3)


def _within(
    guard: Guard, index: str, deadline: Deadline, fn: Callable[[], SimilarityData]
) -> SimilarityData | IndexTimeout | IndexFailed:
    """``fn()`` on a worker, answered by ``deadline``: its data, ``IndexTimeout`` when it is
    not done in time (the worker is left to finish), ``IndexFailed`` when it raises."""
    future = _EMBEDDING.get().submit(fn)
    try:
        return future.result(timeout=deadline.remaining())
    except FutureTimeout:
        future.add_done_callback(discard)
        return IndexTimeout(
            index=index,
            backend=guard.name,
            deadline_s=deadline.seconds,
            reason=f"backend '{guard.name}': embedding for similarity did not finish in time",
        )
    except Exception as exc:
        return IndexFailed(
            index=index,
            backend=guard.name,
            reason=f"backend '{guard.name}': its embedder raised during similarity: {exc}",
            error_type=type(exc).__name__,
        )


def _embedded(
    embedder: Embedder,
    query: str,
    passages: list[Passage],
    shown: list[Slot],
    missing: list[str],
) -> SimilarityData:
    import numpy as np

    def unit(v: Any) -> Any:
        v = np.asarray(v, dtype=np.float32)
        norm = np.linalg.norm(v, axis=-1, keepdims=True)
        return v / np.where(norm == 0, 1.0, norm)

    texts = [p.text for p in passages]
    if Granularity.TEXT in embedder.granularities:
        q = unit(embedder.embed_query(query, Granularity.TEXT))
        docs = [unit(d) for d in embedder.embed_documents(texts, Granularity.TEXT)]
        values = [float(np.dot(q, d)) for d in docs]
        scale, scorer = COSINE, "cosine"
    else:
        q = unit(embedder.embed_query(query, Granularity.TOKEN))
        docs = [unit(d) for d in embedder.embed_documents(texts, Granularity.TOKEN)]
        values = [float((q @ d.T).max(axis=1).sum()) if len(d) and len(q) else 0.0 for d in docs]
        scale, scorer = MAXSIM, "maxsim"
    scores = [
        SimilarityScore(n=slot[0], id=slot[1], score=v)
        for slot, v in zip(shown, values, strict=True)
    ]
    return SimilarityData(scores=scores, scale=scale, scorer=scorer, missing_ids=missing)
