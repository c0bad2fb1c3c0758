"""A setting colbert refuses is an ``InvalidOption`` naming it (a usage exit on the command
line, ``BAD_REQUEST`` over invoke), never an untyped error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from indexplug import InvalidOption
from indexplug_colbert import ColbertBackend


@pytest.mark.parametrize(
    ("options", "option"),
    [
        ({"engine": "pylate"}, "engine"),
        ({"fallback": "bm25"}, "fallback"),
        ({"embedder": "no-colon"}, "embedder"),
        ({"nprobes": 4}, "nprobes"),
        ({"max_segments": 4}, "max_segments"),
        ({"candidates": 0}, "candidates"),
        ({"candidates": True}, "candidates"),
        ({"pooled_weight": "heavy"}, "pooled_weight"),
        ({"centroids_per_sqrt": "many"}, "centroids_per_sqrt"),  # was a bare ValueError
    ],
)
def test_a_bad_setting_is_invalid_option_naming_it(
    tmp_path: Path, options: dict[str, Any], option: str
) -> None:
    with pytest.raises(InvalidOption) as refused:
        ColbertBackend(tmp_path, options)
    assert refused.value.option == option and option in str(refused.value)
