"""The conformance kit against both modes of the chroma backend.

Embedded: a fresh home per test.  Server: the session's real ``chroma run``; the kit's outage
check stops that server and starts it again (same port, same data), so the recovery it checks
is recovery from a real server going away.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from chroma_helpers import FAST, server_options
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
    ScanConformance,
    SeparateRecordsConformance,
    VectorsConformance,
)
from indexplug_chroma.testing import ChromaServer


class TestChromaEmbeddedConformance(
    BackendConformance,
    DeletionConformance,
    FiltersConformance,
    OperatorFiltersConformance,
    GetConformance,
    ScanConformance,
    IndexesConformance,
    DropConformance,
    KeysConformance,
    VectorsConformance,
    PersistenceConformance,
    ConcurrentWritersConformance,
    SeparateRecordsConformance,
):
    @pytest.fixture
    def backend_factory(self, tmp_path: Path) -> BackendFactory:
        return BackendFactory("chroma", str(tmp_path / "chroma"), {"embedder": FAST})

    @pytest.fixture
    def backend(self, backend_factory: BackendFactory) -> Iterator[Guard]:
        guard = backend_factory()
        yield guard
        guard.close()


class TestChromaServerConformance(
    BackendConformance,
    DeletionConformance,
    FiltersConformance,
    OperatorFiltersConformance,
    GetConformance,
    ScanConformance,
    IndexesConformance,
    DropConformance,
    KeysConformance,
    VectorsConformance,
    PersistenceConformance,
    ConcurrentWritersConformance,
    OutageConformance,
):
    @pytest.fixture
    def backend_factory(self, server_up: ChromaServer, tmp_path: Path) -> BackendFactory:
        return BackendFactory("chroma", str(tmp_path / "chroma"), server_options(server_up))

    @pytest.fixture
    def backend(self, backend_factory: BackendFactory) -> Iterator[Guard]:
        guard = backend_factory()
        yield guard
        guard.close()

    @pytest.fixture
    def make_backend_unavailable(self, server_up: ChromaServer) -> Callable[[], None]:
        return server_up.stop

    @pytest.fixture
    def restore_backend(self, server_up: ChromaServer) -> Callable[[], None]:
        def restore() -> None:
            server_up.start()

        return restore
