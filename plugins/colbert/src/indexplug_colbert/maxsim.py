"""Exact MaxSim: the late-interaction score, and the per-token account behind it.

``maxsim(Q, D) = sum over query tokens q of max over passage tokens d of cos(q, d)``.  Vectors are
L2-normalised, so the cosine is a dot product.  Passage vectors come from the store as int8 codes
with a scale per token (:mod:`.codec`), and the query is quantised the same way, so every
token-by-token similarity is ``dot(code_q, code_d) * scale_q * scale_d``: one exact integer product
for all the tokens of all the passages scored (:func:`indexplug_colbert.kernels.int8_dots`, on
int8 instructions where the CPU has them, else float32), with the two scales applied to the
(much smaller) result.  Quantising the query moves a cosine by about as little as quantising the
passage did (a few thousandths at most).

Every score in this package is computed by this module from the same stored codes and the same
quantised query, so the engine's answer, the exhaustive reference in
``bench/exhaustive_recall.py``, ``rerank`` and ``explain`` agree exactly.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from indexplug_colbert.codec import Block, quantize
from indexplug_colbert.kernels import int8_dots

F32 = NDArray[np.float32]

EMPTY_SCORE = float("-inf")
"""A passage with no token vectors (no word the embedder keeps) can match nothing."""


def as_query(query: NDArray[np.floating]) -> F32:
    """The query matrix as contiguous float32 ``(tokens, dim)``."""
    q = np.ascontiguousarray(query, dtype=np.float32)
    if q.ndim != 2:
        raise ValueError(f"a query is a (tokens, dim) matrix, got shape {q.shape}")
    return q


def as_query_block(query: F32 | Block) -> Block:
    """The query as it is scored: int8 codes and a scale per token (quantised like a passage)."""
    return query if isinstance(query, Block) else quantize(query)


def maxsim_blocks(query: F32 | Block, blocks: Sequence[Block]) -> F32:
    """MaxSim of ``query`` against each passage's stored block, in one product.

    The blocks' codes are stacked into one int8 matrix so a single integer product scores every
    token of every passage; after scaling, each passage's per-query-token maximum is taken.
    Empty blocks score :data:`EMPTY_SCORE`.  Pass the query already quantised
    (:func:`as_query_block`) when scoring several groups of blocks.
    """
    scores = np.full(len(blocks), EMPTY_SCORE, dtype=np.float32)
    if not blocks or len(query) == 0:
        return scores
    lengths = np.fromiter((len(b) for b in blocks), dtype=np.int64, count=len(blocks))
    keep = np.flatnonzero(lengths)
    if len(keep) == 0:
        return scores
    q = as_query_block(query)
    kept = [blocks[int(i)] for i in keep]
    codes = np.concatenate([b.codes for b in kept])
    scales = np.concatenate([b.scales for b in kept])
    sims = int8_dots(codes, q.codes)  # (total tokens, query tokens)
    sims *= scales[:, None]
    best = _passage_maxima(sims, lengths[keep])  # (passages, query tokens)
    # The query's scales are positive and rounding is monotonic, so scaling the maxima gives
    # exactly what scaling every similarity first would (on a matrix ~250x smaller).
    best *= q.scales[None, :]
    scores[keep] = best.sum(axis=1, dtype=np.float32)
    return scores


def _passage_maxima(sims: F32, lengths: NDArray[np.int64]) -> F32:
    """Each passage's per-query-token maximum over its rows of ``sims`` (rows stacked in order).

    A slice's ``max(axis=0)`` per passage: ``np.maximum.reduceat`` along the rows gives the same
    values (a maximum is exact) but was several times slower on the exact stage's 128 passages.
    """
    best = np.empty((len(lengths), sims.shape[1]), dtype=np.float32)
    end = 0
    for i, n in enumerate(lengths.tolist()):
        start, end = end, end + n
        np.max(sims[start:end], axis=0, out=best[i])
    return best


def token_matches(query: F32 | Block, block: Block) -> tuple[NDArray[np.int64], F32]:
    """For each query token, the passage token it matched and the cosine (its contribution)."""
    if len(block) == 0:
        return np.full(len(query), -1, dtype=np.int64), np.zeros(len(query), dtype=np.float32)
    q = as_query_block(query)
    sims = int8_dots(np.asarray(block.codes), q.codes)
    sims *= np.asarray(block.scales, dtype=np.float32)[:, None]
    sims *= q.scales[None, :]
    sims = np.ascontiguousarray(sims.T)
    best = sims.argmax(axis=1)
    return best.astype(np.int64), sims[np.arange(len(q)), best].astype(np.float32)


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
