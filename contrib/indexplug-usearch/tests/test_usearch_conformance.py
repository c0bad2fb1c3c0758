"""The usearch backend certified by the same kit as indexplug's own backends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from indexplug import Guard
from indexplug.testing import (
    BackendConformance,
    BackendFactory,
    ConcurrentWritersConformance,
    DeletionConformance,
    DropConformance,
    FiltersConformance,
    PersistenceConformance,
    SeparateRecordsConformance,
    VectorsConformance,
)


class TestUsearchConformance(
    BackendConformance,
    DeletionConformance,
    DropConformance,
    FiltersConformance,
    PersistenceConformance,
    ConcurrentWritersConformance,
    SeparateRecordsConformance,
    VectorsConformance,
):
    @pytest.fixture
    def backend_factory(self, tmp_path: Path) -> BackendFactory:
        return BackendFactory("usearch", str(tmp_path), {"embedder": "hashing:default"})

    @pytest.fixture
    def backend(self, backend_factory: BackendFactory) -> Iterator[Guard]:
        guard = backend_factory()
        yield guard
        guard.close()
