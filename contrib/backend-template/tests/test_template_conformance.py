"""Run the conformance kit against this backend: `pytest` in this folder."""

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
    GetConformance,
    IndexesConformance,
    KeysConformance,
    OperatorFiltersConformance,
    PersistenceConformance,
    ScanConformance,
)


class TestTemplateBackendConformance(
    BackendConformance,
    DeletionConformance,
    PersistenceConformance,
    ConcurrentWritersConformance,
    FiltersConformance,
    OperatorFiltersConformance,
    GetConformance,
    ScanConformance,
    IndexesConformance,
    DropConformance,
    KeysConformance,
):
    @pytest.fixture
    def backend_factory(self, tmp_path: Path) -> BackendFactory:
        return BackendFactory("template-backend", str(tmp_path))

    @pytest.fixture
    def backend(self, backend_factory: BackendFactory) -> Iterator[Guard]:
        guard = backend_factory()
        yield guard
        guard.close()
