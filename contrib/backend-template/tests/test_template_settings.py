"""The backend's settings: known ones take effect, anything else is refused naming the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from indexplug import InvalidOption, NoMatch, Passage, Searched
from indexplug.plugins import Registry
from indexplug_template_backend import plugin
from indexplug_template_backend.backend import BACKEND_NAME


def make(tmp_path: Path, options: dict[str, Any]) -> Any:
    registry = Registry(load_entrypoints=False)
    registry.register(plugin, name="template")
    return registry.backend(BACKEND_NAME, options, home=tmp_path)


@pytest.mark.parametrize(
    ("options", "option"),
    [
        ({"colour": "blue"}, "colour"),
        ({"min_overlap": 0}, "min_overlap"),
        ({"min_overlap": "two"}, "min_overlap"),
        ({"min_overlap": True}, "min_overlap"),
        ({"min_overlap": 1.5}, "min_overlap"),
    ],
)
def test_a_bad_setting_is_refused_naming_it(
    tmp_path: Path, options: dict[str, Any], option: str
) -> None:
    with pytest.raises(InvalidOption) as refused:
        make(tmp_path, options)
    assert refused.value.option == option and option in str(refused.value)
    assert refused.value.field == f"settings.{option}"


def test_min_overlap_takes_effect(tmp_path: Path) -> None:
    strict = make(tmp_path, {"min_overlap": "2"})
    strict.add("n", [Passage.create("otters hold hands", "mem://o")])
    assert isinstance(strict.search("n", "otters sleep"), NoMatch)
    assert isinstance(strict.search("n", "otters hold"), Searched)
    assert isinstance(make(tmp_path, {}).search("n", "otters sleep"), Searched)
