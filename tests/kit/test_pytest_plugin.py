"""The pytest side: NOT_CLAIMED is a skip with its reason, failures carry the kit's reason,
and ``--indexplug-card`` writes the same card the command prints."""

from __future__ import annotations

import json

import pytest

_MODULE = """
import pytest
from indexplug import Guard
from indexplug.testing import BackendConformance, KitSettings, ReferenceBackend

SMALL = KitSettings(scale_passages=200, scale_batch=100, threads=3, batches_per_thread=3,
                    huge_passage_chars=20_000)


class MislabelsEmpty(ReferenceBackend):
    def search(self, index, query, **kw):
        out = super().search(index, query, **kw)
        if out.code == "INDEX_EMPTY":
            from indexplug import NoMatch
            return NoMatch(index=index, backend=self.name, searched=0)
        return out


class TestInMemory(BackendConformance):
    conformance_settings = SMALL

    @pytest.fixture
    def backend(self):
        guard = Guard(ReferenceBackend())
        yield guard
        guard.close()


class TestBroken(BackendConformance):
    conformance_settings = SMALL

    @pytest.fixture
    def backend(self):
        backend = MislabelsEmpty()
        backend.name = "mislabels-empty"
        return Guard(backend)
"""


def test_kit_through_pytest(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_kit=_MODULE)
    cards = pytester.path / "cards"
    result = pytester.runpytest_inprocess(
        "-rs", "-p", "no:cacheprovider", f"--indexplug-card={cards}"
    )
    # two classes x 25 checks: the broken one fails search.empty_index only
    outcomes = result.parseoutcomes()
    assert outcomes["failed"] == 1
    result.stdout.fnmatch_lines(
        [
            "*TestBroken.test_search_empty_index*",
            "[[]search.empty_index[]] search on an index never written returned NO_MATCH "
            "instead of INDEX_EMPTY",
        ]
    )
    result.stdout.re_match_lines([r".*SKIPPED .*not claimed: persistence.*"])
    result.stdout.fnmatch_lines(["*indexplug conformance*", "mislabels-empty: * 1 failed*"])

    card = json.loads((cards / "reference.json").read_text())
    statuses = {c["id"]: c["status"] for c in card["checks"]}
    assert statuses["persistence.reopen"] == "NOT_CLAIMED"
    assert statuses["concurrency.processes"] == "NOT_CLAIMED"
    assert statuses["search.hits"] == "PASSED"
    assert card["summary"]["ok"] is True and card["summary"]["total"] == 25
    assert card["capabilities"]["filters"] is True

    broken = json.loads((cards / "mislabels-empty.json").read_text())
    row = next(c for c in broken["checks"] if c["id"] == "search.empty_index")
    assert row["status"] == "FAILED"
    assert row["reason"] == (
        "search on an index never written returned NO_MATCH instead of INDEX_EMPTY"
    )
    assert broken["summary"]["failed"] == 1


def test_marker_is_registered(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_inprocess("--markers")
    result.stdout.fnmatch_lines(["*indexplug_check(id)*"])
