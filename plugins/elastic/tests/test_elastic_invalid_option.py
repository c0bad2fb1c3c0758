"""A setting elastic refuses is an ``InvalidOption`` naming it (a usage exit on the command
line, ``BAD_REQUEST`` over invoke), never an untyped error."""

from __future__ import annotations

from typing import Any

import pytest
from indexplug import InvalidOption
from indexplug_elastic.options import parse_options


@pytest.mark.parametrize(
    ("options", "option"),
    [
        ({"colour": "blue"}, "colour"),
        ({"shards": 0}, "shards"),
        ({"hosts": ["localhost:9200"]}, "hosts"),
        ({"mode": "knn"}, None),  # a combination (knn without an embedder): no one key
    ],
)
def test_a_bad_setting_is_invalid_option_naming_it(
    options: dict[str, Any], option: str | None
) -> None:
    with pytest.raises(InvalidOption, match="invalid elastic option") as refused:
        parse_options(options)
    assert refused.value.option == option
    assert refused.value.field == (f"settings.{option}" if option else "settings")
