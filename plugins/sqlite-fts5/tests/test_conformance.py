"""sqlite-fts5 against the conformance kit: every check it claims must pass.

It claims filters (every operator of the filter language, served in SQL), get, scan, indexes,
drop, caller keys, deletion, persistence, concurrent and multi-process writers and separate
records (rows behind an external-content full-text index); it has the ``tamper``,
``tamper_record`` and ``delete_rows`` hooks; it is embedded (no server, no outage hooks), so
``availability.outage`` is reported as not claimed.
"""

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
    MultiprocessWritersConformance,
    OperatorFiltersConformance,
    PersistenceConformance,
    ScanConformance,
    SeparateRecordsConformance,
)
from indexplug_sqlite_fts5 import SqliteFts5Backend


class TestSqliteFts5Conformance(
    BackendConformance,
    DeletionConformance,
    FiltersConformance,
    OperatorFiltersConformance,
    GetConformance,
    ScanConformance,
    IndexesConformance,
    DropConformance,
    KeysConformance,
    PersistenceConformance,
    ConcurrentWritersConformance,
    MultiprocessWritersConformance,
    SeparateRecordsConformance,
):
    @pytest.fixture
    def backend(self, tmp_path: Path) -> Iterator[Guard]:
        guard = Guard(SqliteFts5Backend(tmp_path))
        yield guard
        guard.close()

    @pytest.fixture
    def backend_factory(self, tmp_path: Path) -> BackendFactory:
        # Another instance on the same files, by its registered name: picklable, so the
        # multi-process check can open one in each writer process; also used to reopen.
        return BackendFactory("sqlite-fts5", str(tmp_path))
