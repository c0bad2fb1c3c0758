"""Candidate generation: which passages deserve an exact MaxSim, without reading their vectors.

Exact MaxSim over every token of every passage costs a product with the whole token matrix per
query (about 480 ms for SciFact's 1.24M MiniLM token vectors).  Like PLAID, the index keeps a
**codebook**: ``K`` centroids from spherical k-means over token vectors, shared by the segments
coded with it, and each segment keeps two small maps: centroid -> passages having a token there
(*lists*) and passage -> the distinct centroids of its tokens (*doc codes*).  A search then

1. scores the query tokens against the centroids (``Q @ C.T``: ``K`` is thousands, not millions)
   and lets each query token **probe** its ``nprobe`` nearest centroids;
2. **reaches** every passage listed under a probed centroid and gives it two cheap estimates:
   per query token, the best similarity to a *probed* centroid the passage has, summed; and the
   **pooled** similarity (the cosine of the query's mean token vector with the passage's, kept
   per passage).  Each is standardised over the reached passages (z-score) and they are added,
   the pooled one weighted by ``pooled_weight``;
3. re-scores the best ``reach_pool`` by **centroid interaction** instead of the first estimate:
   per query token, the best similarity to *any* centroid the passage has a token in, summed
   (PLAID's approximation, each token replaced by its centroid), standardised and added to the
   pooled similarity as before;
4. hands the best ``candidates`` by that sum to the exact MaxSim stage.

Only centroids, the two maps and the pooled vectors are read before the exact stage; token
vectors are read for the final candidates only.  Why two estimates: they err differently.
Centroid interaction misses what the centroids blur (each token moved to its centroid); the
pooled vector misses what averaging blurs (one strongly matching sentence in a long passage).
On SciFact with MiniLM token vectors, the share of exhaustive top-10 passages among the 128
candidates was 95.5% with centroid estimates alone (``pooled_weight=0``) and 99.3% with the sum
(``nprobe=2``, ``reach_pool=384``; ``bench/exhaustive_recall.py`` measures the engine itself).
Adding the pooled similarity already in stage 2, not only in stage 3, matters: with it in stage
3 only, the same settings kept 97.4%.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from indexplug_colbert.kernels import float_dots

F32 = NDArray[np.float32]
I64 = NDArray[np.int64]
ASSIGN_CHUNK = 16_384
"""Token rows per assignment product: bounds memory to chunk x K floats."""


@dataclass(frozen=True)
class SegmentLists:
    """A segment's maps into its codebook."""

    list_offsets: I64
    """``(K + 1,)``: centroid ``c`` lists ``list_docs[list_offsets[c] : list_offsets[c + 1]]``."""
    list_docs: NDArray[np.int32]
    """Segment-local passage numbers, each list sorted, without repeats."""
    doc_offsets: I64
    """``(passages + 1,)``: passage ``d`` has the centroids ``doc_codes[doc_offsets[d]:...]``."""
    doc_codes: NDArray[np.int32]


@dataclass(frozen=True)
class Probe:
    """One query against one codebook."""

    sims_t: F32
    """``(K, query tokens)``: centroid-by-token similarities, rows contiguous for gathers."""
    probed: I64
    """The centroids some query token probed, ascending."""


def codebook_size(tokens: int, per_sqrt: float) -> int:
    """``K``: a power of two near ``per_sqrt * sqrt(tokens)``, at least 16 and at most one
    centroid per four tokens."""
    raw = max(16.0, per_sqrt * float(np.sqrt(max(tokens, 1))))
    k = 2 ** round(np.log2(raw))
    cap = 2 ** int(np.log2(max(tokens // 4, 1)))
    return int(min(k, 65_536, cap))


def _normalise(m: F32) -> F32:
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    np.maximum(norms, 1e-12, out=norms)
    out: F32 = (m / norms).astype(np.float32, copy=False)
    return out


def assign(vectors: Any, centroids: F32) -> NDArray[np.int32]:
    """The nearest centroid (highest cosine) of every row, in chunks (``vectors`` may be a
    memory map or :class:`~indexplug_colbert.codec.DequantizedRows`)."""
    out = np.empty(len(vectors), dtype=np.int32)
    ct = np.ascontiguousarray(centroids.T)
    for s in range(0, len(vectors), ASSIGN_CHUNK):
        block = np.asarray(vectors[s : s + ASSIGN_CHUNK], dtype=np.float32)
        out[s : s + len(block)] = (block @ ct).argmax(axis=1)
    return out


def train_centroids(
    vectors: Any, k: int, *, iterations: int, sample_per_centroid: int, seed: int
) -> F32:
    """Spherical k-means on a sample of the rows (cosine, like the score it approximates).

    A sample of ``sample_per_centroid * k`` rows is enough to place centroids, and it bounds the
    cost of training whatever the segment's size.  Empty clusters are re-seeded from random
    sample rows so every centroid stays useful.
    """
    rng = np.random.default_rng(seed)
    n = len(vectors)
    m = min(n, max(k, k * sample_per_centroid))
    rows = np.sort(rng.choice(n, size=m, replace=False)) if m < n else np.arange(n)
    x = _normalise(np.asarray(vectors[rows], dtype=np.float32))
    centroids = x[rng.choice(m, size=k, replace=False)].copy()
    for _ in range(iterations):
        labels = assign(x, centroids)
        order = np.argsort(labels, kind="stable")
        counts = np.bincount(labels, minlength=k)
        present = np.flatnonzero(counts)
        starts = np.concatenate(([0], np.cumsum(counts[present])[:-1]))
        centroids[present] = _normalise(np.add.reduceat(x[order], starts, axis=0))
        empty = np.flatnonzero(counts == 0)
        if len(empty):
            centroids[empty] = x[rng.choice(m, size=len(empty), replace=False)]
    return centroids


def segment_lists(codes: NDArray[np.int32], doc_offsets: I64, k: int) -> SegmentLists:
    """Both maps of a segment from each token's centroid."""
    return lists_from_pairs(token_pairs(codes, doc_offsets, k), len(doc_offsets) - 1, k)


def token_pairs(codes: NDArray[np.int32], doc_offsets: I64, k: int, first: int = 0) -> I64:
    """The distinct ``passage * k + centroid`` pairs, ascending, of passages numbered ``first``,
    ``first + 1``, ... whose tokens (``doc_offsets``, from 0) have the centroids ``codes``."""
    ndocs = len(doc_offsets) - 1
    docs = np.repeat(np.arange(first, first + ndocs, dtype=np.int64), np.diff(doc_offsets))
    return np.unique(docs * k + codes.astype(np.int64))


def lists_from_pairs(pairs: I64, ndocs: int, k: int) -> SegmentLists:
    """Both maps of a segment from its distinct ``passage * k + centroid`` pairs, ascending."""
    pair_docs = pairs // k
    pair_codes = (pairs % k).astype(np.int32)
    d_off = np.zeros(ndocs + 1, dtype=np.int64)
    np.cumsum(np.bincount(pair_docs, minlength=ndocs), out=d_off[1:])
    by_code = np.argsort(pair_codes, kind="stable")  # keeps passages ascending within a list
    l_off = np.zeros(k + 1, dtype=np.int64)
    np.cumsum(np.bincount(pair_codes, minlength=k), out=l_off[1:])
    return SegmentLists(
        list_offsets=l_off,
        list_docs=pair_docs[by_code].astype(np.int32),
        doc_offsets=d_off,
        doc_codes=pair_codes,
    )


def doc_pairs(lists: SegmentLists, docs: I64, first: int, k: int) -> I64:
    """The ``passage * k + centroid`` pairs of passages ``docs`` of a coded segment, renumbered
    ``first, first + 1, ...`` (a merge into a segment coded with the same codebook: a passage's
    centroids do not change, so its tokens need not be assigned again)."""
    starts = lists.doc_offsets[docs]
    lengths = lists.doc_offsets[docs + 1] - starts
    codes = np.asarray(lists.doc_codes)[_ranges(starts, lengths)].astype(np.int64)
    new = np.repeat(np.arange(first, first + len(docs), dtype=np.int64), lengths)
    return new * k + codes


def probe(query: F32, centroids: F32, nprobe: int) -> Probe:
    """Stage 1: centroid similarities, and each query token's ``nprobe`` nearest centroids."""
    sims = float_dots(query, centroids)  # (query tokens, K)
    k = sims.shape[1]
    nprobe = max(1, min(nprobe, k))
    if nprobe < k:
        probed = np.unique(np.argpartition(-sims, nprobe - 1, axis=1)[:, :nprobe])
    else:
        probed = np.arange(k)
    return Probe(sims_t=np.ascontiguousarray(sims.T), probed=probed.astype(np.int64))


def _ranges(starts: I64, lengths: I64) -> I64:
    """Concatenated ``arange(s, s + n)`` for each pair, without a Python loop."""
    total = int(lengths.sum())
    ends = np.cumsum(lengths)
    return np.repeat(starts - ends + lengths, lengths) + np.arange(total, dtype=np.int64)


def reach(p: Probe, lists: SegmentLists, alive: NDArray[np.bool_] | None) -> tuple[I64, F32]:
    """Stage 2 for one segment: the live passages under probed centroids, and their cheap
    approximation (``(passages ascending, scores)``)."""
    starts = lists.list_offsets[p.probed]
    lengths = lists.list_offsets[p.probed + 1] - starts
    if int(lengths.sum()) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
    docs = lists.list_docs[_ranges(starts, lengths)].astype(np.int64)
    cents = np.repeat(p.probed, lengths)
    if alive is not None:
        keep = alive[docs]
        docs, cents = docs[keep], cents[keep]
        if len(docs) == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
    order = np.argsort(docs, kind="stable")
    docs, cents = docs[order], cents[order]
    firsts = np.flatnonzero(np.concatenate(([True], docs[1:] != docs[:-1])))
    best = np.maximum.reduceat(p.sims_t[cents], firsts, axis=0)  # (passages, query tokens)
    return docs[firsts], best.sum(axis=1, dtype=np.float32)


def pooled_query(query: F32) -> F32:
    """The query's pooled vector: its token vectors' normalised mean."""
    mean = query.mean(axis=0) if len(query) else np.zeros(query.shape[1], dtype=np.float32)
    norm = float(np.linalg.norm(mean))
    return (mean / norm if norm > 0 else mean).astype(np.float32)


def pooled_vectors(codes: NDArray[np.int8], scales: F32, doc_offsets: I64) -> F32:
    """Each passage's pooled vector (normalised mean of its stored token vectors; zeros for a
    passage without tokens), computed once when a segment is written."""
    out = np.zeros((len(doc_offsets) - 1, codes.shape[1]), dtype=np.float32)
    lengths = np.diff(doc_offsets)
    has = np.flatnonzero(lengths)
    chunk = 1024
    for s in range(0, len(has), chunk):
        docs = has[s : s + chunk]
        lo, hi = int(doc_offsets[docs[0]]), int(doc_offsets[docs[-1] + 1])
        block = np.asarray(codes[lo:hi], dtype=np.float32) * np.asarray(scales[lo:hi])[:, None]
        starts = doc_offsets[docs] - lo
        out[docs] = np.add.reduceat(block, starts, axis=0)[: len(docs)]
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    np.maximum(norms, 1e-12, out=norms)
    pooled: F32 = (out / norms).astype(np.float32, copy=False)
    return pooled


def standardised(x: F32) -> F32:
    """``(x - mean) / std`` (zeros if constant), so two estimates on different scales add up."""
    if len(x) == 0:
        return x
    std = float(x.std())
    return ((x - x.mean()) / std if std > 0 else np.zeros_like(x)).astype(np.float32)


def interaction(p: Probe, lists: SegmentLists, docs: I64) -> F32:
    """Stage 3: centroid interaction of ``docs`` over every centroid each passage has."""
    if len(docs) == 0:
        return np.zeros(0, dtype=np.float32)
    starts = lists.doc_offsets[docs]
    lengths = lists.doc_offsets[docs + 1] - starts
    out = np.full(len(docs), -np.inf, dtype=np.float32)
    has = lengths > 0
    if not has.any():
        return out
    codes = lists.doc_codes[_ranges(starts[has], lengths[has])]
    firsts = np.concatenate(([0], np.cumsum(lengths[has])[:-1]))
    best = np.maximum.reduceat(p.sims_t[codes], firsts, axis=0)
    out[has] = best.sum(axis=1, dtype=np.float32)
    return out
