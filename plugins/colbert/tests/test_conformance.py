"""The conformance kit against the native engine with the hashing embedder."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from indexplug import Guard, get_registry
from indexplug.testing import (
    BackendConformance,
    BackendFactory,
    ConcurrentWritersConformance,
    DeletionConformance,
    DropConformance,
    FiltersConformance,
    GetConformance,
    IndexesConformance,
    KeysConformance,
    MultiprocessWritersConformance,
    OperatorFiltersConformance,
    PersistenceConformance,
    ScanConformance,
    SeparateRecordsConformance,
)
from indexplug_colbert import ColbertBackend

OPTIONS = {"engine": "native", "embedder": "hashing:default"}


class TestColbertNativeConformance(
    BackendConformance,
    DeletionConformance,
    DropConformance,
    FiltersConformance,
    GetConformance,
    IndexesConformance,
    KeysConformance,
    OperatorFiltersConformance,
    PersistenceConformance,
    ScanConformance,
    ConcurrentWritersConformance,
    MultiprocessWritersConformance,
    SeparateRecordsConformance,
):
    @pytest.fixture
    def backend(self, tmp_path: Path) -> Iterator[Guard]:
        guard = Guard(ColbertBackend(tmp_path / "home", OPTIONS, get_registry().embedder))
        yield guard
        guard.close()

    @pytest.fixture
    def backend_factory(self, tmp_path: Path) -> BackendFactory:
        return BackendFactory("colbert", str(tmp_path / "home"), OPTIONS)
