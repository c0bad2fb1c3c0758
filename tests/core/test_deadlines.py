"""Deadlines take only a real, finite, positive number of seconds: anything else is a caller's
mistake answered with a typed error naming ``deadline_s``, never a silent conversion."""

from __future__ import annotations

import math

import pytest
from indexplug import Guard
from indexplug.deadlines import DEFAULT_DEADLINE_S, MAX_DEADLINE_S, Deadline
from indexplug.errors import InvalidRequest
from indexplug.testing.reference import ReferenceBackend


@pytest.mark.parametrize(
    "bad", ["5", True, False, b"5", [5], math.inf, -math.inf, math.nan, 0, 0.0, -1, 1e12]
)
def test_anything_but_a_positive_finite_number_is_refused(bad: object) -> None:
    with pytest.raises(InvalidRequest) as err:
        Deadline.after(bad)  # type: ignore[arg-type]
    assert err.value.field == "deadline_s"


@pytest.mark.parametrize("good", [0.001, 2, 2.5, MAX_DEADLINE_S])
def test_a_number_of_seconds_is_taken_as_given(good: float) -> None:
    d = Deadline.after(good)
    assert d.seconds == float(good) and 0 < d.remaining() <= good


def test_none_is_the_default() -> None:
    assert Deadline.after(None).seconds == DEFAULT_DEADLINE_S


def test_the_guard_refuses_a_string_deadline_before_calling_the_backend() -> None:
    g = Guard(ReferenceBackend())
    with pytest.raises(InvalidRequest) as err:
        g.search("docs", "fox", deadline_s="5")  # type: ignore[arg-type]
    assert err.value.field == "deadline_s"
