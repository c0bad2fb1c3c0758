"""Hits the core built and checked as it built them (``CheckedHits``), answers built without
validation (``Searched.from_stored``), and the guard's handling of both."""

from __future__ import annotations

import copy
import json
import pickle
from typing import Any

import pytest
from indexplug import Guard, Hit, Passage, ScoreScale, Searched
from indexplug.construct import copied
from indexplug.outcomes import (
    CheckedHits,
    IndexFailed,
    hits_from_provenance,
    outcome_from_json,
)
from indexplug.passages import provenance_json
from test_guard import SCALE, Fake

PASSAGES = [Passage.create(f"passage number {n} about otters", f"mem://{n}") for n in range(5)]


def rows(scores: list[float], passages: list[Passage] = PASSAGES) -> list[tuple[Any, ...]]:
    return [(p.id, s, p.text, provenance_json(p)) for p, s in zip(passages, scores, strict=False)]


def answer(hits: Any, *, scale: ScoreScale = SCALE, searched: Any = 10) -> Searched:
    return Searched.from_stored(index="i", backend="", hits=hits, searched=searched, scale=scale)


class Counting(Guard):
    """A guard that counts the passages it checks one by one."""

    intact_calls = 0

    def _intact(self, p: Passage) -> bool:
        Counting.intact_calls += 1
        return super()._intact(p)


def test_the_builder_records_what_it_checked() -> None:
    hits = hits_from_provenance(rows([3.0, 2.0, 2.0, 1.0]), "test")
    assert type(hits) is CheckedHits and hits.scale == "test"
    assert hits.descending and not hits.ascending
    assert [h.rank for h in hits] == [1, 2, 3, 4]
    rising = hits_from_provenance(rows([1.0, 2.0]), "test")
    assert rising.ascending and not rising.descending
    for bad in (float("nan"), float("inf"), float("-inf")):
        odd = hits_from_provenance(rows([2.0, bad, 1.0]), "test")
        assert type(odd) is CheckedHits and not odd.descending and not odd.ascending


def test_checked_hits_cannot_be_changed_and_copies_are_plain_lists() -> None:
    hits = hits_from_provenance(rows([2.0, 1.0]), "test")
    other = hits[0]
    for change in (
        lambda: hits.append(other),
        lambda: hits.extend([other]),
        lambda: hits.insert(0, other),
        lambda: hits.pop(),
        lambda: hits.remove(other),
        lambda: hits.clear(),
        lambda: hits.sort(key=lambda h: h.rank),
        lambda: hits.reverse(),
        lambda: hits.__setitem__(0, other),
        lambda: hits.__delitem__(0),
        lambda: hits.__iadd__([other]),
        lambda: hits.__imul__(2),
        lambda: setattr(hits, "scale", "other"),
        lambda: setattr(hits, "descending", False),
        lambda: delattr(hits, "scale"),
    ):
        with pytest.raises(TypeError, match="read-only"):
            change()
    assert len(hits) == 2 and hits.scale == "test" and hits.descending
    mutable = list(hits)
    mutable.reverse()
    assert type(mutable) is list and mutable[0].rank == 2
    # what it records holds in this process only: a copy or a pickle is a plain list
    for back in (copy.copy(hits), copy.deepcopy(hits), pickle.loads(pickle.dumps(hits))):
        assert type(back) is list and back == hits
    assert type(hits[:1]) is list and type(hits + hits) is list


def test_an_answer_with_checked_hits_round_trips_through_json() -> None:
    out = answer(hits_from_provenance(rows([2.0, 1.0]), "test"))
    back = outcome_from_json(out.model_dump_json())
    assert back == out and type(back.hits) is list
    assert json.loads(out.model_dump_json())["hits"][0]["rank"] == 1


def test_the_guard_takes_the_builders_word_without_checking_hit_by_hit() -> None:
    hits = hits_from_provenance(rows([3.0, 2.0, 1.0]), "test")
    Counting.intact_calls = 0
    out = Counting(Fake(answer(hits))).search("i", "q", top_k=5)
    assert isinstance(out, Searched) and out.hits is hits and Counting.intact_calls == 0
    assert out.backend == "fake" and out.elapsed_ms is not None


@pytest.mark.parametrize(
    "scores, scale, reason",
    [
        ([1.0, 2.0], SCALE, "out of order"),
        ([2.0, float("nan")], SCALE, "non-finite"),
        ([2.0, 1.0], ScoreScale(name="test", higher_is_better=False), "out of order"),
    ],
)
def test_what_the_builder_could_not_vouch_for_is_checked_hit_by_hit(
    scores: list[float], scale: ScoreScale, reason: str
) -> None:
    class Declared(Fake):
        score_scale = scale

    out = Guard(Declared(answer(hits_from_provenance(rows(scores), "test"), scale=scale))).search(
        "i", "q"
    )
    assert isinstance(out, IndexFailed) and reason in out.reason


def test_lower_is_better_scores_rising_pass() -> None:
    scale = ScoreScale(name="test", higher_is_better=False)

    class Declared(Fake):
        score_scale = scale

    hits = hits_from_provenance(rows([1.0, 2.0, 2.0]), "test")
    out = Guard(Declared(answer(hits, scale=scale))).search("i", "q")
    assert isinstance(out, Searched) and out.hits is hits


def test_checked_hits_on_another_scale_are_refused() -> None:
    out = Guard(Fake(answer(hits_from_provenance(rows([2.0, 1.0]), "other")))).search("i", "q")
    assert isinstance(out, IndexFailed) and "on scale 'other'" in out.reason


def test_a_tampered_record_among_checked_ones_is_refused() -> None:
    good = rows([3.0, 2.0])
    p = PASSAGES[2]
    tampered = [*good, (p.id, 1.0, p.text + " and a lie", provenance_json(p))]
    hits = hits_from_provenance(tampered, "test")
    assert type(hits) is list
    out = Guard(Fake(answer(hits))).search("i", "q")
    assert isinstance(out, IndexFailed) and out.error_type == "IntegrityError"


def test_every_answer_the_guard_passes_on_has_read_only_hits() -> None:
    plain = [
        Hit(rank=1, score=2.0, score_scale="test", passage=PASSAGES[0]),
        Hit(rank=2, score=1.0, score_scale="test", passage=PASSAGES[1]),
    ]
    out = Guard(Fake(Searched(index="i", hits=plain, searched=5, scale=SCALE))).search("i", "q")
    assert isinstance(out, Searched) and type(out.hits) is CheckedHits
    assert out.hits == plain and out.hits.scale == "test" and out.hits.descending
    with pytest.raises(TypeError, match="read-only"):
        out.hits.append(plain[0])


@pytest.mark.parametrize(
    "hits, searched, scale, reason",
    [
        (tuple(hits_from_provenance(rows([2.0]), "test")), 5, SCALE, "of the wrong type"),
        (hits_from_provenance(rows([2.0]), "test"), "5", SCALE, "of the wrong type"),
        (hits_from_provenance(rows([2.0]), "test"), True, SCALE, "of the wrong type"),
        (hits_from_provenance(rows([2.0]), "test"), 5, "test", "of the wrong type"),
        ([PASSAGES[0]], 5, SCALE, "hit 1 is a Passage, not a Hit"),
        (
            [Hit.from_stored(rank=1, score="high", score_scale="test", passage=PASSAGES[0])],  # type: ignore[arg-type]
            5,
            SCALE,
            "could not be checked",
        ),
    ],
)
def test_an_unvalidated_answer_of_the_wrong_shape_is_a_violation_not_an_exception(
    hits: Any, searched: Any, scale: Any, reason: str
) -> None:
    out = Guard(Fake(answer(hits, searched=searched, scale=scale))).search("i", "q")
    assert isinstance(out, IndexFailed) and "contract violation" in out.reason
    assert reason in out.reason


def test_copied_is_model_copy_for_plain_models() -> None:
    out = answer(hits_from_provenance(rows([2.0, 1.0]), "test"))
    fast = copied(out, {"deadline_s": 2.0, "elapsed_ms": 1.5})
    slow = out.model_copy(update={"deadline_s": 2.0, "elapsed_ms": 1.5})
    assert fast == slow and fast.model_fields_set == slow.model_fields_set
    assert fast.hits is out.hits and out.deadline_s is None
    plain = Searched(index="i", hits=list(out.hits), searched=5, scale=SCALE)
    stamped = copied(plain, {"backend": "b"})
    assert stamped.backend == "b" and "backend" in stamped.model_fields_set
    assert "backend" not in plain.model_fields_set
