"""The kit has teeth: each deliberately broken backend fails exactly the checks of the rule it
breaks, with a reason naming the violation, and nothing else.  The reference passes all."""

from __future__ import annotations

import re

import kit_broken as kb
import pytest
from conftest import FAST
from indexplug.testing import CheckStatus, ReferenceBackend, run_card

_NO_MATCH_SHAPE = (
    "search.no_match",
    "remove.never_returned",
    "filters.equality",
    "hostile.queries",
)
"""Every check that meets an empty result: they all must see NO_MATCH."""

CASES: dict[str, tuple[type[ReferenceBackend], dict[str, str]]] = {
    # rules the guard polices; the kit must fail with the guard's reason
    "returns a bare list": (
        kb.BareListOnNoMatch,
        {c: r"INDEX_FAILED \(contract violation .*search returned list" for c in _NO_MATCH_SHAPE},
    ),
    "returns an empty SEARCHED": (
        kb.EmptySearched,
        {c: r"INDEX_FAILED \(contract violation .*SEARCHED with no hits" for c in _NO_MATCH_SHAPE},
    ),
    "raises": (
        kb.RaisesOnMissingIndex,
        {
            "status.reports": r"returned INDEX_FAILED \(plugin 'reference' raised during status: "
            r"FileNotFoundError.*instead of STATUS"
        },
    ),
    "leaks a raw exception on hostile input": (
        kb.LeaksOnHostileQuery,
        {
            # the first that reaches it ('"' has no word: the guard refuses it up front)
            "hostile.queries": r"search for 'NEAR\(' returned INDEX_FAILED \(plugin 'reference' "
            r"raised during search: ValueError: fts5: syntax error"
        },
    ),
    # rules only the kit can see
    "mislabels an empty index": (
        kb.MislabelsEmpty,
        {"search.empty_index": r"index never written returned NO_MATCH instead of INDEX_EMPTY"},
    ),
    "ignores the budget": (
        kb.IgnoresBudget,
        {
            "budget.refused": r"max_bytes=1 returned INDEXED instead of OVER_BUDGET",
            "budget.cannot_raise": r"first write set max_bytes=\d+ returned INDEXED instead of "
            r"OVER_BUDGET",
        },
    ),
    "serves tampered passages under a recomputed id": (
        kb.ServesTampered,
        {
            "integrity.tamper": r"served the altered text .* instead of answering INDEX_FAILED",
            "integrity.record": r"not exactly as added",
        },
    ),
    "serves copies it kept after the store was altered": (
        kb.ServesKeptCopies,
        {
            "integrity.tamper": r"served the passage as it was before it was altered",
            "integrity.record": r"answered SEARCHED instead of INDEX_FAILED",
        },
    ),
    "reseals records on read": (
        kb.ResealsOnRead,
        {
            "integrity.record": r"not exactly as added "
            r"\((metadata|source|start, end|text), digest differ\)"
        },
    ),
    "skips records lost behind its index": (
        kb.SkipsLostRows,
        {"integrity.rows": r"answered (NO_MATCH|INDEX_EMPTY|SEARCHED) instead of INDEX_FAILED"},
    ),
    "ignores deadlines": (
        kb.IgnoresDeadlines,
        {
            "deadline.search": r"called directly with its deadline already past, answered "
            r"NO_MATCH: the backend does not stop at its deadline",
            "deadline.write": r"add with deadline_s=1e-06, called directly with its deadline "
            r"already past, answered INDEXED",
        },
    ),
    "loses passages under concurrency": (
        kb.LosesUnderConcurrency,
        {"concurrency.threads": r"threads added at once.*(lost|twice|duplicated)"},
    ),
    "reports ready when it is not": (
        kb.ReadyWhenNot,
        {"availability.outage": r"readiness\(\) reported ready while the backend was unavailable"},
    ),
    "forgets removals": (
        kb.ForgetsRemoval,
        {
            "remove.never_returned": r"returned a passage that was removed",
            "search.empty_index": r"all removed returned SEARCHED instead of INDEX_EMPTY",
            "persistence.reopen": r"reopening changed the index: .* 11 passage\(s\) before and 12",
        },
    ),
    "loses everything on reopen": (
        kb.LosesOnReopen,
        {"persistence.reopen": r"11 passage\(s\) before and 0 after"},
    ),
    "drops metadata and reseals it (invisible to the guard)": (
        kb.DropsMetadata,
        {
            c: r"not exactly as added \(metadata, digest differ\)"
            for c in (
                "search.hits",
                "remove.never_returned",
                "deadline.search",
                "persistence.reopen",
                "hostile.queries",
                "hostile.top_k",
                "hostile.passages",
            )
        }
        | {
            # the guard re-checks every hit against the filter, so a hit stripped of the
            # metadata that matched is caught there before the kit compares it
            "filters.equality": r"does not pass the filter it was asked for",
            "integrity.record": r"answered SEARCHED instead of INDEX_FAILED",
        },
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_kit_fails_exactly_the_broken_rule(case: str) -> None:
    cls, expected = CASES[case]
    card = run_card(kb.factory(cls), settings=FAST)
    failed = {c.id: c.reason or "" for c in card.checks if c.status is CheckStatus.FAILED}
    assert set(failed) == set(expected), failed
    for check_id, pattern in expected.items():
        assert re.search(pattern, failed[check_id]), (check_id, failed[check_id])
    assert not card.ok


def test_reference_passes_everything_it_claims() -> None:
    card = run_card(kb.factory(ReferenceBackend), settings=FAST)
    statuses = {c.id: c.status for c in card.checks}
    assert card.ok, card.failed()
    assert statuses.pop("concurrency.processes") is CheckStatus.NOT_CLAIMED
    assert set(statuses.values()) == {CheckStatus.PASSED}


def test_unclaimed_capabilities_are_never_passed() -> None:
    card = run_card(kb.factory(kb.NoCapabilities), settings=FAST)
    by_id = card.by_id()
    for check_id, capability in {
        "remove.reports": "deletion",
        "remove.never_returned": "deletion",
        "filters.equality": "filters",
        "persistence.reopen": "persistence",
        "concurrency.threads": "concurrent_writers",
        "concurrency.processes": "multiprocess_writers",
        "integrity.rows": "separate_records",
    }.items():
        assert by_id[check_id].status is CheckStatus.NOT_CLAIMED
        assert by_id[check_id].reason == f"not claimed: {capability}"
    assert card.summary.not_claimed == 7
    assert card.summary.passed == card.summary.total - 7
    assert card.ok
