"""The kit's checks of ``Capabilities.vectors`` have teeth: the in-memory vector reference
passes all of them, each deliberately broken variant fails exactly the checks of the rule it
breaks, with a reason naming what went wrong, and a backend without the claim is reported
``NOT_CLAIMED``, never passed."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import pytest
from conftest import FAST
from indexplug.deadlines import Deadline
from indexplug.passages import Passage
from indexplug.protocols import BackendContext, Granularity
from indexplug.testing import CheckStatus, ReferenceBackend, run_card
from indexplug.testing.vectorref import VectorReference

VECTOR_CHECKS = ("vectors.round_trip", "vectors.search", "vectors.returned", "vectors.refused")


class IgnoresGivenVectors(VectorReference):
    """Embeds the text itself instead of storing the vectors it was given."""

    def add_vectors(
        self,
        index: str,
        passages: Sequence[Passage],
        vectors: Sequence[Any],
        *,
        embedder: str,
        max_bytes: int | None,
        deadline: Deadline,
    ) -> Any:
        own = self.embedder.embed_documents([p.text for p in passages], Granularity.TEXT)
        return super().add_vectors(
            index, passages, own, embedder=embedder, max_bytes=max_bytes, deadline=deadline
        )


class ReturnsOtherVectors(VectorReference):
    """Answers each hit with a vector that is not the one stored (reversed)."""

    def _vector_out(self, stored: Any) -> tuple[float, ...]:
        return tuple(float(x) for x in stored[::-1])


class AddsTwice(VectorReference):
    """Stores a passage added with vectors again each time (never *known*)."""

    def add_vectors(
        self, index: str, passages: Sequence[Passage], vectors: Sequence[Any], **kwargs: Any
    ) -> Any:
        out = super().add_vectors(index, passages, vectors, **kwargs)
        return out.model_copy(
            update={
                "added": out.added + out.known,
                "known": 0,
                "added_ids": [p.id for p in passages],
                "known_ids": [],
            }
        )


class SpaceUnknown(VectorReference):
    """Claims vectors but cannot say of which embedder and dimension."""

    def vector_space(self) -> tuple[str, int]:
        raise RuntimeError("no embedder configured")


CASES: dict[str, tuple[type[VectorReference], dict[str, str]]] = {
    "ignores the vectors it is given": (
        IgnoresGivenVectors,
        {
            "vectors.search": r"does not search the vectors it was given",
            "vectors.returned": r"differs from the one stored with its passage",
        },
    ),
    "returns other vectors than it stored": (
        ReturnsOtherVectors,
        {"vectors.returned": r"differs from the one stored with its passage by up to"},
    ),
    "never recognises a passage already stored": (
        AddsTwice,
        {
            c: r"adding the same 5 passages with vectors again reported 5 added"
            for c in VECTOR_CHECKS
        },
    ),
    "cannot say its vector space": (
        SpaceUnknown,
        {c: r"vector_space\(\) could not be read" for c in VECTOR_CHECKS},
    ),
}


def _card(cls: type[Any]) -> dict[str, Any]:
    def factory(ctx: BackendContext) -> Any:
        return cls()

    factory.__name__ = cls.__name__
    card = run_card(factory, settings=FAST, only=VECTOR_CHECKS)
    return {r.id: r for r in card.checks if r.id in VECTOR_CHECKS}


def test_the_vector_reference_passes_every_vector_check() -> None:
    results = _card(VectorReference)
    assert {i: r.status for i, r in results.items()} == dict.fromkeys(
        VECTOR_CHECKS, CheckStatus.PASSED
    ), {i: r.reason for i, r in results.items()}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_broken_backend_fails_exactly_its_checks(case: str) -> None:
    cls, expected = CASES[case]
    results = _card(cls)
    failed = {i for i, r in results.items() if r.status is CheckStatus.FAILED}
    assert failed == set(expected), {i: (r.status, r.reason) for i, r in results.items()}
    for check, pattern in expected.items():
        assert re.search(pattern, results[check].reason or ""), results[check].reason


def test_a_backend_without_the_claim_is_not_claimed() -> None:
    results = _card(ReferenceBackend)
    assert {r.status for r in results.values()} == {CheckStatus.NOT_CLAIMED}
    assert all(r.reason == "not claimed: vectors" for r in results.values())
