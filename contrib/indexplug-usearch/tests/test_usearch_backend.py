"""usearch specifics: the graph is rebuilt from the store when it is stale or missing, and an
index built with one embedder refuses another."""

from __future__ import annotations

from pathlib import Path

import indexplug
from indexplug import Passage, Searched
from indexplug.testing import BackendFactory

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
