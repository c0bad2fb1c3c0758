"""A setting chroma refuses is an ``InvalidOption`` naming it (a usage exit on the command line,
``BAD_REQUEST`` over invoke), never an untyped error."""

from __future__ import annotations

from typing import Any

import pytest
from indexplug import InvalidOption
from indexplug_chroma.settings import ChromaSettings


@pytest.mark.parametrize(
    ("options", "option"),
    [
        ({"mdoe": "server"}, "mdoe"),
        ({"mode": "cloud"}, "mode"),
        ({"port": 70_000}, "port"),
        ({"port": float("inf")}, "port"),  # was an OverflowError from int(inf)
        ({"timeout_s": "nan"}, "timeout_s"),  # NaN passed "<= 0" and was taken
        ({"count_ttl_s": float("nan")}, "count_ttl_s"),
        ({"ssl": "maybe"}, "ssl"),
        ({"embedder": "no-colon"}, "embedder"),
    ],
)
def test_a_bad_setting_is_invalid_option_naming_it(options: dict[str, Any], option: str) -> None:
    with pytest.raises(InvalidOption) as refused:
        ChromaSettings.from_options(options)
    assert refused.value.option == option and option in str(refused.value)
