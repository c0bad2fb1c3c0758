"""The backend conformance kit: one list of checks, run by pytest or as a report card.

* :class:`BackendConformance`: the pytest base class an author subclasses (needs pytest, the
  ``indexplug[testing]`` extra), with a mixin per claimed capability
  (:class:`FiltersConformance`, :class:`PersistenceConformance`, ...);
* :func:`run_card` / :func:`conformance_command`: run the checks against an installed backend
  and print or return a :class:`ReportCard` (``indexplug conformance BACKEND``);
* :class:`BackendFactory`: opens another instance of a backend on the same storage
  (picklable; for reopening and the multi-process check);
* :class:`ReferenceBackend`: a small, correct in-memory backend, the kit's yardstick and a
  worked example for authors;
* :data:`CHECKS`: every check, with a stable id, shared by both runners.

Names are loaded on first use: the pytest plugin (``indexplug.testing.plugin``) is imported
into every pytest session where indexplug is installed and must not pull in the whole kit.
See ``docs/writing-a-backend.md``.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from indexplug.testing.card import (
        BackendFactory,
        ReportCard,
        Summary,
        conformance_command,
        print_card,
        run_card,
    )
    from indexplug.testing.checks import (
        CHECKS,
        Check,
        CheckFailed,
        CheckResult,
        CheckStatus,
        KitSettings,
        Subject,
        check_ids,
        run_check,
    )
    from indexplug.testing.kit import (
        BackendConformance,
        ConcurrentWritersConformance,
        DeletionConformance,
        DropConformance,
        FiltersConformance,
        GetConformance,
        IndexesConformance,
        KeysConformance,
        MultiprocessWritersConformance,
        OperatorFiltersConformance,
        OutageConformance,
        PersistenceConformance,
        ScanConformance,
        SeparateRecordsConformance,
        VectorsConformance,
    )
    from indexplug.testing.reference import ReferenceBackend

_WHERE = {
    "BackendFactory": "card",
    "ReportCard": "card",
    "Summary": "card",
    "conformance_command": "card",
    "print_card": "card",
    "run_card": "card",
    "CHECKS": "checks",
    "Check": "checks",
    "CheckFailed": "checks",
    "CheckResult": "checks",
    "CheckStatus": "checks",
    "KitSettings": "checks",
    "Subject": "checks",
    "check_ids": "checks",
    "run_check": "checks",
    "BackendConformance": "kit",
    "ConcurrentWritersConformance": "kit",
    "DeletionConformance": "kit",
    "DropConformance": "kit",
    "FiltersConformance": "kit",
    "GetConformance": "kit",
    "IndexesConformance": "kit",
    "KeysConformance": "kit",
    "VectorsConformance": "kit",
    "MultiprocessWritersConformance": "kit",
    "OperatorFiltersConformance": "kit",
    "OutageConformance": "kit",
    "PersistenceConformance": "kit",
    "ScanConformance": "kit",
    "SeparateRecordsConformance": "kit",
    "ReferenceBackend": "reference",
}

__all__ = [
    "CHECKS",
    "BackendConformance",
    "BackendFactory",
    "Check",
    "CheckFailed",
    "CheckResult",
    "CheckStatus",
    "ConcurrentWritersConformance",
    "DeletionConformance",
    "DropConformance",
    "FiltersConformance",
    "GetConformance",
    "IndexesConformance",
    "KeysConformance",
    "KitSettings",
    "MultiprocessWritersConformance",
    "OperatorFiltersConformance",
    "OutageConformance",
    "PersistenceConformance",
    "ReferenceBackend",
    "ReportCard",
    "ScanConformance",
    "SeparateRecordsConformance",
    "Subject",
    "Summary",
    "VectorsConformance",
    "check_ids",
    "conformance_command",
    "print_card",
    "run_card",
    "run_check",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'indexplug.testing' has no attribute {name!r}")
    value = getattr(import_module(f"indexplug.testing.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])
