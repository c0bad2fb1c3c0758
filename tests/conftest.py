"""Shared test set-up: every test gets its own indexplug home, and nothing reaches a model hub."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

REPO = Path(__file__).resolve().parent.parent
SCIFACT = REPO.parent / "shared" / "data" / "beir" / "scifact"


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "indexplug-home"
    monkeypatch.setenv("INDEXPLUG_HOME", str(home))
    monkeypatch.delenv("INDEXPLUG_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    return home
