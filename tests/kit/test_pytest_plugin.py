"""The pytest side: a check of an unclaimed capability is not collected (its mixin is left
out) yet shows NOT_CLAIMED on the card, a class must test exactly what its backend claims,
failures carry the kit's reason, and ``--indexplug-card`` writes the same card the command
prints."""

from __future__ import annotations

import json

import pytest
from indexplug.testing import CHECKS

_MODULE = """
import pytest
from indexplug import Guard
from indexplug.testing import (
    BackendConformance, ConcurrentWritersConformance, DeletionConformance, DropConformance,
    FiltersConformance, GetConformance, IndexesConformance, KeysConformance, KitSettings,
    OperatorFiltersConformance, OutageConformance, PersistenceConformance, ReferenceBackend,
    ScanConformance, SeparateRecordsConformance,
)

DATA = (GetConformance, ScanConformance, IndexesConformance, DropConformance, KeysConformance,
        OperatorFiltersConformance)
IN_MEMORY = (DeletionConformance, FiltersConformance, ConcurrentWritersConformance,
             OutageConformance, SeparateRecordsConformance, *DATA)

SMALL = KitSettings(scale_passages=200, scale_batch=100, threads=3, batches_per_thread=3,
                    huge_passage_chars=20_000)


class MislabelsEmpty(ReferenceBackend):
    def search(self, index, query, **kw):
        out = super().search(index, query, **kw)
        if out.code == "INDEX_EMPTY":
            from indexplug import NoMatch
            return NoMatch(index=index, backend=self.name, searched=0)
        return out


class TestInMemory(BackendConformance, *IN_MEMORY):
    conformance_settings = SMALL

    @pytest.fixture
    def backend(self):
        guard = Guard(ReferenceBackend())
        yield guard
        guard.close()


class TestBroken(BackendConformance, *IN_MEMORY):
    conformance_settings = SMALL

    @pytest.fixture
    def backend(self):
        backend = MislabelsEmpty()
        backend.name = "mislabels-empty"
        return Guard(backend)


class TestForgetsAMixin(BackendConformance, DeletionConformance, ConcurrentWritersConformance,
                        OutageConformance, SeparateRecordsConformance, *DATA):
    # its backend claims filters, but the filter check is not in the class
    conformance_settings = SMALL

    @pytest.fixture
    def backend(self):
        backend = ReferenceBackend()
        backend.name = "forgets-a-mixin"
        return backend


class TestTestsAnUnclaimedCapability(BackendConformance, *IN_MEMORY, PersistenceConformance):
    # in memory, so it does not claim persistence, which the class tests
    conformance_settings = SMALL

    @pytest.fixture
    def backend(self):
        backend = ReferenceBackend()
        backend.name = "overreaches"
        return backend
"""


def test_kit_through_pytest(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_kit=_MODULE)
    cards = pytester.path / "cards"
    result = pytester.runpytest_inprocess(
        "-rs", "-p", "no:cacheprovider", f"--indexplug-card={cards}"
    )
    # four classes: the broken one fails search.empty_index; the other two fail the check
    # that their mixins match their claims (and the unclaimed one fails the check it added)
    outcomes = result.parseoutcomes()
    assert outcomes["failed"] == 4 and "skipped" not in outcomes
    result.stdout.fnmatch_lines(
        [
            "*TestBroken.test_search_empty_index*",
            "[[]search.empty_index[]] search on an index never written returned NO_MATCH "
            "instead of INDEX_EMPTY",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "*TestForgetsAMixin.test_claims_are_tested*",
            "forgets-a-mixin claims filters, but TestForgetsAMixin does not include "
            "FiltersConformance, so its checks never run",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "*TestTestsAnUnclaimedCapability.test_claims_are_tested*",
            "TestTestsAnUnclaimedCapability includes PersistenceConformance, but overreaches "
            "does not claim persistence: claim it or drop the mixin",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "*TestTestsAnUnclaimedCapability.test_persistence_reopen*",
            "[[]persistence.reopen[]] not claimed: persistence",
        ]
    )
    assert "test_filters_equality" not in result.stdout.str().split("short test summary")[0]
    result.stdout.fnmatch_lines(["*indexplug conformance*", "mislabels-empty: * 1 failed*"])

    card = json.loads((cards / "reference.json").read_text())
    statuses = {c["id"]: c["status"] for c in card["checks"]}
    assert statuses["persistence.reopen"] == "NOT_CLAIMED"
    assert statuses["concurrency.processes"] == "NOT_CLAIMED"
    assert statuses["search.hits"] == "PASSED" and statuses["availability.outage"] == "PASSED"
    assert card["summary"]["ok"] is True and card["summary"]["total"] == len(CHECKS) == 42
    assert card["capabilities"]["filters"] is True

    broken = json.loads((cards / "mislabels-empty.json").read_text())
    row = next(c for c in broken["checks"] if c["id"] == "search.empty_index")
    assert row["status"] == "FAILED"
    assert row["reason"] == (
        "search on an index never written returned NO_MATCH instead of INDEX_EMPTY"
    )
    assert broken["summary"]["failed"] == 1

    # the check of a capability claimed but left out did not run: never passed, and the card
    # says it is incomplete
    forgot = json.loads((cards / "forgets-a-mixin.json").read_text())
    row = next(c for c in forgot["checks"] if c["id"] == "filters.equality")
    assert row["status"] == "SKIPPED"
    # every check but persistence.reopen and concurrency.processes (not claimed) applies
    assert forgot["summary"]["total"] == 42 and forgot["summary"]["passed"] == 35
    assert forgot["summary"]["missing"] == ["filters.equality"]
    assert forgot["summary"]["ok"] is False


def test_marker_is_registered(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_inprocess("--markers")
    result.stdout.fnmatch_lines(["*indexplug_check(id)*"])
