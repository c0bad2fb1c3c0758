"""The pytest base class, used the way a backend author uses it, on the reference backend."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import FAST
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
    OutageConformance,
    PersistenceConformance,
    ReferenceBackend,
    ScanConformance,
    SeparateRecordsConformance,
)
from indexplug.testing.reference import _factory


class TestReferenceConformance(
    BackendConformance,
    DeletionConformance,
    FiltersConformance,
    PersistenceConformance,
    ConcurrentWritersConformance,
    OutageConformance,
    SeparateRecordsConformance,
    GetConformance,
    ScanConformance,
    IndexesConformance,
    DropConformance,
    KeysConformance,
    OperatorFiltersConformance,
):
    """Persisted to ``tmp_path``: every check applies but the multi-process one."""

    conformance_settings = FAST

    @pytest.fixture
    def backend(self, tmp_path: Path) -> Iterator[Guard]:
        guard = Guard(ReferenceBackend(tmp_path))
        yield guard
        guard.close()

    @pytest.fixture
    def backend_factory(self, tmp_path: Path) -> BackendFactory:
        return BackendFactory(_factory, str(tmp_path))


class TestInMemoryReferenceConformance(
    BackendConformance,
    DeletionConformance,
    FiltersConformance,
    ConcurrentWritersConformance,
    OutageConformance,
    SeparateRecordsConformance,
    GetConformance,
    ScanConformance,
    IndexesConformance,
    DropConformance,
    KeysConformance,
    OperatorFiltersConformance,
):
    """In memory, given bare (unguarded): the kit wraps it; persistence is not claimed."""

    conformance_settings = FAST

    @pytest.fixture
    def backend(self) -> ReferenceBackend:
        return ReferenceBackend()
