"""The vector interface of the elastic backend (``Capabilities.vectors``) against a real node.

What the kit's ``vectors.*`` checks leave out: both modes' scales, filters, keys (a key written
again or losing a passage keeps the vectors it holds), the budget, an index recording another
embedder than the backend's, and a backend that does not claim vectors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from indexplug import (
    BadRequest,
    Guard,
    Indexed,
    IndexEmpty,
    IndexFailed,
    IndexTimeout,
    NoMatch,
    OverBudget,
    Passage,
    Removed,
    Searched,
)
from indexplug.errors import InvalidRequest, NotSupported

BackendMaker = Callable[..., Guard]
D = 60.0  # a generous deadline: the shared machine is slow; deadlines are not tested here
EMBEDDER = "hashing:default"
DIM = 256


def passages(n: int, tag: str = "v", key: str | None = None) -> list[Passage]:
    return [
        Passage.create(
            f"passage {tag} number {i} about nothing in particular",
            f"mem://{tag}/{i}",
            metadata={"n": i, "even": i % 2 == 0},
            key=key,
        )
        for i in range(n)
    ]


def unit_vectors(n: int, dim: int = DIM, seed: int = 3) -> list[np.ndarray]:
    """Random unit vectors, unrelated to the passages' text: a backend that embedded the text
    instead of storing them could not find a passage by its vector."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        v = rng.standard_normal(dim)
        out.append((v / np.linalg.norm(v)).astype(np.float32))
    return out


def vector_of(out: Searched, pid: str) -> np.ndarray:
    hit = next(h for h in out.hits if h.passage.id == pid)
    assert hit.vector is not None
    return np.asarray(hit.vector)


@pytest.mark.parametrize("mode", ["knn", "hybrid"])
def test_round_trip_add_search_and_vectors_back(make_single: BackendMaker, mode: str) -> None:
    g = make_single(embedder=EMBEDDER, mode=mode)
    assert g.capabilities.vectors and g.vector_space() == (EMBEDDER, DIM)
    ps, vs = passages(8), unit_vectors(8)
    out = g.add_vectors("v", ps, vs, deadline_s=D)
    assert isinstance(out, Indexed) and out.added == 8
    again = g.add_vectors("v", ps, vs, deadline_s=D)
    assert isinstance(again, Indexed) and (again.added, again.known) == (0, 8)
    assert g.status("v").passages == 8
    for i, (p, v) in enumerate(zip(ps, vs, strict=True)):
        found = g.search_vector("v", v, top_k=3, deadline_s=D)
        assert isinstance(found, Searched), found
        assert found.hits[0].passage == p, i
        assert all(h.vector is None for h in found.hits)
        if mode == "knn":
            assert found.scale.name == "cosine"
            assert found.hits[0].score == pytest.approx(1.0, abs=1e-4)
        else:  # the kNN leg alone, fused: its reciprocal ranks
            assert found.scale.name == "rrf"
            assert [h.score for h in found.hits] == pytest.approx([1 / 61, 1 / 62, 1 / 63])
    back = g.search_vector("v", vs[2], top_k=8, with_vectors=True, deadline_s=D)
    assert isinstance(back, Searched) and len(back.hits) == 8
    for p, v in zip(ps, vs, strict=True):
        np.testing.assert_allclose(vector_of(back, p.id), v, atol=1e-6)


def test_the_callers_vectors_are_stored_not_the_embedders(make_single: BackendMaker) -> None:
    """A passage added with a vector is found by that vector, not by its text's embedding;
    ``query_vector`` is the embedder's, and a search by it finds what ``search`` finds."""
    g = make_single(embedder=EMBEDDER, mode="knn")
    ps = passages(4)
    assert isinstance(g.add_vectors("v", ps, unit_vectors(4), deadline_s=D), Indexed)
    by_text = g.search_vector("v", g.query_vector(ps[0].text), top_k=4, deadline_s=D)
    assert isinstance(by_text, Searched)
    searched = g.search("v", ps[0].text, top_k=4)
    assert isinstance(searched, Searched)
    assert [h.passage.id for h in by_text.hits] == [h.passage.id for h in searched.hits]
    assert max(h.score for h in by_text.hits) < 0.5  # random vectors: no match near 1


def test_filters_and_outcomes(make_single: BackendMaker) -> None:
    g = make_single(embedder=EMBEDDER, mode="knn")
    vs = unit_vectors(10)
    assert isinstance(g.search_vector("v", vs[0], deadline_s=D), IndexEmpty)
    ps = passages(10)
    assert isinstance(g.add_vectors("v", ps, vs, deadline_s=D), Indexed)
    even = g.search_vector("v", vs[1], top_k=10, filters={"even": True}, deadline_s=D)
    assert isinstance(even, Searched)
    assert sorted(h.passage.metadata["n"] for h in even.hits) == [0, 2, 4, 6, 8]
    ranged = g.search_vector(
        "v", vs[7], top_k=2, filters={"n": {"$gte": 6}}, with_vectors=True, deadline_s=D
    )
    assert isinstance(ranged, Searched) and ranged.hits[0].passage == ps[7]
    assert all(h.passage.metadata["n"] >= 6 for h in ranged.hits) and len(ranged.hits) == 2
    np.testing.assert_allclose(vector_of(ranged, ps[7].id), vs[7], atol=1e-6)
    none = g.search_vector("v", vs[0], filters={"n": 99}, deadline_s=D)
    assert isinstance(none, NoMatch) and none.searched == 10
    gone = g.remove("v", [p.id for p in ps])
    assert isinstance(gone, Removed) and gone.removed == 10
    assert isinstance(g.search_vector("v", vs[0], deadline_s=D), IndexEmpty)


def test_a_filter_finds_a_passage_whose_nearer_sibling_fails_it(
    make_single: BackendMaker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Elasticsearch 8 applies a nested ``knn``'s own filter to parent documents (a filter on
    a passage's metadata matched nothing: every filtered kNN search was ``NO_MATCH``), and
    keeps each document's nearest passage: a filtered kNN leg over few passages is scored
    exactly, and one over many is post-filtered from more candidates."""
    g = make_single(embedder=EMBEDDER, mode="knn")
    q, other = unit_vectors(2, seed=5)
    mid = (q + other) / np.linalg.norm(q + other)
    keyed = passages(2, tag="k", key="doc")  # 0 is even, 1 is not
    assert isinstance(g.add_vectors("v", keyed, [mid, q], deadline_s=D), Indexed)
    out = g.search_vector("v", q, top_k=1, filters={"even": True}, deadline_s=D)
    assert isinstance(out, Searched) and out.hits[0].passage == keyed[0]
    assert out.hits[0].score == pytest.approx(float(np.dot(mid, q)), abs=1e-5)
    # text searches in kNN mode go the same way
    loose = passages(6, tag="text")
    assert isinstance(g.add("v", loose), Indexed)
    found = g.search("v", loose[3].text, top_k=3, filters={"n": 3})
    assert isinstance(found, Searched)
    assert [h.passage for h in found.hits] == [loose[3]]  # the only passage with n=3
    # past EXACT_MAX passages: the post-filtered approximate leg (exact for loose passages)
    from indexplug_elastic import search

    monkeypatch.setattr(search, "EXACT_MAX", 0)
    wide = g.search("v", loose[4].text, top_k=10, filters={"even": True})
    assert isinstance(wide, Searched) and wide.hits[0].passage == loose[4]
    assert all(h.passage.metadata["even"] for h in wide.hits)


def test_wrong_dimension_and_embedder_are_refused_and_write_nothing(
    make_single: BackendMaker,
) -> None:
    g = make_single(embedder=EMBEDDER, mode="knn")
    ps, vs = passages(3), unit_vectors(3)
    assert isinstance(g.add_vectors("v", ps, vs, deadline_s=D), Indexed)
    extra = passages(1, tag="extra")
    short = unit_vectors(1, dim=DIM - 1)
    refused: list[Any] = [
        g.add_vectors("v", extra, short, deadline_s=D),
        g.add_vectors("v", extra, vs[:1], embedder="hashing:128", deadline_s=D),
        g.add_vectors("new", extra, short, deadline_s=D),
        g.search_vector("v", short[0], deadline_s=D),
        g.search_vector("v", vs[0], embedder="other:model", deadline_s=D),
    ]
    fields = ["vectors", "embedder", "vectors", "vectors", "embedder"]
    for out, field in zip(refused, fields, strict=True):
        assert isinstance(out, BadRequest) and out.field == field, out
    assert g.status("v").passages == 3
    assert g.get("v", [extra[0].id]).missing_ids == [extra[0].id]
    assert g.status("new").exists is False


def test_an_index_of_another_embedder_refuses_vectors_typed(make_single: BackendMaker) -> None:
    """The backend's own check: vectors that pass the guard (of the backend's configured
    embedder) but not of the embedder the index recorded are ``BAD_REQUEST`` naming
    ``embedder``, nothing written; text ops keep their ``INDEX_FAILED`` mismatch."""
    g = make_single(embedder=EMBEDDER, mode="knn")
    assert isinstance(g.add_vectors("v", passages(2), unit_vectors(2), deadline_s=D), Indexed)
    other = make_single(embedder="hashing:128", mode="knn", prefix=g.backend.opts.prefix)
    v128 = unit_vectors(1, dim=128)
    for out in (
        other.add_vectors("v", passages(1, tag="x"), v128, deadline_s=D),
        other.search_vector("v", v128[0], deadline_s=D),
    ):
        assert isinstance(out, BadRequest) and out.field == "embedder", out
        assert "hashing:default (dim 256)" in out.reason
    assert isinstance(other.add("v", passages(1, tag="y")), IndexFailed)
    assert g.status("v").passages == 2
    # an index made without an embedder holds no vectors
    plain = make_single(prefix=g.backend.opts.prefix)
    assert isinstance(plain.add("lex", passages(2)), Indexed)
    out = g.search_vector("lex", unit_vectors(1)[0], deadline_s=D)
    assert isinstance(out, BadRequest) and out.field == "embedder"
    assert "without an embedder" in out.reason


def test_keys_keep_the_vectors_they_hold(make_single: BackendMaker) -> None:
    """A key written again keeps the vector of each passage it already held (known,
    unchanged); removing a passage of a key writes the others back with their stored vectors,
    not with vectors the embedder makes of their text."""
    g = make_single(embedder=EMBEDDER, mode="knn")
    ps = passages(3, key="doc-1")
    vs = unit_vectors(3)
    assert isinstance(g.add_vectors("v", ps[:2], vs[:2], deadline_s=D), Indexed)
    new = unit_vectors(3, seed=9)
    out = g.add_vectors("v", ps, new, deadline_s=D)
    assert isinstance(out, Indexed) and (out.added, out.known) == (1, 2)
    back = g.search_vector("v", vs[0], top_k=3, with_vectors=True, deadline_s=D)
    assert isinstance(back, Searched) and len(back.hits) == 3
    np.testing.assert_allclose(vector_of(back, ps[0].id), vs[0], atol=1e-6)
    np.testing.assert_allclose(vector_of(back, ps[1].id), vs[1], atol=1e-6)
    np.testing.assert_allclose(vector_of(back, ps[2].id), new[2], atol=1e-6)
    assert isinstance(g.remove("v", [ps[2].id]), Removed)
    left = g.search_vector("v", vs[1], top_k=3, with_vectors=True, deadline_s=D)
    assert isinstance(left, Searched) and left.hits[0].passage == ps[1]
    assert len(left.hits) == 2 and left.hits[0].score == pytest.approx(1.0, abs=1e-4)
    np.testing.assert_allclose(vector_of(left, ps[0].id), vs[0], atol=1e-6)


def test_the_budget_is_honoured(make_single: BackendMaker) -> None:
    g = make_single(embedder=EMBEDDER, mode="knn")
    refused = g.add_vectors("b", passages(3), unit_vectors(3), max_bytes=100, deadline_s=D)
    assert isinstance(refused, OverBudget) and refused.check == "projected"
    assert g.status("b").exists is False
    out = g.add_vectors("b", passages(3), unit_vectors(3), max_bytes=500_000, deadline_s=D)
    assert isinstance(out, Indexed) and out.max_bytes == 500_000


def test_a_search_past_its_deadline_on_the_server_is_a_timeout(
    make_single: BackendMaker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kNN search the server cut at its ``timeout`` answers ``timed_out``: the outcome is
    ``IndexTimeout``, not a shorter answer.  (A server cannot be made slow on demand: its
    real answer is marked timed out.)"""
    from elasticsearch import Elasticsearch

    g = make_single(embedder=EMBEDDER, mode="knn")
    vs = unit_vectors(2)
    assert isinstance(g.add_vectors("t", passages(2), vs, deadline_s=D), Indexed)
    real = Elasticsearch.msearch

    def late(self: Elasticsearch, **kw: Any) -> Any:
        answer = real(self, **kw)
        for one in answer["responses"]:
            one["timed_out"] = True
        return answer

    monkeypatch.setattr(Elasticsearch, "msearch", late)
    assert isinstance(g.search_vector("t", vs[0], deadline_s=D), IndexTimeout)


@pytest.mark.parametrize("options", [{}, {"embedder": EMBEDDER, "mode": "bm25"}])
def test_a_backend_without_knn_does_not_claim_vectors(
    make_single: BackendMaker, options: dict[str, Any]
) -> None:
    """BM25 alone (no embedder, or an embedder in bm25 mode, whose ``es_bm25`` scale a search
    by vector cannot answer on) claims no vectors: every vector op is the guard's
    ``NotSupported``, a ``BAD_REQUEST`` naming the capability, and nothing is written."""
    g = make_single(**options)
    assert g.capabilities.vectors is False
    ps = passages(2)
    calls: list[Callable[[], Any]] = [
        lambda: g.add_vectors("v", ps, unit_vectors(2), deadline_s=D),
        lambda: g.search_vector("v", unit_vectors(1)[0], deadline_s=D),
        lambda: g.query_vector("anything"),
        lambda: g.vector_space(),
    ]
    for call in calls:
        with pytest.raises(NotSupported) as raised:
            call()
        assert raised.value.capability == "vectors"
        assert isinstance(raised.value, InvalidRequest) and raised.value.field == "op"
    assert g.status("v").exists is False
