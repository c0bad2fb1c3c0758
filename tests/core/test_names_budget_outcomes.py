from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from indexplug import InvalidIndexName, validate_index_name
from indexplug.budget import effective_max_bytes, over_budget
from indexplug.outcomes import (
    EXIT_CODES,
    Indexed,
    IndexEmpty,
    IndexFailed,
    IndexTimeout,
    IndexUnavailable,
    NoMatch,
    OverBudget,
    Removed,
    ScoreScale,
    Searched,
    outcome_from_json,
)


@pytest.mark.parametrize("name", ["docs", "a", "my-index_2", "0abc", "x" * 64])
def test_good_names(name: str) -> None:
    assert validate_index_name(name) == name


@pytest.mark.parametrize(
    "name",
    [
        "",
        "../etc",
        "a/b",
        "a\\b",
        "a\x00b",
        "Docs",
        ".hidden",
        "-x",
        "x" * 65,
        "/abs",
        "é",
        3,
        None,
    ],
)
def test_bad_names_raise_a_typed_error(name: object) -> None:
    with pytest.raises(InvalidIndexName) as info:
        validate_index_name(name)
    assert info.value.field == "index"


@given(st.text(max_size=100))
def test_a_valid_name_is_never_a_path(name: str) -> None:
    try:
        validate_index_name(name)
    except InvalidIndexName:
        return
    assert "/" not in name and "\\" not in name and ".." not in name and "\x00" not in name


@given(st.one_of(st.none(), st.integers(1, 10**9)), st.one_of(st.none(), st.integers(1, 10**9)))
def test_a_later_call_cannot_raise_the_budget(stored: int | None, requested: int | None) -> None:
    eff = effective_max_bytes(stored, requested)
    if stored is not None:
        assert eff is not None and eff <= stored
    if requested is not None:
        assert eff is not None and eff <= requested


def test_over_budget_reports_both_numbers_and_fails_closed() -> None:
    out = over_budget("i", "b", needed=200, max_bytes=100, check="projected")
    assert isinstance(out, OverBudget) and out.needed_bytes == 200 and out.max_bytes == 100
    assert over_budget("i", "b", needed=100, max_bytes=100, check="measured") is None
    unreadable = over_budget("i", "b", needed=None, max_bytes=100, check="measured")
    assert unreadable is not None and unreadable.check == "unreadable"


SCALE = ScoreScale(name="s")


@pytest.mark.parametrize(
    "outcome",
    [
        NoMatch(index="i", searched=3),
        IndexEmpty(index="i"),
        IndexFailed(index="i", reason="r"),
        IndexTimeout(index="i", deadline_s=1.0),
        IndexUnavailable(index="i", reason="down"),
        OverBudget(index="i", max_bytes=1, needed_bytes=2, check="projected"),
        Searched(index="i", hits=[], searched=0, scale=SCALE),
    ],
)
def test_outcomes_round_trip_through_json_with_a_stable_code(outcome: object) -> None:
    back = outcome_from_json(outcome.model_dump_json())  # type: ignore[attr-defined]
    assert back == outcome
    assert back.code in EXIT_CODES
    assert back.message and back.message != back.code


def test_no_match_and_empty_have_different_exit_codes() -> None:
    assert (
        len(
            {
                EXIT_CODES[c]
                for c in (
                    "SEARCHED",
                    "NO_MATCH",
                    "INDEX_EMPTY",
                    "INDEX_FAILED",
                    "INDEX_TIMEOUT",
                    "INDEX_UNAVAILABLE",
                )
            }
        )
        == 6
    )


@given(st.lists(st.text(min_size=1, max_size=8), unique=True, max_size=20), st.data())
def test_a_batch_outcome_splits_the_batch_into_added_and_known(
    ids: list[str], data: st.DataObject
) -> None:
    added = data.draw(st.lists(st.sampled_from(ids), unique=True) if ids else st.just([]))
    out = Indexed.of_batch(index="i", backend="b", ids=ids, added_ids=added, bytes_used=7)
    assert out.added + out.known == len(ids) and out.added_ids == added
    assert out.known_ids == [i for i in ids if i not in added]  # the batch's order
    assert set(out.added_ids).isdisjoint(out.known_ids) and out.bytes_used == 7


@given(st.lists(st.text(min_size=1, max_size=8), unique=True, max_size=20), st.data())
def test_a_removal_outcome_splits_the_ids_into_removed_and_missing(
    ids: list[str], data: st.DataObject
) -> None:
    there = data.draw(st.sets(st.sampled_from(ids)) if ids else st.just(set()))
    out = Removed.of_batch(index="i", backend="b", ids=ids, removed_ids=list(there))
    assert out.removed == len(there) and out.removed + len(out.missing_ids) == len(ids)
    assert out.removed_ids == [i for i in ids if i in there]  # the batch's order
    assert out.missing_ids == [i for i in ids if i not in there]
