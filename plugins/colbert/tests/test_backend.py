"""The colbert backend through the guard: every outcome, persistence, budgets, deadlines,
embedder and engine rules, and the extra ops (rerank, explain, rebuild, drop)."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import corpus, random_corpus
from indexplug import (
    Guard,
    Indexed,
    IndexEmpty,
    IndexFailed,
    IndexStatus,
    IndexTimeout,
    IndexUnavailable,
    NoMatch,
    OverBudget,
    Passage,
    Removed,
    Searched,
)
from indexplug.deadlines import Deadline
from indexplug.errors import InvalidRequest
from indexplug.outcomes import BadRequest, outcome_from_json
from indexplug_colbert import engines
from indexplug_colbert.codec import quantize
from indexplug_colbert.engines import EngineEntry
from indexplug_colbert.models import Explanation

Make = Callable[..., Guard]


def folder_digest(path: Path) -> dict[str, str]:
    """Every file under ``path`` and the hash of its bytes (to prove nothing changed)."""
    out = {}
    for root, _dirs, files in os.walk(path):
        for f in files:
            p = Path(root) / f
            out[str(p.relative_to(path))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


# -- outcomes ---------------------------------------------------------------------------


def test_every_search_outcome(guard: Guard) -> None:
    assert isinstance(guard.search("docs", "alpha"), IndexEmpty)
    ps = corpus(30)
    out = guard.add("docs", ps)
    assert isinstance(out, Indexed) and out.added == 30 and out.added_ids == [p.id for p in ps]
    found = guard.search("docs", "item7", top_k=5)
    assert isinstance(found, Searched)
    assert found.hits[0].passage.id == ps[7].id and found.searched == 30
    assert found.scale.name == "maxsim" and not found.scale.comparable_across_searches
    assert found.degraded == []
    # a query without a single token (the hashing embedder keeps words only) matches nothing;
    # the guard refuses one with no letter or digit before a backend sees it, so ask the
    # backend itself
    nm = guard.backend.search("docs", "?! ...", top_k=10, deadline=Deadline.after(30.0))
    assert isinstance(nm, NoMatch) and nm.searched == 30
    gone = guard.remove("docs", [p.id for p in ps])
    assert isinstance(gone, Removed) and gone.removed == 30
    assert isinstance(guard.search("docs", "alpha"), IndexEmpty)
    for o in (out, found, nm, gone):
        assert outcome_from_json(o.model_dump_json()) == o


def test_scores_are_exact_maxsim(guard: Guard) -> None:
    from indexplug import get_embedder
    from indexplug.protocols import Granularity

    ps = corpus(12)
    guard.add("docs", ps)
    out = guard.search("docs", "alpha beta item3", top_k=12)
    assert isinstance(out, Searched) and len(out.hits) == 12
    emb = get_embedder("hashing:default")
    q = emb.embed_query("alpha beta item3", Granularity.TOKEN)
    scored_q = quantize(q).dequantize()  # the query is quantised like the passages
    for hit in out.hits:
        d = emb.embed_documents([hit.passage.text], Granularity.TOKEN)[0]
        stored = quantize(d).dequantize()  # what the index keeps
        want = float((scored_q @ stored.T).max(axis=1).sum())
        assert hit.score == pytest.approx(want, abs=1e-5)
        # against unquantised vectors: each cosine moves by under 0.01 (the hashing embedder's
        # components 1/3 and 2/3 share a token's int8 scale, the worst case for rounding)
        assert hit.score == pytest.approx(float((q @ d.T).max(axis=1).sum()), abs=0.01 * len(q))


def test_zero_token_passages_are_stored_but_never_hits(guard: Guard) -> None:
    odd = Passage.create("🦜🔥 ...", "mem://odd")
    out = guard.add("docs", [odd, *corpus(3)])
    assert isinstance(out, Indexed) and out.added == 4
    assert guard.status("docs").passages == 4  # type: ignore[union-attr]
    hits = guard.search("docs", "alpha", top_k=10)
    assert isinstance(hits, Searched) and odd.id not in {h.passage.id for h in hits.hits}
    assert isinstance(guard.remove("docs", [odd.id]), Removed)


# -- persistence and incremental writes -------------------------------------------------


def test_everything_survives_reopening(make: Make, tmp_path: Path) -> None:
    g = make()
    ps = corpus(40)
    g.add("docs", ps, max_bytes=50_000_000)
    g.remove("docs", [ps[1].id])
    before = g.search("docs", "gamma item5", top_k=10)
    status = g.status("docs")
    g.close()
    g2 = make()
    after = g2.search("docs", "gamma item5", top_k=10)
    assert isinstance(after, Searched) and isinstance(before, Searched)
    assert [(h.passage.id, h.score) for h in after.hits] == [
        (h.passage.id, h.score) for h in before.hits
    ]
    st = g2.status("docs")
    assert isinstance(st, IndexStatus) and isinstance(status, IndexStatus)
    assert (st.passages, st.max_bytes, st.embedder) == (39, 50_000_000, "hashing:default")
    again = g2.add("docs", ps)
    assert isinstance(again, Indexed) and again.added_ids == [ps[1].id] and again.known == 39


def test_adds_and_removes_do_not_rewrite_what_is_stored(make: Make, tmp_path: Path) -> None:
    g = make(codebook_min_tokens=200)  # batches of 20 passages (260 tokens) are "large"
    g.add("docs", corpus(20, "a"))
    store = tmp_path / "home" / "docs" / "native"
    first = {p.name for p in store.glob("seg-*")}
    vectors = {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in store.glob("seg-*/vectors.npy")}
    g.add("docs", corpus(20, "b"))
    g.remove("docs", [corpus(20, "a")[3].id])
    segs = {p.name for p in store.glob("seg-*")}
    assert first < segs and len(segs) == 2  # one new segment; the first one kept
    for p, stamp in vectors.items():
        assert (p.stat().st_ino, p.stat().st_mtime_ns) == stamp
    assert len(list(store.glob("seg-*/tombstones-*.npy"))) == 1
    st = g.status("docs")
    assert st.details["tombstoned"] == 1 and st.passages == 39  # type: ignore[union-attr]


def test_vectors_are_int8_and_memory_mapped(make: Make, tmp_path: Path) -> None:
    g = make()
    g.add("docs", corpus(5))
    g.search("docs", "alpha")
    index = next(iter(g.backend._open.values()))  # type: ignore[attr-defined]
    seg = index.store.snapshot().views[0].segment
    assert isinstance(seg.vectors, np.memmap) and seg.vectors.dtype == np.int8
    assert isinstance(seg.scales, np.memmap) and seg.scales.dtype == np.float32


def test_small_batches_share_one_small_segment_until_it_is_coded(make: Make) -> None:
    g = make(codebook_min_tokens=200)
    sizes = []
    for b in range(4):  # 13 tokens per passage, 6 passages per batch: 78 tokens per batch
        g.add("docs", corpus(6, f"b{b}"))
        st = g.status("docs")
        assert isinstance(st, IndexStatus)
        sizes.append((st.details["segments"], st.details["coded_segments"]))
    assert sizes == [(1, 0), (1, 0), (1, 1), (2, 1)]
    assert g.status("docs").passages == 24  # type: ignore[union-attr]
    out = g.search("docs", "item3 alpha", top_k=3)
    assert isinstance(out, Searched)


SEGMENTS_AFTER = [1, 1, 2, 2, 2, 2, 3, 3, 3, 2, 3, 3, 3, 3, 4, 4]
"""Segments after each of 16 batches of 104 tokens with ``merge_factor=2`` and 64 tokens the
smallest coded segment (tiers of 64-127, 128-255, 256-511, ... tokens): a batch with a peer in
its tier is written together with it (add 2: one segment of 208), and an add also merges two
stored segments of the lowest tier holding two (add 5: 208 + 208 into 416; add 10: 416 + 416
into 832), one cascade step per add."""


def test_segments_merge_by_size_tier(make: Make) -> None:
    """``merge_factor=2``: segments of one tier pair up into the next, like a binary counter,
    so the count stays logarithmic in the batches and no add rewrites the whole index."""
    g = make(codebook_min_tokens=64, merge_factor=2)  # every batch of 8 (104 tokens) is "large"
    counts = []
    for b in range(16):
        g.add("docs", corpus(8, f"b{b}"))
        st = g.status("docs")
        assert isinstance(st, IndexStatus) and st.passages == 8 * (b + 1)
        counts.append(st.details["segments"])
    assert counts == [SEGMENTS_AFTER[b] for b in range(16)], counts
    assert max(counts) <= 5  # log2(16) + 1
    out = g.search("docs", "item3 alpha", top_k=3)
    assert isinstance(out, Searched) and out.hits[0].passage.source.uri.endswith("/3")


def test_a_merge_keeps_the_codes_of_segments_on_the_same_codebook(
    make: Make, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Merged passages coded with the codebook the merged segment gets are not assigned again,
    and every coded segment's maps are still a nearest-centroid coding of its tokens: each
    passage's centroids are nearest (to float rounding: the product's rounding depends on how
    many rows it is computed with, so a token equally near two centroids may go to either) to
    some token of it and every token has its nearest among them; pooled vectors as computed
    afresh."""
    import json
    import shutil

    from indexplug_colbert import segments
    from indexplug_colbert.store import CENTROIDS

    assigned: list[int] = []
    real_assign = segments.assign

    def counting(vectors: object, centroids: np.ndarray) -> np.ndarray:
        assigned.append(len(vectors))  # type: ignore[arg-type]
        return real_assign(vectors, centroids)

    monkeypatch.setattr(segments, "assign", counting)
    coded: list[int] = []
    real_code = segments.code_segment

    def code(path: Path, centroids: np.ndarray, reused: object = ()) -> None:
        coded.append(len(np.load(path / "scales.npy", mmap_mode="r")))
        real_code(path, centroids, reused)  # type: ignore[arg-type]

    monkeypatch.setattr("indexplug_colbert.transaction.code_segment", code)
    g = make(codebook_min_tokens=64, merge_factor=2)
    batches = [corpus(8, f"b{b}") for b in range(12)]
    for b in batches[:6]:
        g.add("docs", b)
    g.remove("docs", [batches[0][1].id, batches[2][5].id, batches[4][0].id])  # gaps to skip
    for b in batches[6:]:
        g.add("docs", b)
    assert sum(assigned) < sum(coded)  # some merged passages kept their codes
    store = tmp_path / "home" / "docs" / "native"
    manifest = json.loads((store / "manifest.json").read_text())
    checked = 0
    for seg in manifest["segments"]:
        if seg["codebook"] is None:
            continue
        path = store / seg["name"]
        centroids = np.load(store / seg["codebook"] / CENTROIDS).astype(np.float64)
        sims = segments.rows(path)[:].astype(np.float64) @ centroids.T
        best = sims.max(axis=1)
        offsets = np.load(path / "offsets.npy")
        codes, code_offsets = (
            np.load(path / "doc_codes.npy"),
            np.load(path / "doc_code_offsets.npy"),
        )
        lists, list_docs = np.load(path / "lists.npy"), np.load(path / "list_docs.npy")
        for d in range(len(offsets) - 1):
            near = (
                sims[offsets[d] : offsets[d + 1]] >= best[offsets[d] : offsets[d + 1], None] - 1e-5
            )
            mine = codes[code_offsets[d] : code_offsets[d + 1]]
            assert near[:, mine].any(axis=1).all() and near[:, mine].any(axis=0).all(), d
            assert all(d in list_docs[lists[c] : lists[c + 1]] for c in mine)
        assert len(list_docs) == len(codes)
        fresh = tmp_path / f"fresh-{seg['name']}"
        shutil.copytree(path, fresh)
        real_code(fresh, np.load(store / seg["codebook"] / CENTROIDS))
        assert np.array_equal(np.load(path / "pooled.npy"), np.load(fresh / "pooled.npy"))
        checked += 1
    assert checked >= 2
    out = g.search("docs", "item3 alpha", top_k=3)
    assert isinstance(out, Searched) and out.hits[0].passage.source.uri.endswith("/3")


def test_rebuild_compacts_and_keeps_results(make: Make, tmp_path: Path) -> None:
    g = make(exhaustive=True, codebook_min_tokens=200)
    ps = corpus(60)
    for b in range(3):
        g.add("docs", ps[b * 20 : (b + 1) * 20])
    g.remove("docs", [p.id for p in ps[::3]])
    before = g.search("docs", "delta item10", top_k=20)
    size_before = g.status("docs").bytes_used  # type: ignore[union-attr]
    out = g.call_extra("rebuild", "docs")
    assert isinstance(out, IndexStatus)
    assert out.details["segments"] == 1 and out.details["tombstoned"] == 0 and out.passages == 40
    assert out.bytes_used is not None and size_before is not None and out.bytes_used < size_before
    after = g.search("docs", "delta item10", top_k=20)
    assert isinstance(after, Searched) and isinstance(before, Searched)
    assert [(h.passage.id, round(h.score, 5)) for h in after.hits] == [
        (h.passage.id, round(h.score, 5)) for h in before.hits
    ]
    assert len(list((tmp_path / "home" / "docs" / "native").glob("seg-*"))) == 1
    missing = g.call_extra("rebuild", "never")
    assert isinstance(missing, IndexStatus) and not missing.exists


def test_a_crashed_writers_leftovers_are_ignored_then_swept(make: Make, tmp_path: Path) -> None:
    g = make()
    g.add("docs", corpus(5))
    store = tmp_path / "home" / "docs" / "native"
    junk = store / "seg-99999999-deadbeef"
    junk.mkdir()
    (junk / "vectors.npy").write_bytes(b"half written")
    (store / ".manifest.json.0000.tmp").write_bytes(b"{")
    assert isinstance(g.search("docs", "alpha"), Searched)
    g.add("docs", corpus(2, "more"))
    assert not junk.exists() and not (store / ".manifest.json.0000.tmp").exists()


def test_a_damaged_manifest_is_reported_not_served(make: Make, tmp_path: Path) -> None:
    g = make()
    g.add("docs", corpus(5))
    (tmp_path / "home" / "docs" / "native" / "manifest.json").write_text("{not json")
    g.close()
    out = make().search("docs", "alpha")
    assert isinstance(out, IndexFailed) and "manifest is damaged" in out.reason


# -- extra ops --------------------------------------------------------------------------


def test_rerank_scores_callers_passages_without_indexing(guard: Guard) -> None:
    ps = corpus(10)
    guard.add("docs", ps)
    searched = guard.search("docs", "beta item4", top_k=10)
    assert isinstance(searched, Searched)
    others = corpus(3, "never-indexed")
    out = guard.call_extra("rerank", "docs", query="beta item4", passages=ps + others)
    assert isinstance(out, Searched) and out.searched == 13 and len(out.hits) == 13
    assert [h.rank for h in out.hits] == list(range(1, 14))
    assert out.hits[0].passage.id == ps[4].id
    scores = [h.score for h in out.hits]
    assert scores == sorted(scores, reverse=True)
    stored = {h.passage.id: h.score for h in searched.hits}
    for h in out.hits:
        if h.passage.id in stored:  # the same MaxSim as search (float16 rounding aside)
            assert h.score == pytest.approx(stored[h.passage.id], abs=2e-3)
    assert guard.status("docs").passages == 10  # type: ignore[union-attr]
    # an index that does not exist still reranks (with the configured embedder)
    assert isinstance(guard.call_extra("rerank", "nowhere", query="beta", passages=ps), Searched)
    empty = guard.call_extra("rerank", "docs", query="beta", passages=[])
    assert isinstance(empty, NoMatch) and empty.searched == 0
    # the guard refuses what is not a passage before the plugin sees it; the plugin, asked
    # directly, answers BadRequest itself
    with pytest.raises(InvalidRequest, match="Passage"):
        guard.call_extra("rerank", "docs", query="beta", passages=["not a passage"])
    bad = guard.backend.op_rerank(  # type: ignore[attr-defined]
        "docs", deadline=Deadline.after(30.0), query="beta", passages=["not a passage"]
    )
    assert isinstance(bad, BadRequest) and bad.field == "passages"


def test_explain_accounts_for_the_whole_score(guard: Guard) -> None:
    ps = corpus(10)
    guard.add("docs", ps)
    out = guard.search("docs", "alpha item2 unrelatedword", top_k=3)
    assert isinstance(out, Searched)
    top = out.hits[0]
    query = "alpha item2 unrelatedword"
    ex = guard.call_extra("explain", "docs", query=query, passage_id=top.passage.id)
    assert isinstance(ex, Explanation)
    assert ex.passage.id == top.passage.id and len(ex.matches) == 3
    assert ex.score == pytest.approx(top.score, abs=1e-4)
    assert sum(m.similarity for m in ex.matches) == pytest.approx(ex.score, abs=1e-4)
    words = top.passage.text.split()
    assert words[ex.matches[1].passage_token] == "item2"  # hashing tokens are the words
    assert ex.matches[1].similarity == pytest.approx(1.0, abs=1e-2)  # int8 codes
    assert sum(m.share for m in ex.matches) == pytest.approx(1.0, abs=1e-4)
    assert Explanation.model_validate_json(ex.model_dump_json()) == ex
    unknown = guard.call_extra("explain", "docs", query="alpha", passage_id="0" * 64)
    assert isinstance(unknown, BadRequest) and unknown.field == "passage_id"
    nowhere = guard.call_extra("explain", "nowhere", query="a", passage_id="0" * 64)
    assert isinstance(nowhere, IndexEmpty)


def test_drop_deletes_the_index(guard: Guard, tmp_path: Path) -> None:
    guard.add("docs", corpus(5))
    out = guard.call_extra("drop", "docs")
    assert isinstance(out, IndexStatus) and not out.exists
    assert not (tmp_path / "home" / "docs").exists()
    assert isinstance(guard.search("docs", "alpha"), IndexEmpty)
    assert isinstance(guard.add("docs", corpus(2)), Indexed)
    assert guard.status("docs").passages == 2  # type: ignore[union-attr]


def test_tamper_is_refused_by_the_guard(guard: Guard) -> None:
    ps = corpus(5)
    guard.add("docs", ps)
    guard.backend.tamper("docs", ps[2].id, "altered text item2")  # type: ignore[attr-defined]
    out = guard.search("docs", "item2", top_k=1)
    assert isinstance(out, IndexFailed) and "no longer matches" in out.reason


def test_records_keep_their_digest_and_an_altered_one_is_refused(guard: Guard) -> None:
    """A record holds the passage's digest (``model_dump_json``), which comes back with every
    hit and ``explain``; metadata, licence or provenance altered on disk (id and digest
    kept) is refused by search and by explain."""
    ps = corpus(5)
    guard.add("docs", ps)
    found = guard.search("docs", "item2", top_k=5)
    assert isinstance(found, Searched)
    assert all(h.passage.digest == h.passage.expected_digest() for h in found.hits)
    for n, change in enumerate(
        ({"metadata": {"trusted": True}}, {"licence": "forged"}, {"provenance": "forged"})
    ):
        guard.add(f"alter{n}", ps)
        guard.backend.tamper_record(f"alter{n}", ps[2].id, change)  # type: ignore[attr-defined]
        out = guard.search(f"alter{n}", "item2", top_k=5)
        assert isinstance(out, IndexFailed) and "digest" in out.reason, out
        ex = guard.call_extra("explain", f"alter{n}", query="item2", passage_id=ps[2].id)
        assert isinstance(ex, IndexFailed) and "digest" in ex.reason, ex


def test_records_deleted_behind_the_vectors_fail_searches(guard: Guard) -> None:
    """The vectors still name a passage whose record is gone: INDEX_FAILED, never a shorter
    answer, NO_MATCH or INDEX_EMPTY, and explain fails too."""
    assert guard.backend.capabilities.separate_records  # type: ignore[attr-defined]
    ps = corpus(6)
    guard.add("docs", ps)
    guard.backend.delete_rows("docs", [ps[3].id])  # type: ignore[attr-defined]
    out = guard.search("docs", "item3", top_k=6)
    assert isinstance(out, IndexFailed) and out.error_type == "Inconsistent", out
    assert ps[3].id[:12] in out.reason and "rebuild" in out.reason
    ex = guard.call_extra("explain", "docs", query="item3", passage_id=ps[3].id)
    assert isinstance(ex, IndexFailed) and ex.error_type == "Inconsistent", ex
    guard.backend.delete_rows("docs", [p.id for p in ps])  # type: ignore[attr-defined]
    out = guard.search("docs", "alpha", top_k=6)
    assert isinstance(out, IndexFailed) and out.error_type == "Inconsistent", out


# -- budget -----------------------------------------------------------------------------


def test_first_write_sets_the_budget_and_later_calls_only_lower_it(
    make: Make, tmp_path: Path
) -> None:
    g = make()
    first = g.add("docs", corpus(5), max_bytes=200_000)
    assert isinstance(first, Indexed) and first.max_bytes == 200_000
    assert first.bytes_used is not None and 0 < first.bytes_used < 200_000
    home = tmp_path / "home" / "docs"
    before = folder_digest(home)
    big = [Passage.create("word " * 5000, f"mem://big/{i}") for i in range(5)]
    out = g.add("docs", big, max_bytes=10**9)  # asking for more does not raise it
    assert isinstance(out, OverBudget) and out.max_bytes == 200_000 and out.check == "projected"
    assert out.needed_bytes > 200_000
    assert folder_digest(home) == before
    lower = g.add("docs", corpus(3, "x"), max_bytes=1000)
    assert isinstance(lower, OverBudget) and lower.max_bytes == 1000
    assert folder_digest(home) == before
    g.close()
    assert make().status("docs").max_bytes == 200_000  # type: ignore[union-attr]


def test_measured_check_refuses_when_the_projection_passes(
    make: Make, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import indexplug_colbert.engines.native as native

    monkeypatch.setattr(native, "projected_bytes", lambda *a, **k: 0)
    g = make()
    g.add("docs", corpus(2), max_bytes=60_000)
    home = tmp_path / "home" / "docs"
    before = folder_digest(home)
    out = g.add("docs", [Passage.create("word " * 8000, "mem://big")])
    assert isinstance(out, OverBudget) and out.check == "measured" and out.needed_bytes > 60_000
    assert folder_digest(home) == before
    assert g.status("docs").passages == 2  # type: ignore[union-attr]


def test_a_refused_first_write_creates_nothing(guard: Guard, tmp_path: Path) -> None:
    out = guard.add("docs", corpus(5), max_bytes=100)
    assert isinstance(out, OverBudget)
    st = guard.status("docs")
    assert isinstance(st, IndexStatus) and not st.exists and st.max_bytes is None
    assert isinstance(guard.add("docs", corpus(5)), Indexed)


# -- deadlines --------------------------------------------------------------------------


def test_every_op_honours_an_impossible_deadline(guard: Guard) -> None:
    ps = corpus(5)
    guard.add("docs", ps)
    tiny = 1e-6
    outs = [
        guard.search("docs", "alpha", deadline_s=tiny),
        guard.add("docs", corpus(2, "late"), deadline_s=tiny),
        guard.remove("docs", [ps[0].id], deadline_s=tiny),
        guard.status("docs", deadline_s=tiny),
        guard.call_extra("rerank", "docs", deadline_s=tiny, query="alpha", passages=ps),
        guard.call_extra("explain", "docs", deadline_s=tiny, query="alpha", passage_id=ps[0].id),
        guard.call_extra("rebuild", "docs", deadline_s=tiny),
    ]
    for out in outs:
        assert isinstance(out, IndexTimeout), out
        assert out.deadline_s == tiny
    assert guard.status("docs").passages == 5  # type: ignore[union-attr]


class SlowEmbedder:
    """The hashing embedder, slowed down: a write's deadline passes while it embeds."""

    def __init__(self, delay: float) -> None:
        from indexplug import get_embedder

        self.inner = get_embedder("hashing:default")
        self.name, self.dim, self.granularities = "hashing:default", 256, self.inner.granularities
        self.delay = delay

    def readiness(self):  # type: ignore[no-untyped-def]
        return self.inner.readiness()

    def embed_documents(self, texts, granularity):  # type: ignore[no-untyped-def]
        time.sleep(self.delay)
        return self.inner.embed_documents(texts, granularity)

    def embed_query(self, text, granularity):  # type: ignore[no-untyped-def]
        return self.inner.embed_query(text, granularity)


def test_a_write_past_its_deadline_commits_nothing(tmp_path: Path) -> None:
    from indexplug.deadlines import Deadline
    from indexplug_colbert import ColbertBackend

    slow = SlowEmbedder(0.15)
    g = Guard(ColbertBackend(tmp_path / "home", {}, lambda spec: slow))
    assert isinstance(g.add("docs", corpus(3)), Indexed)
    before = folder_digest(tmp_path / "home" / "docs")
    # called on the backend itself: the guard would stop waiting first and answer for it
    many = corpus(200, "many")
    out = g.backend.add("docs", many, max_bytes=None, deadline=Deadline.after(0.3))
    assert isinstance(out, IndexTimeout) and "embedding" in out.reason
    assert folder_digest(tmp_path / "home" / "docs") == before
    g.close()


def test_a_held_write_lock_times_out_and_readers_still_answer(make: Make, tmp_path: Path) -> None:
    from indexplug.deadlines import Deadline
    from indexplug_colbert.locking import write_lock

    g = make()
    g.add("docs", corpus(5))
    with write_lock(tmp_path / "home" / ".locks" / "docs.lock", Deadline.after(5)):
        # on the backend itself: through the guard, the answer comes after the deadline and
        # the guard reports that instead of the backend's reason
        out = g.backend.add("docs", corpus(2, "late"), max_bytes=None, deadline=Deadline.after(0.3))
        assert isinstance(out, IndexTimeout) and "write lock" in out.reason
        assert isinstance(g.add("docs", corpus(2, "late"), deadline_s=0.3), IndexTimeout)
        assert isinstance(g.search("docs", "alpha"), Searched)
    assert isinstance(g.add("docs", corpus(2, "late")), Indexed)


# -- embedders and engines --------------------------------------------------------------


def test_an_index_is_only_searched_with_its_embedder(make: Make) -> None:
    make(embedder="hashing:128").add("docs", corpus(5))
    other = make(embedder="hashing:default")
    for out in (
        other.search("docs", "alpha"),
        other.add("docs", corpus(2, "x")),
        other.call_extra("explain", "docs", query="alpha", passage_id=corpus(5)[0].id),
    ):
        assert isinstance(out, IndexFailed), out
        assert "hashing:128" in out.reason and "hashing:default" in out.reason
    st = other.status("docs")
    assert isinstance(st, IndexFailed)
    # with no embedder configured, the recorded one is used
    plain = make()
    assert isinstance(plain.search("docs", "alpha"), Searched)
    assert plain.status("docs").embedder == "hashing:128"  # type: ignore[union-attr]


def test_an_unknown_embedder_makes_the_backend_not_ready(make: Make) -> None:
    g = make(embedder="nosuchprovider:model")
    r = g.readiness()
    assert not r.ready and "nosuchprovider" in (r.reason or "")
    assert isinstance(g.search("docs", "alpha"), IndexUnavailable)


def test_an_engine_that_is_not_installed_answers_unavailable(make: Make) -> None:
    make().add("docs", corpus(5))
    g = make(engine="ragatouille")
    r = g.readiness()
    assert not r.ready and "ragatouille" in (r.reason or "") and "install" in (r.reason or "")
    ps = corpus(2, "new")
    outs = [
        g.search("docs", "alpha"),
        g.add("docs", ps),
        g.remove("docs", [ps[0].id]),
        g.status("docs"),
        g.call_extra("rerank", "docs", query="alpha", passages=ps),
        g.call_extra("explain", "docs", query="alpha", passage_id=ps[0].id),
        g.call_extra("rebuild", "docs"),
        g.call_extra("drop", "docs"),
    ]
    for out in outs:
        assert isinstance(out, IndexUnavailable), out
        assert "ragatouille engine is not installed" in out.reason
    assert make().status("docs").passages == 5  # type: ignore[union-attr]


def test_fallback_answers_say_they_are_degraded(make: Make) -> None:
    g = make(engine="ragatouille", fallback="native")
    assert g.readiness().ready
    assert isinstance(g.add("docs", corpus(5)), Indexed)
    found = g.search("docs", "alpha item1")
    assert isinstance(found, Searched) and len(found.degraded) == 1
    why = found.degraded[0]
    assert why.part == "engine:ragatouille" and "fallback" in why.reason
    assert "not installed" in why.reason
    nm = g.backend.search("docs", "?!", top_k=10, deadline=Deadline.after(30.0))
    assert isinstance(nm, NoMatch) and nm.degraded == found.degraded
    rr = g.call_extra("rerank", "docs", query="alpha", passages=corpus(2))
    assert isinstance(rr, Searched) and rr.degraded == found.degraded
    ex = g.call_extra("explain", "docs", query="alpha", passage_id=corpus(5)[0].id)
    assert isinstance(ex, Explanation) and ex.degraded == found.degraded
    st = g.status("docs")
    assert isinstance(st, IndexStatus) and st.details["degraded"]
    assert st.details["built_by_fallback_for"] == "ragatouille"


def test_an_index_is_never_answered_by_another_engine(
    make: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    make().add("native-built", corpus(5))
    monkeypatch.setitem(
        engines.ENGINES, "ragatouille", EngineEntry("fake_engine", "FakeRagatouilleEngine", "-")
    )
    rag = make(engine="ragatouille")
    assert rag.readiness().ready
    out = rag.search("native-built", "alpha")
    assert isinstance(out, IndexFailed) and "built by the native engine" in out.reason
    assert isinstance(rag.add("rag-built", corpus(5)), Indexed)
    native = make()
    out = native.search("rag-built", "alpha")
    assert isinstance(out, IndexFailed) and "built by the ragatouille engine" in out.reason
    # An index built by the fallback is not served by the real engine once it is installed.
    monkeypatch.setitem(
        engines.ENGINES, "ragatouille", EngineEntry("no_such_module", "X", "the extra")
    )
    make(engine="ragatouille", fallback="native").add("fb-built", corpus(3))
    monkeypatch.setitem(
        engines.ENGINES, "ragatouille", EngineEntry("fake_engine", "FakeRagatouilleEngine", "-")
    )
    out = make(engine="ragatouille").search("fb-built", "alpha")
    assert isinstance(out, IndexFailed) and "built by the native engine" in out.reason


def test_the_fallback_cannot_serve_an_index_another_engine_built(
    make: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(
        engines.ENGINES, "ragatouille", EngineEntry("fake_engine", "FakeRagatouilleEngine", "-")
    )
    make(engine="ragatouille").add("rag-built", corpus(5))
    monkeypatch.setitem(
        engines.ENGINES, "ragatouille", EngineEntry("no_such_module", "X", "the extra")
    )
    out = make(engine="ragatouille", fallback="native").search("rag-built", "alpha")
    assert isinstance(out, IndexUnavailable) and "fallback cannot serve" in out.reason


def test_settings_are_checked(tmp_path: Path) -> None:
    from indexplug_colbert import ColbertBackend

    with pytest.raises(ValueError, match="unknown colbert engine"):
        ColbertBackend(tmp_path, {"engine": "pylate"})
    with pytest.raises(ValueError, match="fallback"):
        ColbertBackend(tmp_path, {"fallback": "bm25"})
    with pytest.raises(ValueError, match="unknown native engine setting"):
        ColbertBackend(tmp_path, {"nprobes": 4})
    with pytest.raises(ValueError, match=r"max_segments is gone: .* set merge_factor"):
        ColbertBackend(tmp_path, {"max_segments": 4})
    with pytest.raises(ValueError, match="candidates"):
        ColbertBackend(tmp_path, {"candidates": 0})


# -- candidate generation ---------------------------------------------------------------


def test_codebooks_are_shared_and_retrained_when_outgrown(make: Make, tmp_path: Path) -> None:
    g = make(codebook_min_tokens=64)
    g.add("docs", corpus(10, "a"))  # 130 tokens: trains the first codebook
    g.add("docs", corpus(10, "b"))  # coded with it, no training
    st = g.status("docs")
    assert st.details["codebooks"] == [{"k": 32, "trained_on": 130}]  # type: ignore[union-attr]
    g.add("docs", corpus(60, "c"))  # 780 tokens >= 4 x 130: a new, larger codebook
    st = g.status("docs")
    assert [c["trained_on"] for c in st.details["codebooks"]] == [130, 780]  # type: ignore[union-attr]
    assert st.details["coded_segments"] == 3  # type: ignore[union-attr]
    store = tmp_path / "home" / "docs" / "native"
    assert len(list(store.glob("cb-*"))) == 2
    rebuilt = g.call_extra("rebuild", "docs")
    assert isinstance(rebuilt, IndexStatus)
    assert [c["trained_on"] for c in rebuilt.details["codebooks"]] == [1040]
    assert len(list(store.glob("cb-*"))) == 1


def test_candidate_generation_agrees_with_exhaustive_maxsim(make: Make) -> None:
    ps = random_corpus(400)
    approx = make(codebook_min_tokens=500, candidates=40, reach_pool=120)
    for b in range(0, 400, 100):
        approx.add("docs", ps[b : b + 100])
    st = approx.status("docs")
    assert isinstance(st, IndexStatus) and st.details["coded_segments"] == 4
    exact = make(exhaustive=True)
    overlap = total = 0
    for i in range(0, 400, 20):
        query = " ".join(ps[i].text.split()[5:12])
        got, ref = approx.search("docs", query, top_k=10), exact.search("docs", query, top_k=10)
        assert isinstance(got, Searched) and isinstance(ref, Searched)
        want = {h.passage.id: h.score for h in ref.hits}
        for h in got.hits:  # a passage found both ways has the same, exact score
            if h.passage.id in want:
                assert h.score == pytest.approx(want[h.passage.id], abs=1e-5)
        overlap += len(set(want) & {h.passage.id for h in got.hits})
        total += len(want)
        assert got.hits[0].score == pytest.approx(ref.hits[0].score, abs=1e-5)
    # random words hashed to nearly orthogonal vectors are a hard case for centroids; the
    # quality on real text is measured by bench/exhaustive_recall.py
    assert overlap / total >= 0.75


KILLED_WRITER = """
import sys, time
from pathlib import Path
from indexplug import Guard, Passage, get_registry
from indexplug_colbert import ColbertBackend
import indexplug_colbert.store as store

def stuck(self, manifest):
    sys.stdout.write("staged\\n"); sys.stdout.flush()
    time.sleep(60)

store.Store.commit = stuck
g = Guard(ColbertBackend(Path(sys.argv[1]), {}, get_registry().embedder))
g.add("crash", [Passage.create(f"killed write {i}", f"mem://k/{i}") for i in range(50)],
      deadline_s=120)
"""


def test_a_writer_killed_before_its_commit_leaves_the_index_as_before(
    make: Make, tmp_path: Path
) -> None:
    import signal
    import subprocess
    import sys

    g = make()
    assert isinstance(g.add("crash", corpus(7)), Indexed)
    before = g.search("crash", "alpha killed", top_k=20)
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, str(tmp_path / "home")],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "staged"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    after = g.search("crash", "alpha killed", top_k=20)
    assert isinstance(after, Searched) and isinstance(before, Searched)
    assert [h.passage.id for h in after.hits] == [h.passage.id for h in before.hits]
    assert g.status("crash").passages == 7  # type: ignore[union-attr]
    # the next write sweeps what the killed writer staged, and the lock it held is free again
    assert isinstance(g.add("crash", corpus(3, "after"), deadline_s=30), Indexed)
    assert len(list((tmp_path / "home" / "crash" / "native").glob("seg-*"))) == 1


def test_the_guard_loads_the_query_encoder_before_the_first_search(tmp_path: Path) -> None:
    """``prepare`` embeds a token query once with the configured embedder (loading its model
    outside the first search's deadline); without an embedder setting it loads nothing."""
    from typing import Any

    from indexplug import get_registry
    from indexplug.protocols import Granularity
    from indexplug_colbert import ColbertBackend

    calls: list[tuple[str, Granularity]] = []
    hashing = get_registry().embedder("hashing:default")

    class Counting:
        name = hashing.name
        dim = hashing.dim
        granularities = hashing.granularities

        def readiness(self) -> Any:
            return hashing.readiness()

        def embed_documents(self, texts: Any, granularity: Granularity) -> Any:
            return hashing.embed_documents(texts, granularity)

        def embed_query(self, text: str, granularity: Granularity) -> Any:
            calls.append((text, granularity))
            return hashing.embed_query(text, granularity)

    counting = Counting()
    factory: Any = lambda _spec: counting  # noqa: E731
    guard = Guard(ColbertBackend(tmp_path / "h", {"embedder": "hashing:default"}, factory))
    guard.add("i", [Passage.create("river otters eat fish", "mem://o")])
    assert calls == []
    guard.prepare()
    assert calls == [("warm up", Granularity.TOKEN)]
    guard.prepare()  # once per guard
    assert len(calls) == 1
    assert isinstance(guard.search("i", "otters", top_k=1), Searched)
    assert calls[-1] == ("otters", Granularity.TOKEN)

    calls.clear()
    Guard(ColbertBackend(tmp_path / "h2", {}, factory)).prepare()
    assert calls == []
