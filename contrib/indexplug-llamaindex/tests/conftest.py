"""Backends the adapter is tested on: sqlite-fts5 (lexical), chroma embedded (dense, with
the hashing embedder, so nothing is fetched from a model hub) and, for the users' flows, a real
Elasticsearch node (BM25; started once per test session, only when an elastic test runs)."""

from __future__ import annotations

import os
from typing import Any

import indexplug
import pytest
from indexplug_elastic.testing.fixtures import (  # noqa: F401  (fixtures and a hook)
    _es_single_session,
    es_options,
    es_single,
    options_for,
    pytest_runtest_makereport,
)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

Backend = tuple[str, dict[str, Any]]
"""A backend's name and the options to open it with."""

BACKENDS = {
    "sqlite-fts5": {},
    "chroma": {"embedder": "hashing:default"},
}

FLOW_BACKENDS: dict[str, dict[str, Any]] = {
    "sqlite-fts5": {},
    "chroma": {"embedder": "hashing:default"},
    "elastic": {},
}
"""The backends the users' flows (test_llamaindex_flows.py) and the metadata round trips
(test_llamaindex_metadata.py) run on, with their options: every backend that keeps caller keys.
A store given ``embed_model=`` embeds with that model instead of the spec named here."""

VECTOR_BACKENDS: dict[str, dict[str, Any]] = {
    "chroma": {},
    "usearch": {},
    "elastic": {"embedder": "hashing:default", "mode": "knn"},
}
"""The backends the vector flows run on (test_llamaindex_vectors.py: query by embedding, MMR),
with their options: those that claim indexplug's ``vectors`` capability. Elastic runs
in kNN mode, opened with an embedder spec (the store's model replaces it)."""


@pytest.fixture(params=sorted(BACKENDS))
def guard(request, tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    """A guarded backend whose home is a fresh folder."""
    monkeypatch.setenv("INDEXPLUG_HOME", str(tmp_path))
    g = indexplug.open_backend(request.param, BACKENDS[request.param])
    yield g
    g.close()


@pytest.fixture(params=list(FLOW_BACKENDS))
def flow_backend(request: pytest.FixtureRequest) -> Backend:
    """Each backend of :data:`FLOW_BACKENDS` in turn: its name and options."""
    return request.param, options_for(request, request.param, FLOW_BACKENDS[request.param])


@pytest.fixture(params=list(VECTOR_BACKENDS))
def vector_backend(request: pytest.FixtureRequest) -> Backend:
    """Each backend of :data:`VECTOR_BACKENDS` in turn: its name and options."""
    return request.param, options_for(request, request.param, VECTOR_BACKENDS[request.param])
