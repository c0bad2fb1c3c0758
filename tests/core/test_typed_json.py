"""indexplug.typed_json: nested, dated and tupled metadata values kept exactly as text."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from indexplug.typed_json import UnstorableValue, dumps, is_plain, loads

UTC2 = dt.timezone(dt.timedelta(hours=2))


@pytest.mark.parametrize(
    "value",
    [
        None,
        "text",
        3,
        2.5,
        True,
        [1, "a", None],
        {"a": {"b": [1, {"c": "d"}]}},
        dt.datetime(2024, 5, 1, 12, 30, 15, 123456),
        dt.datetime(2024, 5, 1, 12, 30, tzinfo=UTC2),
        dt.date(2024, 5, 1),
        dt.time(8, 15, 1),
        (1, 2),
        {"span": (3, (4, dt.date(2020, 1, 2))), "when": [dt.datetime(2021, 1, 1)]},
        {"t": ({"inner": (1,)},)},
    ],
)
def test_a_value_comes_back_equal_and_of_the_same_types(value: object) -> None:
    back = loads(dumps(value))
    assert back == value
    assert repr(back) == repr(value)  # the same types all the way down (tuples, dates...)


def test_plain_json_needs_no_tags() -> None:
    assert is_plain({"a": [1, {"b": None}]})
    assert not is_plain({"a": (1, 2)})
    assert not is_plain(dt.date(2020, 1, 1))
    assert "t" not in json.loads(dumps({"a": [1]}))


@pytest.mark.parametrize(
    ("value", "where"),
    [
        ({"a": {1, 2}}, "meta.a"),
        ({"a": {"b": b"x"}}, "meta.a.b"),
        ({"a": [1, float("nan")]}, "meta.a[1]"),
        ({"a": {1: "x"}}, "meta.a"),
        ({"a": object()}, "meta.a"),
        ({"a": "\ud800"}, "meta.a"),
    ],
)
def test_what_is_not_json_is_refused_naming_where(value: object, where: str) -> None:
    with pytest.raises(UnstorableValue) as err:
        dumps(value, "meta")
    assert err.value.where == where
    assert str(err.value).startswith(where)


def test_non_finite_numbers_only_when_allowed() -> None:
    back = loads(dumps({"a": [float("inf"), float("-inf")]}, allow_nan=True))
    assert back == {"a": [float("inf"), float("-inf")]}
    with pytest.raises(UnstorableValue, match="inf"):
        dumps({"a": float("inf")})


def test_too_deep_is_refused() -> None:
    deep: list[object] = []
    for _ in range(150):
        deep = [deep]
    with pytest.raises(UnstorableValue, match="deeper"):
        dumps(deep)


@pytest.mark.parametrize("text", ["[]", '{"x": 1}', '{"v": 1, "t": [[[], "set"]]}'])
def test_text_it_did_not_write_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        loads(text)
