"""A caller's own embedder object reaches the backend (``open_backend(..., embedder=...)``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from indexplug.embedders.wrapped import DIMENSION_PROBE, FunctionEmbedder
from indexplug.plugins import Registry
from indexplug.protocols import BackendContext, BackendSpec, Embedder, Granularity


def _unit(v: Sequence[float]) -> list[float]:
    return list(np.asarray(v, dtype=np.float32) / np.linalg.norm(v))


def test_function_embedder_calls_the_given_functions_and_normalises() -> None:
    calls: list[object] = []

    def documents(texts: list[str]) -> list[list[float]]:
        calls.append(("docs", texts))
        return [[3.0, 4.0] for _ in texts]

    def query(text: str) -> list[float]:
        calls.append(("query", text))
        return [0.0, 2.0]

    emb = FunctionEmbedder("mine:model", documents, query)
    assert isinstance(emb, Embedder)
    assert emb.dim == 2 and calls == [("query", DIMENSION_PROBE)]
    docs = emb.embed_documents(["a", "b"], Granularity.TEXT)
    assert all(np.allclose(d, _unit([3, 4])) for d in docs) and len(docs) == 2
    assert docs[0].dtype == np.float32
    assert emb.embed_query("q", Granularity.TEXT).tolist() == [0.0, 1.0]
    assert calls[1:] == [("docs", ["a", "b"]), ("query", "q")]


def test_function_embedder_learns_the_dimension_from_its_first_answer() -> None:
    queries: list[str] = []

    def query(text: str) -> list[float]:
        queries.append(text)
        return [1.0, 0.0, 0.0]

    emb = FunctionEmbedder("mine:model", lambda ts: [[0.0, 1.0, 0.0] for _ in ts], query)
    assert len(emb.embed_documents(["a"], Granularity.TEXT)[0]) == 3
    assert emb.dim == 3 and queries == []  # no probe


@pytest.mark.parametrize(
    ("vector", "words"),
    [([1.0], "length 1"), ([float("nan"), 1.0], "NaN"), ([0.0, 0.0], "zeros")],
)
def test_function_embedder_refuses_a_bad_vector(vector: list[float], words: str) -> None:
    emb = FunctionEmbedder("mine:model", lambda ts: [vector for _ in ts], lambda t: vector, dim=2)
    with pytest.raises(ValueError, match=words):
        emb.embed_documents(["a"], Granularity.TEXT)


def test_function_embedder_refuses_a_bad_name_token_granularity_and_miscount() -> None:
    with pytest.raises(ValueError, match="PROVIDER:MODEL"):
        FunctionEmbedder("nocolon", lambda ts: [], lambda t: [1.0])
    emb = FunctionEmbedder("mine:model", lambda ts: [[1.0]], lambda t: [1.0], dim=1)
    with pytest.raises(ValueError, match="per token"):
        emb.embed_query("q", Granularity.TOKEN)
    with pytest.raises(ValueError, match="1 vectors for 2 texts"):
        emb.embed_documents(["a", "b"], Granularity.TEXT)


class _Dense:
    """A stub backend that records what its context gave it."""

    name = "dense-stub"

    def __init__(self, ctx: BackendContext) -> None:
        self.ctx = ctx
        self.embedder = ctx.embedder(str(ctx.options.get("embedder", "hashing:default")))


def _registry() -> Registry:
    from indexplug import hookimpl

    class Plugin:
        @hookimpl
        def indexplug_backends(self) -> list[BackendSpec]:
            return [BackendSpec("dense-stub", _Dense)]  # type: ignore[arg-type]

    import indexplug.embedders.hashing as hashing

    reg = Registry(load_entrypoints=False)
    reg.register(Plugin(), name="stub")
    reg.register(hashing, name="hashing")
    return reg


def test_a_given_embedder_is_the_one_the_backend_gets() -> None:
    emb = FunctionEmbedder("mine:model", lambda ts: [[1.0] for _ in ts], lambda t: [1.0], dim=1)
    guard = _registry().backend("dense-stub", {"embedder": "hashing:64"}, embedder=emb)
    backend = guard.backend
    assert isinstance(backend, _Dense)
    assert backend.embedder is emb
    assert guard.embedder is emb
    # the settings are passed on as given; whatever spec they name, the factory answers emb
    assert backend.ctx.options == {"embedder": "hashing:64"}
    assert backend.ctx.embedder("hashing:128") is emb


def test_a_backend_that_does_not_embed_opens_as_usual_with_a_given_embedder() -> None:
    from indexplug.plugins import open_backend

    calls: list[str] = []

    def documents(texts: list[str]) -> list[list[float]]:
        calls.extend(texts)
        return [[1.0] for _ in texts]

    def query(text: str) -> list[float]:
        calls.append(text)
        return [1.0]

    emb = FunctionEmbedder("mine:model", documents, query)
    guard = open_backend("sqlite-fts5", embedder=emb)
    assert guard.embedder is emb and not guard.capabilities.dense
    guard.close()
    assert calls == []


def test_without_a_given_embedder_the_spec_is_built() -> None:
    guard = _registry().backend("dense-stub", {"embedder": "hashing:64"})
    assert guard.embedder is None
    assert guard.backend.embedder.name == "hashing:64"  # type: ignore[attr-defined]


def test_a_given_embedder_that_is_not_one_is_refused() -> None:
    with pytest.raises(TypeError, match="Embedder"):
        _registry().backend("dense-stub", {}, embedder=object())  # type: ignore[arg-type]
