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
    "filters.operators",
    "hostile.queries",
)
"""Every check that meets an empty result: they all must see NO_MATCH."""

_SEARCH_LAUNDERS = (
    r"search of a passage whose licence and metadata were edited and digest removed answered "
    r"SEARCHED instead of INDEX_FAILED"
)
"""A backend that serves what it reads under a digest of its own fails ``integrity.digest``
at its first read (search)."""

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
            r"FileNotFoundError.*instead of STATUS",
            # a dropped index is one that does not exist
            "drop.removes": r"status after drop returned INDEX_FAILED \(plugin 'reference' "
            r"raised during status: FileNotFoundError",
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
            "integrity.digest": _SEARCH_LAUNDERS,
        },
    ),
    "serves copies it kept after the store was altered": (
        kb.ServesKeptCopies,
        {
            "integrity.tamper": r"served the passage as it was before it was altered",
            "integrity.record": r"answered SEARCHED instead of INDEX_FAILED",
            "integrity.digest": _SEARCH_LAUNDERS,
        },
    ),
    "reseals records on read": (
        kb.ResealsOnRead,
        {
            "integrity.record": r"not exactly as added "
            r"\((metadata|source|start, end|text), digest differ\)",
            "integrity.digest": _SEARCH_LAUNDERS,
        },
    ),
    "fills in a missing digest on get and scan": (
        kb.FillsMissingDigests,
        {
            "integrity.digest": r"get of a passage whose licence and metadata were edited and "
            r"digest removed answered GOT instead of INDEX_FAILED"
        },
    ),
    "a tamper_record hook that cannot remove a digest": (
        kb.KeepsDigestInTamperHook,
        {
            "integrity.digest": r"answered INDEX_FAILED for another reason .*no longer matches "
            r"its digest.*does the tamper_record hook remove a digest"
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
            # and the ops of the data interface, each in its own check
            **{
                check: rf"{op} with deadline_s=1e-06, called directly with its deadline already "
                rf"past, answered {code}: the backend does not stop at its deadline"
                for check, op, code in (
                    ("get.by_id", "get", "GOT"),
                    ("scan.pages", "scan", "SCANNED"),
                    ("indexes.lists", "indexes", "INDEXES"),
                    ("drop.removes", "drop", "STATUS"),
                )
            },
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
            # every read op sees what a removal left behind
            "get.by_id": r"get of a removed passage's id still answered it",
            "scan.pages": r"scan after removing a passage answered 12 passages, expected the "
            r"other 11",
            "stats.counts": r"a scan for stats of an index .* less 2 removed read 12 passages, "
            r"not the 10 stored",
            "indexes.lists": r"indexes after removing a passage listed 'kit-listb-\w+' with 3 "
            r"passages; it holds 2",
            "keys.get_remove": r"get by key after removing doc-c answered 5 passage\(s\), "
            r"missing_keys=\[\]",
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
            "filters.operators": r"not exactly as added \(metadata, digest differ\)|does not "
            r"pass the filter it was asked for",
            "integrity.record": r"answered SEARCHED instead of INDEX_FAILED",
            "integrity.digest": _SEARCH_LAUNDERS,
        },
    ),
    # the data interface (issue 27): every new check has a broken backend that fails it
    "get drops the ids it did not find": (
        kb.GetOmitsMissing,
        {
            "get.by_id": r"get of three stored ids and one never added returned INDEX_FAILED "
            r"\(contract violation .*missing ids or keys do not match"
        },
    ),
    "get fails on an index never written": (
        kb.GetFailsOnMissingIndex,
        {"get.by_id": r"get from an index never written returned INDEX_FAILED .*instead of GOT"},
    ),
    "get by id loses the caller key (resealed)": (
        kb.GetLosesKeyById,
        {
            # the key is part of the id, so the guard refuses the passage before the kit
            # compares it
            "keys.get_remove": r"get by the id of a passage of doc-c .* no longer matches its "
            r"content-addressed id"
        },
    ),
    "get drops the keys it did not find": (
        kb.GetOmitsMissingKeys,
        {
            "keys.get_remove": r"get by keys doc-c and one no passage has returned INDEX_FAILED "
            r"\(contract violation .*missing ids or keys do not match"
        },
    ),
    "scan skips a page after a cursor": (
        kb.ScanSkipsPage,
        {
            "scan.pages": r"scan of 12 passages in pages of 5 returned 7 of the 12 passages "
            r"\(5 never came\)",
            # stats reads by scan too
            "stats.counts": r"a scan for stats of an index .* read 5 passages, not the 10 stored",
        },
    ),
    "scan repeats the cursor's passage": (
        kb.ScanRepeatsCursor,
        {
            "scan.pages": r"\(page 2\) returned INDEX_FAILED \(contract violation .*out of id "
            r"order",
            "stats.counts": r"scan for stats .* \(page 2\) returned INDEX_FAILED \(contract "
            r"violation .*out of id order",
        },
    ),
    "indexes omits one": (
        kb.IndexesOmitsOne,
        {"indexes.lists": r"indexes after writing two indexes did not list 'kit-listb-"},
    ),
    "drop deletes nothing": (
        kb.DropKeepsPassages,
        {"drop.removes": r"after drop, status says exists=True, passages=12"},
    ),
    "upsert leaves the old version": (
        kb.UpsertKeepsOld,
        {"keys.upsert": r"after replacing doc-a, status reports 19 passages; expected 17"},
    ),
    "upsert lets readers see neither version": (
        kb.UpsertNotAtomic,
        {
            "keys.upsert": r"while doc-a was being replaced saw neither version whole .*the upsert "
            r"is not atomic"
        },
    ),
    "$ne ignored on lists (the guard sees extra passages)": (
        kb.NeIgnoresLists,
        {
            "filters.operators": r"filters=.*\$ne.*(passage\(s\) that indexplug.filters.matches "
            r"(rejects|selects)|INDEX_FAILED \(contract violation .*does not pass the filter)"
        },
    ),
    "$eq null misses missing fields (too few passages)": (
        kb.NullIsNotMissing,
        {
            "filters.operators": r"filters=.*\$eq\": null.*(passage\(s\) that "
            r"indexplug.filters.matches (rejects|selects)|INDEX_FAILED \(contract violation "
            r".*does not pass the filter)"
        },
    ),
    "claims an operator indexplug.filters does not define": (
        kb.ClaimsUnknownOperator,
        {
            "filters.refused": r"claims filter operator\(s\) \$regex, which indexplug.filters "
            r"does not define"
        },
    ),
    "its op_stats keeps counting removed passages": (
        kb.StatsCountsRemoved,
        {
            "stats.counts": r"op_stats of stats of an index .* said exists=True, passages=12; a "
            r"scan reads 10"
        },
    ),
    "its own asearch answers less than search": (
        kb.AsyncSearchKeepsOneHit,
        {
            "async.same": r"the coroutine form of search for 'fox glaciers violin' answered "
            r"SEARCHED with 1 passage\(s\); the blocking form SEARCHED with 3 passage\(s\)"
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
    # the reference is lexical: the vector checks pass on its vector twin (test_vectors_kit.py)
    for check_id in ("vectors.round_trip", "vectors.search", "vectors.returned", "vectors.refused"):
        assert statuses.pop(check_id) is CheckStatus.NOT_CLAIMED
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
        "get.by_id": "get",
        "scan.pages": "scan",
        "indexes.lists": "indexes",
        "drop.removes": "drop",
        "keys.upsert": "keys",
        "keys.get_remove": "keys",
        "filters.operators": "filter_operators",
        "vectors.round_trip": "vectors",
        "vectors.search": "vectors",
        "vectors.returned": "vectors",
        "vectors.refused": "vectors",
        "stats.counts": "scan",
    }.items():
        assert by_id[check_id].status is CheckStatus.NOT_CLAIMED
        assert by_id[check_id].reason == f"not claimed: {capability}"
    assert card.summary.not_claimed == 19
    assert card.summary.passed == card.summary.total - 19
    # filters.refused applies to every backend: one that claims no filters refuses them all
    assert by_id["filters.refused"].status is CheckStatus.PASSED
    assert card.ok


DATA_INTERFACE = {
    "get.by_id",
    "scan.pages",
    "indexes.lists",
    "drop.removes",
    "keys.upsert",
    "keys.get_remove",
    "filters.operators",
    "filters.refused",
    "async.same",
}
"""The checks of the data interface (issue 27)."""


def test_every_data_interface_check_has_a_broken_backend_that_fails_it() -> None:
    """The quality bar of issue 27: no new check without teeth (each case above is run by
    test_kit_fails_exactly_the_broken_rule, which proves the failure)."""
    from indexplug.testing import check_ids

    assert set(check_ids()) >= DATA_INTERFACE
    failed_by_some_case = {check for _, expected in CASES.values() for check in expected}
    assert failed_by_some_case >= DATA_INTERFACE, DATA_INTERFACE - failed_by_some_case
