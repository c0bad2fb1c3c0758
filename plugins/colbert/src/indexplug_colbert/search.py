"""A native search over one snapshot, stage by stage: candidates, then exact MaxSim.

Passages are addressed as ``(segment position, local number)`` pairs, an ``(n, 2)`` int64 array,
so every stage is a handful of numpy operations whatever the number of segments.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from indexplug_colbert import candidates as cg
from indexplug_colbert.kernels import float_dots
from indexplug_colbert.maxsim import EMPTY_SCORE, as_query_block, maxsim_blocks, top_k
from indexplug_colbert.store import Snapshot

Pairs = NDArray[np.int64]
SCORE_CHUNK = 128
"""Passages per exact-MaxSim product (bounds memory; the deadline is checked between chunks)."""


def _pairs(s: int, docs: NDArray[np.int64]) -> Pairs:
    return np.stack([np.full(len(docs), s, dtype=np.int64), docs], axis=1)


def _concat(parts: list[Pairs]) -> Pairs:
    return np.concatenate(parts) if parts else np.zeros((0, 2), dtype=np.int64)


def all_live(snap: Snapshot) -> Pairs:
    """Every live passage (exhaustive search)."""
    return _concat([_pairs(s, v.live_docs()) for s, v in enumerate(snap.views)])


def candidates(
    snap: Snapshot,
    query: NDArray[np.float32],
    *,
    nprobe: int,
    reach_pool: int,
    pool: int,
    pooled_weight: float,
) -> Pairs:
    """Stages 1-4 of :mod:`.candidates` over every coded segment, plus every live passage of the
    small (uncoded) segment, which is scored exactly in full."""
    probes = {
        name: cg.probe(query, centroids, nprobe) for name, centroids in snap.centroids.items()
    }
    q_pooled = cg.pooled_query(query)
    sure: list[Pairs] = []
    reached: list[Pairs] = []
    cheap: list[NDArray[np.float32]] = []
    pooled: list[NDArray[np.float32]] = []
    for s, view in enumerate(snap.views):
        seg = view.segment
        if seg.lists is None or seg.codebook is None or seg.pooled is None:
            sure.append(_pairs(s, view.live_docs()))
            continue
        docs, approx = cg.reach(probes[seg.codebook], seg.lists, view.alive)
        reached.append(_pairs(s, docs))
        cheap.append(approx)
        pooled.append(float_dots(seg.pooled[docs], q_pooled))
    if reached:
        pairs, similar = _concat(reached), np.concatenate(pooled)
        keep = top_k(_blend(np.concatenate(cheap), similar, pooled_weight), max(reach_pool, pool))
        pairs, similar = pairs[keep], similar[keep]
        inter = np.empty(len(pairs), dtype=np.float32)
        for s in np.unique(pairs[:, 0]):
            rows = np.flatnonzero(pairs[:, 0] == s)
            seg = snap.views[int(s)].segment
            assert seg.lists is not None and seg.codebook is not None
            inter[rows] = cg.interaction(probes[seg.codebook], seg.lists, pairs[rows, 1])
        sure.append(pairs[top_k(_blend(inter, similar, pooled_weight), pool)])
    return _concat(sure)


def _blend(a: NDArray[np.float32], b: NDArray[np.float32], weight: float) -> NDArray[np.float32]:
    """Two estimates on different scales, standardised and added (``b`` weighted)."""
    if weight == 0:
        return a
    return cg.standardised(a) + np.float32(weight) * cg.standardised(b)


def exact(
    snap: Snapshot,
    query: NDArray[np.float32],
    pairs: Pairs,
    check: Callable[[str], None],
) -> NDArray[np.float32]:
    """Exact MaxSim of every pair, read from the memory maps in storage order (neighbouring
    passages share pages), in chunks with a deadline check between them."""
    scores = np.full(len(pairs), EMPTY_SCORE, dtype=np.float32)
    quantised = as_query_block(query)  # once, not per chunk
    order = np.lexsort((pairs[:, 1], pairs[:, 0]))
    for c in range(0, len(order), SCORE_CHUNK):
        if c:
            check("exact MaxSim")
        idx = order[c : c + SCORE_CHUNK]
        blocks = [snap.views[int(s)].segment.block(int(d)) for s, d in pairs[idx]]
        scores[idx] = maxsim_blocks(quantised, blocks)
    return scores
