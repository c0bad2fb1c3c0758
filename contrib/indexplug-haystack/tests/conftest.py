"""Every test gets its own indexplug home (no test sees another's indexes); the backends the
users' flows and the vector flows run on are named here (a real Elasticsearch node among them,
started once per test session, only when an elastic test runs)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

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
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")

Backend = tuple[str, dict[str, Any]]
"""A backend's name and the options to open it with."""

FLOW_BACKENDS: dict[str, dict[str, Any]] = {
    "sqlite-fts5": {},
    "chroma": {"embedder": "hashing:default"},
    "elastic": {},
}
"""The backends the users' flows (test_flows.py, test_ingestion.py) and the metadata round trips
(test_metadata_kinds.py) run on, with their options: every backend that keeps caller keys.  A
store given an embedder pair embeds with it instead of the spec named here."""

VECTOR_BACKENDS: dict[str, dict[str, Any]] = {
    "chroma": {"embedder": "hashing:default"},
    "elastic": {"embedder": "hashing:default", "mode": "knn"},
}
"""The backends the vector flows run on (test_embedding_retriever.py), with their options: those
that claim indexplug's ``vectors`` capability and keep caller keys (usearch keeps none, which the
document store needs). Elastic runs in kNN mode,
opened with an embedder spec (the store's embedder pair replaces it)."""


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "indexplug-home"
    home.mkdir()
    monkeypatch.setenv("INDEXPLUG_HOME", str(home))
    return home


@pytest.fixture(params=list(FLOW_BACKENDS))
def flow_backend(request: pytest.FixtureRequest) -> Backend:
    """Each backend of :data:`FLOW_BACKENDS` in turn: its name and options."""
    return request.param, options_for(request, request.param, FLOW_BACKENDS[request.param])


@pytest.fixture(params=list(VECTOR_BACKENDS))
def vector_backend(request: pytest.FixtureRequest) -> Backend:
    """Each backend of :data:`VECTOR_BACKENDS` in turn: its name and options."""
    return request.param, options_for(request, request.param, VECTOR_BACKENDS[request.param])
