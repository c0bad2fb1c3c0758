"""When a check runs, is not claimed, or cannot be run, and how that is reported."""

from __future__ import annotations

from pathlib import Path

from conftest import FAST
from indexplug import Capabilities, Guard, NoMatch
from indexplug.testing import CHECKS, CheckStatus, ReferenceBackend, Subject, check_ids, run_check
from indexplug.testing.kit import MIXINS, BackendConformance, OutageConformance, method_name


def _run(subject: Subject, check_id: str) -> tuple[CheckStatus, str | None]:
    check = next(c for c in CHECKS if c.id == check_id)
    r = run_check(check, subject)
    return r.status, r.reason


class _NoHooks(ReferenceBackend):
    tamper = None  # type: ignore[assignment]
    make_unavailable = None  # type: ignore[assignment]
    restore = None  # type: ignore[assignment]


def test_check_ids_are_unique_and_stable() -> None:
    ids = check_ids()
    assert len(ids) == len(set(ids)) >= 25
    for required in (
        "outcomes.typed",
        "search.empty_index",
        "search.no_match",
        "search.hits",
        "add.idempotent",
        "remove.reports",
        "remove.never_returned",
        "budget.refused",
        "budget.cannot_raise",
        "integrity.tamper",
        "deadline.search",
        "deadline.write",
        "availability.outage",
        "persistence.reopen",
        "hostile.index_names",
        "hostile.queries",
        "hostile.top_k",
        "hostile.passages",
        "concurrency.threads",
        "concurrency.processes",
        "scale.smoke",
    ):
        assert required in ids


def test_every_check_is_a_test_method_of_the_base_or_of_its_capability_mixin() -> None:
    for check in CHECKS:
        name = method_name(check.id)
        if check.outage_or_claim:
            home: type = OutageConformance
        elif check.claim:
            home = MIXINS[check.claim]
        else:
            home = BackendConformance
        assert callable(getattr(home, name)), check.id
        # a capability's check is on its mixin only: a class without the mixin never runs it
        assert (home is BackendConformance) == hasattr(BackendConformance, name), check.id
    # every mixin is a capability's, but drop's: claimed by offering op_drop (no flag)
    assert set(MIXINS) - {"drop"} <= set(Capabilities.model_fields)


def test_missing_hooks_are_untested_not_passed(tmp_path: Path) -> None:
    s = Subject(guard=Guard(_NoHooks(tmp_path)), settings=FAST)
    status, reason = _run(s, "integrity.tamper")
    assert status is CheckStatus.SKIPPED
    assert reason is not None and reason.startswith("untested: needs a tamper(")
    # claims persistence but nobody said how to reopen it
    status, reason = _run(s, "persistence.reopen")
    assert status is CheckStatus.SKIPPED
    assert reason is not None and reason.startswith("untested: claims persistence, but no ")
    # no outage hooks and no server claim: not claimed
    assert _run(s, "availability.outage") == (
        CheckStatus.NOT_CLAIMED,
        "not claimed: server (and no outage hooks were given)",
    )


def test_server_without_outage_hooks_is_untested() -> None:
    backend = _NoHooks()
    backend.capabilities = Capabilities(server=True)
    status, reason = _run(Subject(guard=Guard(backend), settings=FAST), "availability.outage")
    assert status is CheckStatus.SKIPPED
    assert reason is not None and "claims server" in reason


class _DenseCountsNothing(ReferenceBackend):
    """Claims dense, and says it searched nothing when nothing matched."""

    def search(self, index, query, **kw):  # type: ignore[no-untyped-def]
        out = super().search(index, query, **kw)
        return (
            NoMatch(index=index, backend=self.name, searched=0) if out.code == "NO_MATCH" else out
        )


def test_no_match_on_a_dense_backend_still_checks_what_it_searched() -> None:
    """A dense backend may rank passages for a query sharing no word with them (SEARCHED), or
    answer NO_MATCH; either way it must say it searched the whole index."""
    for cls, want in ((ReferenceBackend, CheckStatus.PASSED), (_DenseCountsNothing, None)):
        backend = cls()
        backend.capabilities = backend.capabilities.model_copy(update={"dense": True})
        status, reason = _run(Subject(guard=Guard(backend), settings=FAST), "search.no_match")
        if want is not None:
            assert (status, reason) == (want, None)
        else:
            assert status is CheckStatus.FAILED
            assert reason is not None and "reported searched=0" in reason


def test_a_backend_not_ready_fails_every_check_it_runs() -> None:
    backend = ReferenceBackend()
    backend.make_unavailable("no server configured")
    status, reason = _run(Subject(guard=Guard(backend), settings=FAST), "search.hits")
    assert status is CheckStatus.FAILED
    assert reason == "the backend is not ready at the start of the check: no server configured"


def test_explicit_hooks_win_over_the_backend_methods() -> None:
    calls: list[str] = []
    backend = ReferenceBackend()

    def down() -> None:
        calls.append("down")
        backend.make_unavailable("stopped by the test")

    def up() -> None:
        calls.append("up")
        backend.restore()

    s = Subject(guard=Guard(backend), settings=FAST, make_unavailable=down, restore=up)
    assert _run(s, "availability.outage") == (CheckStatus.PASSED, None)
    assert calls == ["down", "up"]


def test_drop_is_claimed_by_offering_op_drop() -> None:
    """drop has no capability flag: offering op_drop claims it, for checks, cards and the
    class's mixins alike."""
    import pytest
    from indexplug.testing.kit import DropConformance

    others = tuple(
        m for cap, m in MIXINS.items() if cap not in ("drop", "persistence", "multiprocess_writers")
    )

    class WithoutDrop(BackendConformance, *others):  # type: ignore[misc]
        pass

    with pytest.raises(
        pytest.fail.Exception,
        match=r"claims drop \(it offers op_drop\), but "
        r"WithoutDrop does not include DropConformance",
    ):
        WithoutDrop().test_claims_are_tested(ReferenceBackend())

    class NoDrop(ReferenceBackend):
        op_drop = None  # type: ignore[assignment]

    class WithDrop(BackendConformance, *others, DropConformance):  # type: ignore[misc]
        pass

    with pytest.raises(pytest.fail.Exception, match=r"does not claim drop \(it offers op_drop\)"):
        WithDrop().test_claims_are_tested(NoDrop())
    assert _run(Subject(guard=Guard(NoDrop()), settings=FAST), "drop.removes") == (
        CheckStatus.NOT_CLAIMED,
        "not claimed: drop",
    )
