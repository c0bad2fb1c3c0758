"""Cards cannot overstate: a card lists every check, and is ``ok`` only when every check that
applies to the backend's claims ran and passed, whichever route made it.  A claimed
capability's mixin left out, a check deselected with ``-k``, a check left out of ``only`` or
one that lacks its hook makes the card incomplete (``complete: false``, the check ids in
``missing``); and ``indexplug conformance`` names each check once."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kit_broken as kb
import pytest
from conftest import FAST
from indexplug import BackendSpec, Capabilities, hookimpl
from indexplug.cli.app import app
from indexplug.plugins import get_registry, reset_registry
from indexplug.testing import CHECKS, CheckStatus, ReferenceBackend, conformance_command, run_card
from indexplug.testing import reference as reference_plugin
from typer.testing import CliRunner

_MODULE = """
import pytest
from indexplug import Guard
from indexplug.testing import (
    BackendConformance, ConcurrentWritersConformance, DeletionConformance, DropConformance,
    FiltersConformance, GetConformance, IndexesConformance, KeysConformance, KitSettings,
    OperatorFiltersConformance, OutageConformance, ReferenceBackend, ScanConformance,
    SeparateRecordsConformance,
)

DATA = (GetConformance, ScanConformance, IndexesConformance, DropConformance, KeysConformance,
        OperatorFiltersConformance)

SMALL = KitSettings(scale_passages=200, scale_batch=100, threads=3, batches_per_thread=3,
                    huge_passage_chars=20_000)


def named(name):
    backend = ReferenceBackend()
    backend.name = name
    return Guard(backend)


class TestComplete(BackendConformance, DeletionConformance, FiltersConformance,
                   ConcurrentWritersConformance, OutageConformance,
                   SeparateRecordsConformance, *DATA):
    conformance_settings = SMALL

    @pytest.fixture
    def backend(self):
        guard = named("complete")
        yield guard
        guard.close()


class TestLeavesOutFilters(BackendConformance, DeletionConformance,
                           ConcurrentWritersConformance, OutageConformance,
                           SeparateRecordsConformance, *DATA):
    # the backend claims filters, but FiltersConformance is not in the class
    conformance_settings = SMALL

    @pytest.fixture
    def backend(self):
        guard = named("leaves-out-filters")
        yield guard
        guard.close()
"""

IN_MEMORY_CLAIMS = ReferenceBackend().capabilities
"""What the pytester module's backends claim: filters (every operator), get, scan, indexes,
keys, deletion, concurrent writers, separate records (and drop, by offering op_drop); not
persistence, multi-process writers or a server."""

DESELECTED = "not run: deselected (-k, -m or another selection option)"


def _in_memory(ctx: Any) -> ReferenceBackend:
    """The pytester module's backend, as a factory for the command's route."""
    return ReferenceBackend()


def _verdict(summary: dict[str, Any]) -> dict[str, Any]:
    return {k: summary[k] for k in ("total", "not_claimed", "ok", "complete", "missing")}


def _applicable(caps: Capabilities, *, drop: bool = True) -> list[str]:
    """The check ids a backend with ``caps`` (offering ``op_drop`` when ``drop``) must pass,
    worked out here from the checks' own declarations (not through the card code under
    test): a flag claimed ``True``, ``filter_operators`` claimed non-empty."""
    out = []
    for c in CHECKS:
        capability = "server" if c.outage_or_claim else c.claim
        if capability is None:
            out.append(c.id)
        elif capability == "drop":
            if drop:
                out.append(c.id)
        elif capability == "filter_operators":
            if caps.filter_operators:
                out.append(c.id)
        elif getattr(caps, capability) is True:
            out.append(c.id)
    return out


def _run(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, Path]:
    pytester.makepyfile(test_kit=_MODULE)
    cards = pytester.path / "cards"
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", f"--indexplug-card={cards}", *args
    )
    return result, cards


def _card(cards: Path, name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((cards / f"{name}.json").read_text())
    return data


def _rows(card: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in card["checks"]}


def test_pytest_route_complete_and_missing_mixin(pytester: pytest.Pytester) -> None:
    result, cards = _run(pytester)
    # the class leaving out a claimed mixin fails test_claims_are_tested, nothing else fails
    assert result.parseoutcomes()["failed"] == 1

    done = _card(cards, "complete")
    assert [c["id"] for c in done["checks"]] == [c.id for c in CHECKS]
    assert done["summary"]["ok"] is True and done["summary"]["complete"] is True
    assert done["summary"]["missing"] == []
    # every check that applies passed, and the outage check, which its mixin runs unclaimed
    passed = {i for i, c in _rows(done).items() if c["status"] == "PASSED"}
    assert passed == {*_applicable(IN_MEMORY_CLAIMS), "availability.outage"}

    # the command's route judges the same backend the same way
    command = json.loads(run_card(_in_memory, settings=FAST).model_dump_json())
    assert {i: c["status"] for i, c in _rows(command).items()} == {
        i: c["status"] for i, c in _rows(done).items()
    }
    assert _verdict(command["summary"]) == _verdict(done["summary"])

    partial = _card(cards, "leaves-out-filters")
    assert [c["id"] for c in partial["checks"]] == [c.id for c in CHECKS]
    assert partial["summary"]["ok"] is False and partial["summary"]["complete"] is False
    assert partial["summary"]["missing"] == ["filters.equality"]
    assert partial["summary"]["failed"] == 0  # incomplete alone makes it not ok
    row = _rows(partial)["filters.equality"]
    assert row["status"] == "SKIPPED"
    assert row["reason"] == "not run: TestLeavesOutFilters does not include FiltersConformance"
    result.stdout.fnmatch_lines(
        [f"leaves-out-filters: * of {len(CHECKS)}; INCOMPLETE, did not run: filters.equality"]
    )


def test_pytest_route_deselected_checks_make_the_card_not_ok(pytester: pytest.Pytester) -> None:
    result, cards = _run(pytester, "-k", "no_match")
    outcomes = result.parseoutcomes()
    assert outcomes["passed"] == 2 and "failed" not in outcomes  # test_search_no_match of each

    card = _card(cards, "complete")
    rows = _rows(card)
    assert len(rows) == len(CHECKS) == card["summary"]["total"]
    assert rows["search.no_match"]["status"] == "PASSED"
    expected = [i for i in _applicable(IN_MEMORY_CLAIMS) if i != "search.no_match"]
    assert card["summary"]["missing"] == expected
    assert card["summary"]["ok"] is False and card["summary"]["complete"] is False
    assert {(rows[i]["status"], rows[i]["reason"]) for i in expected} == {("SKIPPED", DESELECTED)}
    # the checks that do not apply are NOT_CLAIMED, never passed, and not missing
    assert rows["persistence.reopen"]["status"] == "NOT_CLAIMED"
    assert rows["concurrency.processes"]["status"] == "NOT_CLAIMED"
    # the command's route, asked for the same one check, misses the same ones
    only = run_card(_in_memory, settings=FAST, only=["search.no_match"])
    assert only.summary.missing == card["summary"]["missing"] and not only.ok

    # left out and deselected: the card says the mixin is missing, the stronger reason
    partial = _rows(_card(cards, "leaves-out-filters"))
    assert partial["filters.equality"]["reason"] == (
        "not run: TestLeavesOutFilters does not include FiltersConformance"
    )
    assert partial["search.hits"]["reason"] == DESELECTED


def test_command_route_only_is_incomplete(tmp_path: Path) -> None:
    card = run_card(kb.factory(ReferenceBackend), settings=FAST, only=["search.hits"])
    assert [c.id for c in card.checks] == [c.id for c in CHECKS]
    assert card.by_id()["search.hits"].status is CheckStatus.PASSED
    claims = ReferenceBackend(tmp_path).capabilities  # as the card opens it: with a home
    assert card.summary.missing == [i for i in _applicable(claims) if i != "search.hits"]
    assert not card.summary.complete and not card.ok
    assert card.by_id()["add.indexed"].reason == (
        "not run: not among the checks asked for (only=...)"
    )


class ClaimsServerWithoutOutageHooks(ReferenceBackend):
    """Claims ``server`` yet gives no way to take it away, so its outage check cannot run."""

    make_unavailable = None  # type: ignore[assignment]
    restore = None  # type: ignore[assignment]

    def __init__(self, home: Path | str | None = None) -> None:
        super().__init__(home)
        self.name = "claims-server"
        self.capabilities = self.capabilities.model_copy(update={"server": True})


class _Plugin:
    @hookimpl
    def indexplug_backends(self) -> list[BackendSpec]:
        return [
            BackendSpec(name="claims-server", factory=kb.factory(ClaimsServerWithoutOutageHooks))
        ]


@pytest.fixture
def registered() -> Iterator[None]:
    """The process registry with the reference and the server-claiming backend registered."""
    reset_registry()
    reg = get_registry()
    reg.register(reference_plugin, name="reference")
    reg.register(_Plugin(), name="claims-server")
    yield
    reset_registry()


def test_command_route_a_claimed_check_that_cannot_run_is_missing(
    registered: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert conformance_command("claims-server", True, {}, settings=FAST) == 1
    card = json.loads(capsys.readouterr().out)
    row = _rows(card)["availability.outage"]
    assert row["status"] == "SKIPPED" and row["reason"].startswith("untested: claims server")
    assert card["summary"]["failed"] == 0
    assert card["summary"]["missing"] == ["availability.outage"]
    assert card["summary"]["ok"] is False and card["summary"]["complete"] is False


def test_cli_prints_each_check_once(registered: None) -> None:
    result = CliRunner().invoke(app, ["conformance", "reference", "--option", "persist=false"])
    assert result.exit_code == 0, result.output
    shown = result.stdout + result.stderr
    for check in CHECKS:
        found = re.findall(rf"(?<![\w.]){re.escape(check.id)}(?![\w.])", shown)
        assert len(found) == 1, (check.id, len(found), shown)
    assert "complete, no failures" in " ".join(result.stdout.split())
