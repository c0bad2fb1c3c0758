"""Shared set-up of the orchestration tests: a folder of documents, config files and the
test-only backends (the schema check lives in orchestration_support.py)."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from indexplug.plugins import reset_registry
from orchestration_plugins import register

OTTERS = "\n\n".join(
    f"Paragraph {i} about otters and rivers. "
    + "Otters hold hands while they sleep so they do not drift apart. " * 6
    for i in range(10)
)


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "otters.md").write_text(OTTERS)
    (root / "cats.md").write_text("Cats purr when they are content and sometimes when hurt.\n")
    (root / "kettle.md").write_text("Descale the kettle with vinegar once a month.\n")
    return root


@pytest.fixture
def test_backends() -> Iterator[None]:
    """The test-only backends (down, slow, broken) in a fresh process-wide registry."""
    reset_registry()
    register()
    yield
    reset_registry()


@pytest.fixture
def write_config(tmp_path: Path) -> Callable[[str, str], Path]:
    def write(text: str, name: str = "indexplug.toml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text))
        return path

    return write
