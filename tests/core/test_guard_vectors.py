"""The guard's vector interface (``Capabilities.vectors``): vectors checked before a backend
sees them (dimension, finiteness, the embedder stated), hits' vectors checked and copied, and
backends that do not claim it refused with a typed error naming the capability."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import numpy as np
import pytest
from indexplug.errors import InvalidRequest, NotSupported
from indexplug.guard import Guard
from indexplug.outcomes import BadRequest, Hit, Indexed, IndexEmpty, IndexFailed, Searched
from indexplug.passages import Passage
from indexplug.testing import ReferenceBackend
from indexplug.testing.vectorref import VectorReference

DIM = 64


def passages(n: int = 4) -> list[Passage]:
    return [Passage.create(f"vector passage {i}", f"mem://vec/{i}") for i in range(n)]


def unit(i: int, dim: int = DIM) -> list[float]:
    rng = np.random.default_rng(i)
    v = rng.standard_normal(dim)
    return [float(x) for x in v / np.linalg.norm(v)]


@pytest.fixture
def guard() -> Guard:
    return Guard(VectorReference())


def test_add_then_search_by_vector_finds_its_passage(guard: Guard) -> None:
    ps = passages()
    out = guard.add_vectors("v", ps, [unit(i) for i in range(4)])
    assert isinstance(out, Indexed) and out.added == 4
    for i, p in enumerate(ps):
        hit = guard.search_vector("v", unit(i), top_k=1)
        assert isinstance(hit, Searched)
        assert hit.hits[0].passage.id == p.id
        assert hit.hits[0].vector is None


def test_vectors_are_normalised_and_returned_on_request(guard: Guard) -> None:
    ps = passages(2)
    raw = [[3.0 * x for x in unit(0)], unit(1)]
    guard.add_vectors("v", ps, raw)
    out = guard.search_vector("v", unit(0), top_k=2, with_vectors=True)
    assert isinstance(out, Searched)
    by_id = {h.passage.id: h.vector for h in out.hits}
    assert np.allclose(by_id[ps[0].id], unit(0), atol=1e-6)
    assert math.isclose(out.hits[0].score, 1.0, abs_tol=1e-5)
    # not in the JSON form
    assert "vector" not in out.hits[0].model_dump(mode="json")


def test_a_passage_given_twice_keeps_its_first_vector(guard: Guard) -> None:
    p = passages(1)[0]
    out = guard.add_vectors("v", [p, p], [unit(0), unit(1)])
    assert isinstance(out, Indexed) and out.added == 1 and out.known == 1
    found = guard.search_vector("v", unit(0), top_k=1, with_vectors=True)
    assert isinstance(found, Searched)
    assert np.allclose(found.hits[0].vector, unit(0), atol=1e-6)


@pytest.mark.parametrize(
    "bad, field",
    [
        ([float("nan")] * DIM, "vectors[0]"),
        ([float("inf")] + [0.0] * (DIM - 1), "vectors[0]"),
        ([0.0] * DIM, "vectors[0]"),
        ([], "vectors[0]"),
        ([[1.0, 2.0]], "vectors[0]"),
        ("not a vector", "vectors[0]"),
        ([1.0, "x"], "vectors[0]"),
    ],
)
def test_malformed_vectors_are_refused_before_the_backend(
    guard: Guard, bad: Any, field: str
) -> None:
    with pytest.raises(InvalidRequest) as raised:
        guard.add_vectors("v", passages(1), [bad])
    assert raised.value.field == field
    assert guard.status("v").passages == 0  # type: ignore[union-attr]


def test_one_vector_per_passage_of_one_length(guard: Guard) -> None:
    with pytest.raises(InvalidRequest, match="one vector per passage"):
        guard.add_vectors("v", passages(2), [unit(0)])
    with pytest.raises(InvalidRequest, match="one length"):
        guard.add_vectors("v", passages(2), [unit(0), unit(1, DIM + 1)])


def test_another_dimension_is_a_bad_request(guard: Guard) -> None:
    out = guard.add_vectors("v", passages(1), [unit(0, DIM + 1)])
    assert isinstance(out, BadRequest) and out.field == "vectors"
    assert "64" in out.reason
    guard.add_vectors("v", passages(1), [unit(0)])
    found = guard.search_vector("v", unit(0, 32), top_k=1)
    assert isinstance(found, BadRequest) and found.field == "vectors"


def test_another_embedder_stated_is_a_bad_request(guard: Guard) -> None:
    out = guard.add_vectors("v", passages(1), [unit(0)], embedder="openai:text-embedding-3")
    assert isinstance(out, BadRequest) and out.field == "embedder"
    ok = guard.add_vectors("v", passages(1), [unit(0)], embedder="hashing:64")
    assert isinstance(ok, Indexed)
    found = guard.search_vector("v", unit(0), top_k=1, embedder=HashingName())
    assert isinstance(found, Searched)
    with pytest.raises(InvalidRequest) as raised:
        guard.search_vector("v", unit(0), top_k=1, embedder="no-colon")
    assert raised.value.field == "embedder"


class HashingName:
    name = "hashing:64"


def test_an_index_recording_another_embedder_answers_bad_request() -> None:
    backend = VectorReference()
    guard = Guard(backend)
    guard.add_vectors("v", passages(1), [unit(0)])
    # the same index reopened by a backend whose embedder is another model of the same size
    backend.embedder = _Renamed(backend.embedder)
    out = guard.search_vector("v", unit(0), top_k=1)
    assert isinstance(out, BadRequest) and out.field == "embedder"
    assert "hashing:64" in out.reason


class _Renamed:
    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = "other:model"
        self.dim = inner.dim


def test_empty_index_and_empty_write(guard: Guard) -> None:
    assert isinstance(guard.search_vector("nothing", unit(0), top_k=3), IndexEmpty)
    out = guard.add_vectors("v", [], [])
    assert isinstance(out, Indexed) and out.added == 0


def test_backends_without_the_capability_are_refused_naming_it() -> None:
    guard = Guard(ReferenceBackend())
    with pytest.raises(NotSupported) as raised:
        guard.search_vector("v", unit(0), top_k=1)
    assert raised.value.capability == "vectors" and "vectors" in str(raised.value)
    assert isinstance(raised.value, InvalidRequest)
    with pytest.raises(NotSupported):
        guard.add_vectors("v", passages(1), [unit(0)])
    with pytest.raises(NotSupported):
        guard.vector_space()


class _HitsWithoutVectors(VectorReference):
    def _vector_out(self, stored: Any) -> tuple[float, ...]:
        return (float("nan"),) * len(stored)


class _VectorsOfAnotherLength(VectorReference):
    def _vector_out(self, stored: Any) -> tuple[float, ...]:
        return tuple(float(x) for x in stored[:-1])


@pytest.mark.parametrize("cls", [_HitsWithoutVectors, _VectorsOfAnotherLength])
def test_hit_vectors_are_checked(cls: type[VectorReference]) -> None:
    guard = Guard(cls())
    guard.add_vectors("v", passages(2), [unit(0), unit(1)])
    out = guard.search_vector("v", unit(0), top_k=2, with_vectors=True)
    assert isinstance(out, IndexFailed) and "stored vector" in out.reason
    # not asked for: not looked at, and never passed on
    plain = guard.search_vector("v", unit(0), top_k=2)
    assert isinstance(plain, Searched) and all(h.vector is None for h in plain.hits)


class _SpaceUnknown(VectorReference):
    def vector_space(self) -> tuple[str, int]:
        return ("hashing:64", 0)


def test_a_backend_that_cannot_say_its_space_fails() -> None:
    guard = Guard(_SpaceUnknown())
    out = guard.add_vectors("v", passages(1), [unit(0)])
    assert isinstance(out, IndexFailed)


def test_the_backend_gets_copies(guard: Guard) -> None:
    given = np.asarray(unit(0), dtype=np.float32)
    guard.add_vectors("v", passages(1), [given])
    stored = guard.backend._indexes["v"].vectors  # type: ignore[attr-defined]
    assert next(iter(stored.values())) is not given


def test_async_forms_answer_the_same(guard: Guard) -> None:
    async def run() -> tuple[Any, Any]:
        added = await guard.aadd_vectors("v", passages(2), [unit(0), unit(1)])
        found = await guard.asearch_vector("v", unit(1), top_k=1, with_vectors=True)
        return added, found

    added, found = asyncio.run(run())
    assert isinstance(added, Indexed) and added.added == 2
    assert isinstance(found, Searched)
    assert found.hits[0].passage.text == "vector passage 1"
    assert isinstance(found.hits[0], Hit) and found.hits[0].vector is not None
