"""Exact MaxSim: the late-interaction score, and the per-token account behind it.

``maxsim(Q, D) = sum over query tokens q of max over passage tokens d of cos(q, d)``.  Vectors are
L2-normalised, so the cosine is a dot product.  Passage vectors come from the store as int8 codes
with a scale per token (:mod:`.codec`); the codes are widened to float32 so one BLAS product
scores every token, and the scales are applied to the (much smaller) result.  Every score in
this package is computed by this module from the same stored codes, so the engine's answer, the
exhaustive reference in ``bench/exhaustive_recall.py``, ``rerank`` and ``explain`` agree.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from indexplug_colbert.codec import Block

F32 = NDArray[np.float32]

EMPTY_SCORE = float("-inf")
"""A passage with no token vectors (no word the embedder keeps) can match nothing."""


def as_query(query: NDArray[np.floating]) -> F32:
    """The query matrix as contiguous float32 ``(tokens, dim)``."""
    q = np.ascontiguousarray(query, dtype=np.float32)
    if q.ndim != 2:
        raise ValueError(f"a query is a (tokens, dim) matrix, got shape {q.shape}")
    return q


def maxsim_blocks(query: F32, blocks: Sequence[Block]) -> F32:
    """MaxSim of ``query`` against each passage's stored block, in one product.

    The blocks' codes are stacked into one float32 matrix so a single BLAS call scores every
    token of every passage; after scaling, ``np.maximum.reduceat`` takes each passage's
    per-query-token maximum.  Empty blocks score :data:`EMPTY_SCORE`.
    """
    scores = np.full(len(blocks), EMPTY_SCORE, dtype=np.float32)
    if not blocks or len(query) == 0:
        return scores
    lengths = np.fromiter((len(b) for b in blocks), dtype=np.int64, count=len(blocks))
    keep = np.flatnonzero(lengths)
    if len(keep) == 0:
        return scores
    kept = [blocks[int(i)] for i in keep]
    # widened straight into one float32 matrix: no int8 copy of the stack first
    codes = np.empty((int(lengths[keep].sum()), kept[0].codes.shape[1]), dtype=np.float32)
    np.concatenate([b.codes for b in kept], out=codes, casting="unsafe")
    scales = np.concatenate([b.scales for b in kept])
    sims = codes @ query.T  # (total tokens, query tokens)
    sims *= scales[:, None]
    starts = np.zeros(len(keep), dtype=np.int64)
    np.cumsum(lengths[keep][:-1], out=starts[1:])
    best = np.maximum.reduceat(sims, starts, axis=0)  # (passages, query tokens)
    scores[keep] = best.sum(axis=1, dtype=np.float32)
    return scores


def token_matches(query: F32, block: Block) -> tuple[NDArray[np.int64], F32]:
    """For each query token, the passage token it matched and the cosine (its contribution)."""
    if len(block) == 0:
        return np.full(len(query), -1, dtype=np.int64), np.zeros(len(query), dtype=np.float32)
    sims = (np.asarray(block.codes, dtype=np.float32) @ query.T) * block.scales[:, None]
    sims = np.ascontiguousarray(sims.T)
    best = sims.argmax(axis=1)
    return best.astype(np.int64), sims[np.arange(len(query)), best].astype(np.float32)


def top_k(scores: F32, k: int) -> NDArray[np.int64]:
    """Indices of the ``k`` best finite scores, best first; ties keep the lower index first so
    the order is deterministic (the guard also requires non-increasing scores)."""
    finite = np.flatnonzero(np.isfinite(scores))
    if len(finite) == 0 or k <= 0:
        return np.zeros(0, dtype=np.int64)
    if len(finite) > k:
        part = np.argpartition(-scores[finite], k - 1)[:k]
        finite = finite[part]
    order = np.lexsort((finite, -scores[finite]))
    return finite[order].astype(np.int64)
