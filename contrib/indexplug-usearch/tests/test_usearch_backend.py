"""usearch specifics: the graph is rebuilt from the store when it is stale or missing, and an
index built with one embedder refuses another."""

from __future__ import annotations

import random
from pathlib import Path

import indexplug
import pytest
from indexplug import Passage, Searched
from indexplug.testing import BackendFactory
from indexplug.testing.checks.scale import _VOCAB
from indexplug_usearch import backend as backend_mod

TEXTS = ["otters hold hands", "sea lions sleep", "volcanoes erupt lava", "protein folding"]


def test_stale_graph_is_rebuilt_from_the_store(tmp_path: Path) -> None:
    open_ = BackendFactory("usearch", str(tmp_path), {"embedder": "hashing:default"})
    g = open_()
    g.add("u", [Passage.create(t, f"mem://{i}") for i, t in enumerate(TEXTS)])
    g.close()
    (tmp_path / "u" / "hnsw.gen").write_text("0")  # as if a crash hit between commit and save
    g2 = open_()
    out = g2.search("u", "otters holding hands", top_k=1)
    assert isinstance(out, Searched) and out.hits[0].passage.text == TEXTS[0]
    (tmp_path / "u" / "hnsw.usearch").unlink()
    g2.close()
    assert open_().status("u").passages == 4  # type: ignore[union-attr]


def test_a_different_embedder_is_refused(tmp_path: Path) -> None:
    BackendFactory("usearch", str(tmp_path), {"embedder": "hashing:default"})().add(
        "u", [Passage.create("otters", "mem://o")]
    )
    other = BackendFactory("usearch", str(tmp_path), {"embedder": "hashing:128"})()
    out = other.search("u", "otters")
    assert isinstance(out, indexplug.IndexFailed) and "refusing to mix" in out.reason


def near_duplicates(n: int) -> list[Passage]:
    """``n`` passages the hashing embedder barely tells apart, as the kit's scale check makes:
    24 words drawn from 40, and one word of their own."""
    rng = random.Random(20240102)
    return [
        Passage.create(" ".join(rng.choice(_VOCAB) for _ in range(24)) + f" tok{i}", f"mem://{i}")
        for i in range(n)
    ]


def own_text_misses(guard: indexplug.Guard, passages: list[Passage]) -> list[str]:
    """The passages that a search for their exact text leaves out of the top 10."""
    missed = []
    for p in passages:
        out = guard.search("u", p.text, top_k=10)
        assert isinstance(out, Searched)
        if p.id not in {h.passage.id for h in out.hits}:
            missed.append(p.id)
    return missed


def test_below_the_exact_size_every_passage_is_found_by_its_own_text(tmp_path: Path) -> None:
    """An index of a few thousand near-duplicates is searched exactly: a search for a
    passage's text always returns it (the HNSW graph alone, built by several threads on a
    loaded machine, sometimes did not)."""
    passages = near_duplicates(3000)
    assert len(passages) <= backend_mod.EXACT_BELOW
    g = BackendFactory("usearch", str(tmp_path), {"embedder": "hashing:default"})()
    for i in range(0, len(passages), 500):
        g.add("u", passages[i : i + 500])
    assert own_text_misses(g, passages) == []


def test_the_graph_is_built_the_same_way_every_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same passages added in the same batches give the same graph, byte for byte, and
    so the same answers on every run, whatever the machine's load; searched through the
    graph (exact search turned off), this one finds every passage by its own text."""
    monkeypatch.setattr(backend_mod, "EXACT_BELOW", 0)
    passages = near_duplicates(1500)
    graphs = []
    for run in ("a", "b"):
        g = BackendFactory("usearch", str(tmp_path / run), {"embedder": "hashing:default"})()
        for i in range(0, len(passages), 250):
            g.add("u", passages[i : i + 250])
        assert own_text_misses(g, passages[::5]) == []
        g.close()
        graphs.append((tmp_path / run / "u" / "hnsw.usearch").read_bytes())
    assert graphs[0] == graphs[1]


def _toy(name: str) -> indexplug.Embedder:
    from indexplug.embedders.wrapped import FunctionEmbedder

    def one(text: str) -> list[float]:
        return [float(len(text)), 1.0, float(text.count("o")), 0.5]

    return FunctionEmbedder(name, lambda ts: [one(t) for t in ts], one, dim=4)


def test_vectors_of_another_model_than_the_index_records_are_a_bad_request(
    tmp_path: Path,
) -> None:
    from indexplug.plugins import get_registry

    def opened(name: str) -> indexplug.Guard:
        return get_registry().backend("usearch", {}, home=tmp_path, embedder=_toy(name))

    first = opened("toy:a")
    vectors = [[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]]
    passages = [Passage.create(t, f"mem://{i}") for i, t in enumerate(TEXTS[:2])]
    assert isinstance(first.add_vectors("u", passages, vectors), indexplug.Indexed)
    found = first.search_vector("u", [0.0, 1.0, 0.0, 0.0], top_k=1, with_vectors=True)
    assert isinstance(found, Searched) and found.hits[0].passage.text == TEXTS[1]
    assert found.hits[0].vector == pytest.approx((0.0, 1.0, 0.0, 0.0))
    first.close()
    # the same folder opened with another model of the same dimension
    second = opened("toy:b")
    out = second.search_vector("u", [0.0, 1.0, 0.0, 0.0], top_k=1)
    assert isinstance(out, indexplug.BadRequest) and out.field == "embedder"
    assert "toy:a" in out.reason
    added = second.add_vectors("u", passages[:1], vectors[:1])
    assert isinstance(added, indexplug.BadRequest) and added.field == "embedder"
    second.close()


def test_stats_and_similarity_use_the_index_embedder(tmp_path: Path) -> None:
    """``stats`` names the embedder and its dimension and counts what a scan reads;
    ``similarity`` scores with the index's own embedder: the cosine its searches give."""
    from indexplug.similarity import score
    from indexplug.stats import index_stats

    g = BackendFactory("usearch", str(tmp_path), {"embedder": "hashing:default"})()
    ps = [Passage.create(t, f"mem://{i}") for i, t in enumerate(TEXTS)]
    g.add("u", ps)
    got = index_stats(g, "u")
    assert (got.passages, got.scanned) == (4, None)  # usearch has no scan: status's figures
    assert any("no scan" in n for n in got.notes)
    assert (got.embedder, got.dim, got.scale.name) == ("hashing:default", 256, "cosine")
    sims = score(g, "u", "otters holding hands", texts=[TEXTS[0], TEXTS[2]])
    hits = g.search("u", "otters holding hands", top_k=4)
    assert isinstance(hits, Searched)
    searched = {h.passage.text: h.score for h in hits.hits}
    assert sims.scorer == "cosine" and [s.n for s in sims.scores] == [0, 1]
    assert [s.score for s in sims.scores] == pytest.approx(
        [searched[TEXTS[0]], searched[TEXTS[2]]], abs=1e-4
    )
