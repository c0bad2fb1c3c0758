"""Checks of ``Capabilities.vectors``: passages added with the caller's own vectors, a search
by a query vector, the stored vectors returned with the hits, and bad vectors refused.

The vectors are random (a fixed seed) and unrelated to the passages' text, so a backend that
embeds the text itself instead of storing the vectors it was given cannot find the passage a
vector belongs to."""

from __future__ import annotations

from typing import Any

from indexplug.errors import InvalidRequest
from indexplug.outcomes import Searched
from indexplug.passages import Passage
from indexplug.testing.checks.helpers import (
    _by_id,
    _count,
    _describe,
    _op,
    _refused,
    _same_passage,
    _show,
    kit_passage,
)
from indexplug.testing.checks.registry import _check
from indexplug.testing.checks.subject import Subject, fail

TOLERANCE = 1e-4
"""How far a returned vector's numbers may be from the stored (normalised) ones: float32
storage and a server's JSON round trip, not a different vector."""

_TEXTS = (
    "the harbour seal dozes on a warm rock",
    "a recipe for slow roasted tomatoes",
    "compilers turn source code into machine code",
    "glaciers carve valleys over thousands of years",
    "the violin's sound post carries vibration",
)


def _space(s: Subject) -> tuple[str, int]:
    try:
        return s.guard.vector_space()
    except Exception as exc:
        fail(f"the backend claims vectors, but vector_space() could not be read: {_describe(exc)}")


def _unit_vectors(n: int, dim: int, seed: int = 7) -> list[list[float]]:
    """``n`` random unit vectors of length ``dim`` (fixed seed), as plain lists."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        v = rng.standard_normal(dim)
        out.append([float(x) for x in v / np.linalg.norm(v)])
    return out


def _passages(tag: str) -> list[Passage]:
    return [kit_passage(t, i, tag=tag) for i, t in enumerate(_TEXTS)]


def _add_vectors(s: Subject, index: str, ps: list[Passage], vs: list[Any], what: str) -> Any:
    d = s.settings.op_deadline_s
    return _op(
        "add_vectors",
        what,
        ("INDEXED",),
        index,
        lambda: s.guard.add_vectors(index, ps, vs, deadline_s=d),
    )


def _search_vector(
    s: Subject, index: str, vector: list[float], what: str, *, top_k: int, with_vectors: bool
) -> Searched:
    d = s.settings.op_deadline_s
    out: Searched = _op(
        "search_vector",
        what,
        ("SEARCHED",),
        index,
        lambda: s.guard.search_vector(
            index, vector, top_k=top_k, with_vectors=with_vectors, deadline_s=d
        ),
    )
    return out


def _filled(s: Subject, tag: str) -> tuple[str, list[Passage], list[list[float]]]:
    _, dim = _space(s)
    index = s.index(tag)
    ps = _passages(tag)
    vs = _unit_vectors(len(ps), dim)
    out = _add_vectors(s, index, ps, vs, f"add_vectors of {len(ps)} passages")
    if out.added != len(ps):
        fail(f"add_vectors of {len(ps)} new passages reported {out.added} added")
    again = _add_vectors(s, index, ps, vs, "the same add_vectors again")
    if again.added != 0 or again.known != len(ps):
        fail(
            f"adding the same {len(ps)} passages with vectors again reported {again.added} "
            f"added and {again.known} known (expected 0 and {len(ps)})"
        )
    return index, ps, vs


@_check(
    "vectors.round_trip",
    "Passages added with vectors are stored once and come back whole from a vector search",
    claim="vectors",
)
def _round_trip(s: Subject) -> None:
    index, ps, vs = _filled(s, "vec-rt")
    n = _count(s, index, "status after add_vectors")
    if n != len(ps):
        fail(f"status after adding {len(ps)} passages with vectors counts {n}")
    out = _search_vector(s, index, vs[0], "search_vector", top_k=len(ps), with_vectors=False)
    added = _by_id(ps)
    if len(out.hits) != len(ps):
        fail(f"search_vector with top_k={len(ps)} over {len(ps)} passages gave {len(out.hits)}")
    for i, hit in enumerate(out.hits, 1):
        _same_passage(hit.passage, added, f"search_vector: hit {i}")
        if hit.vector is not None:
            fail(f"search_vector without with_vectors answered a vector with hit {i}")


@_check(
    "vectors.search",
    "A search by a passage's own vector finds that passage first",
    claim="vectors",
)
def _search(s: Subject) -> None:
    index, ps, vs = _filled(s, "vec-search")
    for i, (p, v) in enumerate(zip(ps, vs, strict=True)):
        out = _search_vector(
            s, index, v, f"search_vector by vector {i}", top_k=3, with_vectors=False
        )
        top = out.hits[0].passage.id
        if top != p.id:
            fail(
                f"search_vector by the vector given with passage {i} ({p.text!r}) ranked "
                f"{out.hits[0].passage.text!r} first: the backend does not search the vectors "
                "it was given (does it embed the text instead?)"
            )


@_check(
    "vectors.returned",
    "With with_vectors, each hit carries the vector stored for its passage",
    claim="vectors",
)
def _returned(s: Subject) -> None:
    import numpy as np

    index, ps, vs = _filled(s, "vec-back")
    by_id = {p.id: np.asarray(v, dtype=np.float64) for p, v in zip(ps, vs, strict=True)}
    out = _search_vector(s, index, vs[1], "search_vector with_vectors", top_k=5, with_vectors=True)
    for hit in out.hits:
        if hit.vector is None:
            fail(f"search_vector with_vectors answered hit {hit.rank} without its vector")
        want = by_id[hit.passage.id]
        got = np.asarray(hit.vector, dtype=np.float64)
        off = float(np.max(np.abs(got - want)))
        if off > TOLERANCE:
            fail(
                f"hit {hit.rank}'s vector differs from the one stored with its passage by up to "
                f"{off:.3g} (tolerance {TOLERANCE})"
            )


@_check(
    "vectors.refused",
    "Vectors of another dimension or embedder, and NaN, are refused and store nothing",
    claim="vectors",
)
def _refusals(s: Subject) -> None:
    name, dim = _space(s)
    index, ps, vs = _filled(s, "vec-bad")
    extra = [kit_passage("a passage that must not be stored", 9, tag="vec-bad")]
    d = s.settings.op_deadline_s
    wrong = _unit_vectors(1, dim + 1, seed=11)
    for what, call, field in (
        (
            f"add_vectors with a vector of {dim + 1} numbers (the index's embedder gives {dim})",
            lambda: s.guard.add_vectors(index, extra, wrong, deadline_s=d),
            "vectors",
        ),
        (
            f"search_vector with a vector of {dim + 1} numbers",
            lambda: s.guard.search_vector(index, wrong[0], top_k=3, deadline_s=d),
            "vectors",
        ),
        (
            f"add_vectors stated to be of another embedder than {name}",
            lambda: s.guard.add_vectors(
                index, extra, vs[:1], embedder="kit-other:model", deadline_s=d
            ),
            "embedder",
        ),
    ):
        try:
            out = call()
        except InvalidRequest as exc:
            if exc.field != field:
                fail(f"{what} was refused naming field {exc.field!r}, not {field!r}")
            continue
        except Exception as exc:
            fail(f"{what} raised {_describe(exc)} instead of answering BAD_REQUEST")
        if getattr(out, "code", None) != "BAD_REQUEST" or getattr(out, "field", None) != field:
            fail(f"{what} answered {_show(out)} instead of BAD_REQUEST naming '{field}'")
    nan = [float("nan")] * dim
    _refused("add_vectors with a NaN vector", lambda: s.guard.add_vectors(index, extra, [nan]))
    _refused(
        "search_vector with an infinite vector",
        lambda: s.guard.search_vector(index, [float("inf")] * dim, top_k=3),
    )
    n = _count(s, index, "status after the refused writes")
    if n != len(ps):
        fail(f"after refused writes the index counts {n} passages, not the {len(ps)} stored")
