"""Every test gets its own indexplug home; coroutine tests run under pytest-asyncio; the
backends the users' flows and the vector flows run on are named here (a real Elasticsearch node
among them, started once per test session, only when an elastic test runs).

The standard suites of ``langchain-tests`` write their async tests as plain ``async def``
(LangChain's own repositories run pytest-asyncio in ``auto`` mode); the repository's pytest
configuration is shared by every env, so the ``asyncio`` mark is added here, to the coroutine
tests of this folder only (this conftest's hooks apply to this folder).
"""

from __future__ import annotations

import inspect
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
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

Backend = tuple[str, dict[str, Any]]
"""A backend's name and the options to open it with."""

FLOW_BACKENDS: dict[str, dict[str, Any]] = {
    "sqlite-fts5": {},
    "chroma": {"embedder": "hashing:default"},
    "elastic": {},
}
"""The backends the users' flows (test_langchain_flows.py, test_langchain_indexing.py) and the
metadata round trips (test_langchain_metadata.py) run on, with their options: every backend that
keeps caller keys.  A store given ``embedding=`` embeds
with that model instead of the spec named here."""

VECTOR_BACKENDS: dict[str, dict[str, Any]] = {
    "chroma": {},
    "usearch": {},
    "elastic": {"embedder": "hashing:default", "mode": "knn"},
}
"""The backends the vector flows run on (test_langchain_vectors.py: search by vector, MMR),
with their options: those that claim indexplug's ``vectors`` capability. Elastic runs
in kNN mode, opened with an embedder spec (the store's model replaces it)."""


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(
    collector: pytest.Module | pytest.Class, name: str, obj: object
) -> list[pytest.Function] | None:
    """A coroutine test of langchain-tests' standard suites as a test item marked ``asyncio``
    (pytest-asyncio then runs it); every other item is collected as usual (this folder's own
    coroutine tests carry the mark themselves)."""
    if (
        inspect.iscoroutinefunction(obj)
        and str(getattr(obj, "__module__", "")).startswith("langchain_tests.")
        and collector.istestfunction(obj, name)
    ):
        item = pytest.Function.from_parent(collector, name=name)
        item.add_marker(pytest.mark.asyncio)
        return [item]
    return None


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "indexplug-home"
    home.mkdir()
    monkeypatch.setenv("INDEXPLUG_HOME", str(home))
    monkeypatch.setenv("ANONYMIZED_TELEMETRY", "False")
    return home


@pytest.fixture(params=list(FLOW_BACKENDS))
def flow_backend(request: pytest.FixtureRequest) -> Backend:
    """Each backend of :data:`FLOW_BACKENDS` in turn: its name and options."""
    return request.param, options_for(request, request.param, FLOW_BACKENDS[request.param])


@pytest.fixture(params=list(VECTOR_BACKENDS))
def vector_backend(request: pytest.FixtureRequest) -> Backend:
    """Each backend of :data:`VECTOR_BACKENDS` in turn: its name and options."""
    return request.param, options_for(request, request.param, VECTOR_BACKENDS[request.param])
