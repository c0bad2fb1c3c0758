"""The chroma backend's vector interface: the caller's vectors stored and searched through
the same steps as text (keys, filters), returned on request, and vectors of another model
than the collection records refused (BAD_REQUEST), never compared."""

from __future__ import annotations

from pathlib import Path

import indexplug
import numpy as np
import pytest
from chroma_helpers import FAST
from indexplug import Passage, Searched
from indexplug.testing import BackendFactory


def unit(i: int, dim: int = 256) -> list[float]:
    v = np.random.default_rng(i).standard_normal(dim)
    return [float(x) for x in v / np.linalg.norm(v)]


def test_vectors_with_keys_and_filters(tmp_path: Path) -> None:
    g = BackendFactory("chroma", str(tmp_path), {"embedder": FAST})()
    ps = [
        Passage.create(f"note {i}", f"mem://{i}", metadata={"n": i}, key=f"k{i}") for i in range(4)
    ]
    out = g.add_vectors("v", ps, [unit(i) for i in range(4)])
    assert isinstance(out, indexplug.Indexed) and out.added == 4
    found = g.search_vector("v", unit(2), top_k=2, with_vectors=True)
    assert isinstance(found, Searched) and found.hits[0].passage.key == "k2"
    assert np.allclose(found.hits[0].vector, unit(2), atol=1e-5)
    narrowed = g.search_vector("v", unit(2), top_k=4, filters={"n": {"$lt": 2}})
    assert isinstance(narrowed, Searched)
    assert {h.passage.key for h in narrowed.hits} == {"k0", "k1"}
    # a new version of key k2, with its own vector, replaces the old one
    again = g.add_vectors("v", [Passage.create("note 2 v2", "mem://2", key="k2")], [unit(9)])
    assert isinstance(again, indexplug.Indexed) and again.replaced == 1
    top = g.search_vector("v", unit(9), top_k=1)
    assert isinstance(top, Searched) and top.hits[0].passage.text == "note 2 v2"
    # text search still ranks with the backend's own embedder
    assert isinstance(g.search("v", "note"), Searched)
    g.close()


def test_another_model_than_the_collection_records_is_a_bad_request(tmp_path: Path) -> None:
    BackendFactory("chroma", str(tmp_path), {"embedder": FAST})().add_vectors(
        "v", [Passage.create("otters", "mem://o")], [unit(0)]
    )
    other = BackendFactory("chroma", str(tmp_path), {"embedder": "hashing:128"})()
    out = other.search_vector("v", unit(0, 128), top_k=1)
    assert isinstance(out, indexplug.BadRequest) and out.field == "embedder"
    assert "hashing:default" in out.reason
    wrote = other.add_vectors("v", [Passage.create("seals", "mem://s")], [unit(1, 128)])
    assert isinstance(wrote, indexplug.BadRequest) and wrote.field == "embedder"
    with pytest.raises(indexplug.InvalidRequest):
        other.search_vector("v", [float("nan")] * 128, top_k=1)
