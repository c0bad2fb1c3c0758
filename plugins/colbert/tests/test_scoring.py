"""MaxSim and candidate generation against brute force on random unit vectors."""

from __future__ import annotations

import numpy as np
import pytest
from indexplug_colbert import candidates as cg
from indexplug_colbert.codec import quantize
from indexplug_colbert.maxsim import EMPTY_SCORE, maxsim_blocks, token_matches, top_k


def unit(rng: np.random.Generator, n: int, dim: int = 32) -> np.ndarray:
    m = rng.standard_normal((n, dim)).astype(np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def test_maxsim_blocks_equals_the_definition() -> None:
    rng = np.random.default_rng(1)
    q = unit(rng, 5)
    blocks = [quantize(unit(rng, n)) for n in (3, 0, 1, 7)]
    got = maxsim_blocks(q, blocks)
    scored_q = quantize(q).dequantize()  # the query is quantised like a passage
    assert np.abs(scored_q - q).max() < 0.01
    for b, s in zip(blocks, got, strict=True):
        if len(b) == 0:
            assert s == EMPTY_SCORE
        else:
            want = sum(max(float(qi @ d) for d in b.dequantize()) for qi in scored_q)
            assert s == pytest.approx(want, abs=1e-5)
    assert (maxsim_blocks(q[:0], blocks) == EMPTY_SCORE).all()


def test_token_matches_sum_to_maxsim() -> None:
    rng = np.random.default_rng(2)
    q, d = unit(rng, 4), quantize(unit(rng, 9))
    best, sims = token_matches(q, d)
    assert sims.sum() == pytest.approx(float(maxsim_blocks(q, [d])[0]), abs=1e-5)
    dense, scored_q = d.dequantize(), quantize(q).dequantize()
    assert all(sims[i] == pytest.approx(float(scored_q[i] @ dense[best[i]])) for i in range(4))
    assert all(best[i] == int(np.argmax(dense @ scored_q[i])) for i in range(4))


def test_quantisation_keeps_cosines_within_a_thousandth() -> None:
    rng = np.random.default_rng(4)
    x, q = unit(rng, 200, 384), unit(rng, 20, 384)
    block = quantize(x)
    assert block.codes.dtype == np.int8 and block.scales.dtype == np.float32
    assert np.abs(q @ block.dequantize().T - q @ x.T).max() < 2e-3


def test_top_k_orders_best_first_and_breaks_ties_by_position() -> None:
    s = np.array([0.5, 2.0, 0.5, -np.inf, 2.0, 1.0], dtype=np.float32)
    assert top_k(s, 10).tolist() == [1, 4, 5, 0, 2]
    assert top_k(s, 2).tolist() == [1, 4]
    assert top_k(s[:0], 3).tolist() == []


def test_segment_lists_map_both_ways_without_repeats() -> None:
    codes = np.array([0, 2, 0, 1, 1, 2, 2], dtype=np.int32)
    offsets = np.array([0, 3, 3, 5, 7], dtype=np.int64)  # passage 1 has no tokens
    m = cg.segment_lists(codes, offsets, 4)
    lists = {c: m.list_docs[m.list_offsets[c] : m.list_offsets[c + 1]].tolist() for c in range(4)}
    assert lists == {0: [0], 1: [2], 2: [0, 3], 3: []}
    docs = {d: m.doc_codes[m.doc_offsets[d] : m.doc_offsets[d + 1]].tolist() for d in range(4)}
    assert docs == {0: [0, 2], 1: [], 2: [1], 3: [2]}


def _segment(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 12, size=40)
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    vectors = unit(rng, int(offsets[-1]))
    centroids = cg.train_centroids(vectors, 16, iterations=4, sample_per_centroid=16, seed=0)
    return offsets, vectors, centroids, cg.assign(vectors, centroids)


def test_reach_and_interaction_follow_their_definitions() -> None:
    offsets, _, centroids, codes = _segment(3)
    lists = cg.segment_lists(codes, offsets, len(centroids))
    q = unit(np.random.default_rng(9), 3)
    p = cg.probe(q, centroids, 2)
    sims = q @ centroids.T
    assert set(p.probed.tolist()) == set(np.argsort(-sims, axis=1)[:, :2].ravel().tolist())
    docs, cheap = cg.reach(p, lists, None)
    probed = set(p.probed.tolist())
    want_cheap, want_full = {}, {}
    for d in range(len(offsets) - 1):
        mine = set(codes[offsets[d] : offsets[d + 1]].tolist())
        want_full[d] = sum(max(sims[i, c] for c in mine) for i in range(len(q)))
        if mine & probed:
            want_cheap[d] = sum(max(sims[i, c] for c in mine & probed) for i in range(len(q)))
    assert docs.tolist() == sorted(want_cheap)
    assert cheap.tolist() == pytest.approx([want_cheap[d] for d in docs.tolist()], abs=1e-5)
    every = np.arange(len(offsets) - 1)
    full = cg.interaction(p, lists, every)
    assert full.tolist() == pytest.approx([want_full[d] for d in every.tolist()], abs=1e-5)
    # full interaction is never below the cheap one: it sees every centroid of the passage
    assert (full[docs] >= cheap - 1e-6).all()
    alive = np.ones(len(offsets) - 1, dtype=bool)
    alive[docs[:2]] = False
    docs2, _ = cg.reach(p, lists, alive)
    assert set(docs2.tolist()) == set(docs.tolist()) - set(docs[:2].tolist())


def test_centroid_interaction_approximates_maxsim() -> None:
    offsets, vectors, centroids, codes = _segment(5)
    lists = cg.segment_lists(codes, offsets, len(centroids))
    q = unit(np.random.default_rng(11), 4)
    approx = cg.interaction(cg.probe(q, centroids, 4), lists, np.arange(len(offsets) - 1))
    exact = maxsim_blocks(
        q, [quantize(vectors[offsets[d] : offsets[d + 1]]) for d in range(len(offsets) - 1)]
    )
    assert np.corrcoef(approx, exact)[0, 1] > 0.5


def test_codebook_size_grows_with_the_square_root() -> None:
    assert cg.codebook_size(16_384, 4.0) == 512
    assert cg.codebook_size(1_240_000, 4.0) == 4096
    assert cg.codebook_size(100, 4.0) == 16  # capped at about four tokens per centroid
    k = cg.codebook_size(250_000, 4.0)
    assert k & (k - 1) == 0
