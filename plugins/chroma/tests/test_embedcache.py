"""indexplug.embedcache: vectors reused by embedder name and passage id, never a failure."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from chroma_helpers import corpus
from indexplug.embedcache import (
    EmbeddingCache,
    cache_file_name,
    cache_for,
    default_cache_dir,
    embed_passages,
)
from indexplug.embedders.hashing import HashingEmbedder
from indexplug.protocols import Granularity, Vector


class Counting(HashingEmbedder):
    def __init__(self, dim: int = 64) -> None:
        super().__init__(dim)
        self.calls: list[int] = []

    def embed_documents(self, texts: Sequence[str], granularity: Granularity) -> list[Vector]:
        self.calls.append(len(texts))
        return super().embed_documents(texts, granularity)


def test_vectors_round_trip_exactly(tmp_path: Path) -> None:
    emb = Counting()
    cache = EmbeddingCache(emb.name, emb.dim, root=tmp_path)
    ps = corpus(10)
    first = embed_passages(emb, ps, Granularity.TEXT, cache=cache)
    second = embed_passages(emb, ps, Granularity.TEXT, cache=cache)
    assert emb.calls == [10]
    assert all(np.array_equal(a, b) for a, b in zip(first, second, strict=True))
    assert cache.count() == 10 and cache.path.parent == tmp_path


def test_only_missing_passages_are_embedded_in_order(tmp_path: Path) -> None:
    emb = Counting()
    cache = EmbeddingCache(emb.name, emb.dim, root=tmp_path)
    ps = corpus(6)
    embed_passages(emb, ps[:4], Granularity.TEXT, cache=cache)
    mixed = [ps[5], ps[0], ps[4], ps[0]]
    out = embed_passages(emb, mixed, Granularity.TEXT, cache=cache)
    assert emb.calls == [4, 2]
    want = emb.embed_documents([p.text for p in mixed], Granularity.TEXT)
    assert all(np.allclose(a, b) for a, b in zip(out, want, strict=True))


def test_token_vectors_and_float16(tmp_path: Path) -> None:
    emb = Counting()
    cache = EmbeddingCache(emb.name, emb.dim, root=tmp_path, dtype="float16")
    ps = corpus(3)
    fresh = embed_passages(emb, ps, Granularity.TOKEN, cache=cache)
    cached = embed_passages(emb, ps, Granularity.TOKEN, cache=cache)
    assert emb.calls == [3]
    for a, b in zip(fresh, cached, strict=True):
        assert a.shape == b.shape and b.dtype == np.float32 and np.allclose(a, b, atol=1e-3)
    assert cache.path.name.endswith("-f16.sqlite")
    # text and token vectors of one passage are cached apart
    embed_passages(emb, ps, Granularity.TEXT, cache=cache)
    assert emb.calls == [3, 3]


def test_a_cache_for_another_dimension_is_not_trusted(tmp_path: Path) -> None:
    EmbeddingCache("hashing:64", 64, root=tmp_path).put_many(
        {"a" * 64: np.ones(64, np.float32)}, Granularity.TEXT
    )
    liar = EmbeddingCache("hashing:64", 32, root=tmp_path)
    with pytest.warns(RuntimeWarning, match="made for"):
        assert liar.get_many(["a" * 64], Granularity.TEXT) == {}


def test_a_broken_cache_file_only_costs_time(tmp_path: Path) -> None:
    emb = Counting()
    path = tmp_path / cache_file_name(emb.name)
    path.write_bytes(b"not a database" * 100)
    cache = EmbeddingCache(emb.name, emb.dim, root=tmp_path)
    with pytest.warns(RuntimeWarning, match="disabled"):
        out = embed_passages(emb, corpus(2), Granularity.TEXT, cache=cache)
    assert len(out) == 2 and emb.calls == [2]


def test_file_names_are_safe_and_distinct() -> None:
    a, b = cache_file_name("x:a/b"), cache_file_name("x:a_b")
    assert a != b and "/" not in a and a.endswith(".sqlite")
    assert cache_file_name("p:" + "m" * 500).__len__() < 120


def test_the_default_place_is_under_the_indexplug_home(tmp_path: Path) -> None:
    # conftest points INDEXPLUG_HOME at this test's folder
    assert default_cache_dir().parent.parent == tmp_path
    emb = HashingEmbedder(64)
    assert cache_for(emb) is cache_for(emb)
    assert cache_for(emb).path.parent == default_cache_dir()


def test_the_cache_can_be_shared_across_homes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = tmp_path / "shared-cache"
    monkeypatch.setenv("INDEXPLUG_EMBED_CACHE", str(shared))
    assert default_cache_dir() == shared
    ps = corpus(5)
    embedders = []
    for home in ("home-a", "home-b"):  # one process per home, as it were: a fresh embedder each
        monkeypatch.setenv("INDEXPLUG_HOME", str(tmp_path / home))
        emb = Counting()
        cache = EmbeddingCache(emb.name, emb.dim, root=default_cache_dir())
        embed_passages(emb, ps, Granularity.TEXT, cache=cache)
        embedders.append(emb)
    assert [e.calls for e in embedders] == [[5], []]
    monkeypatch.delenv("INDEXPLUG_EMBED_CACHE")
    assert default_cache_dir() == tmp_path / "home-b" / "embedcache"
