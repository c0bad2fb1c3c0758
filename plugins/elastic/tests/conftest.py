"""Real Elasticsearch for the elastic backend's tests: one single node and one 2-node cluster.

Both are started once per test session by the fixtures of ``indexplug_elastic.testing.fixtures``
(``indexplug_elastic.testing.server`` fetches the integ-test-zip from Maven Central into
``~/.cache/indexplug`` on first use, runs the nodes as an unprivileged user when we are root, on
127.0.0.1 with 512 MB of heap, and waits for green).

Tests never share an index: every backend a test makes gets its own index prefix, and its
indices are deleted when the test ends, so the long-lived servers stay small.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from indexplug import Guard
from indexplug.plugins import get_registry
from indexplug_elastic.backend import ElasticBackend
from indexplug_elastic.testing.fixtures import (  # noqa: F401  (fixtures and a hook)
    _es_pair_session,
    _es_single_session,
    delete_prefixed,
    es_cleanup,
    es_pair,
    es_single,
    pytest_runtest_makereport,
)
from indexplug_elastic.testing.server import EsCluster

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test its own indexplug home (the embedding cache lives there)."""
    monkeypatch.setenv("INDEXPLUG_HOME", str(tmp_path / "indexplug-home"))
    monkeypatch.delenv("INDEXPLUG_CONFIG", raising=False)


PATIENT_S = 60.0
"""Deadline of ops a test makes as set-up, not as the thing it checks: the shared CI machine
can be slow (a cold JVM creating an index under load takes seconds), and a set-up op that
times out would fail a test for the wrong reason."""


class PatientGuard(Guard):
    """A guard whose ops default to :data:`PATIENT_S` instead of 10 s (an explicit
    ``deadline_s`` still wins: deadline behaviour is tested with explicit ones)."""

    def add(self, *args: Any, deadline_s: float | None = PATIENT_S, **kw: Any) -> Any:
        return super().add(*args, deadline_s=deadline_s, **kw)

    def search(self, *args: Any, deadline_s: float | None = PATIENT_S, **kw: Any) -> Any:
        return super().search(*args, deadline_s=deadline_s, **kw)

    def remove(self, *args: Any, deadline_s: float | None = PATIENT_S, **kw: Any) -> Any:
        return super().remove(*args, deadline_s=deadline_s, **kw)

    def status(self, *args: Any, deadline_s: float | None = PATIENT_S, **kw: Any) -> Any:
        return super().status(*args, deadline_s=deadline_s, **kw)

    def call_extra(
        self, op: str, index: str, deadline_s: float | None = PATIENT_S, **kw: Any
    ) -> Any:
        return super().call_extra(op, index, deadline_s=deadline_s, **kw)


@pytest.fixture
def patient_guard() -> type[Guard]:
    """:class:`PatientGuard`, for test modules (which cannot import this conftest)."""
    return PatientGuard


BackendMaker = Callable[..., Guard]


def _maker(cluster_fixture: str) -> Any:
    @pytest.fixture
    def make(request: pytest.FixtureRequest) -> Iterator[BackendMaker]:
        cluster: EsCluster = request.getfixturevalue(cluster_fixture)
        made: list[tuple[Guard, str]] = []

        def make_backend(**options: Any) -> Guard:
            prefix = options.pop("prefix", None) or f"t{uuid.uuid4().hex[:10]}-"
            opts = {"hosts": cluster.urls, "prefix": prefix, **options}
            guard = PatientGuard(ElasticBackend(opts, embedder_factory=get_registry().embedder))
            made.append((guard, prefix))
            return guard

        yield make_backend
        for guard, prefix in made:
            guard.close()
            delete_prefixed(cluster, prefix)

    return make


make_single = _maker("es_single")
make_pair = _maker("es_pair")
