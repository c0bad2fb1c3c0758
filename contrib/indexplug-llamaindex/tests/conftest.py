"""Backends the adapter is tested on: sqlite-fts5 (lexical) and chroma embedded (dense, with
the hashing embedder, so nothing is fetched from a model hub)."""

from __future__ import annotations

import os

import indexplug
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

BACKENDS = {
    "sqlite-fts5": {},
    "chroma": {"embedder": "hashing:default"},
}


@pytest.fixture(params=sorted(BACKENDS))
def guard(request, tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    """A guarded backend whose home is a fresh folder."""
    monkeypatch.setenv("INDEXPLUG_HOME", str(tmp_path))
    g = indexplug.open_backend(request.param, BACKENDS[request.param])
    yield g
    g.close()
