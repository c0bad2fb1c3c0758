"""The report card: its JSON form and the ``indexplug conformance`` command function."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

import kit_broken as kb
import pytest
from conftest import FAST
from indexplug import BackendSpec, hookimpl
from indexplug.plugins import get_registry, reset_registry
from indexplug.testing import ReportCard, check_ids, conformance_command, run_card
from indexplug.testing import reference as reference_plugin
from indexplug.testing.checks import CheckStatus


class _BrokenPlugin:
    @hookimpl
    def indexplug_backends(self) -> list[BackendSpec]:
        return [BackendSpec(name="mislabels-empty", factory=kb.factory(kb.MislabelsEmpty))]


@pytest.fixture
def registered() -> Iterator[None]:
    """The process registry with the reference and a broken backend registered."""
    reset_registry()
    reg = get_registry()
    reg.register(reference_plugin, name="reference")
    reg.register(_BrokenPlugin(), name="broken")
    yield
    reset_registry()


def test_card_json_schema_is_stable() -> None:
    card = run_card(kb.factory(kb.ReferenceBackend), settings=FAST, only=["search.hits"])
    data: dict[str, Any] = json.loads(card.model_dump_json())
    assert set(data) == {
        "schema_version",
        "backend",
        "indexplug_version",
        "capabilities",
        "checks",
        "summary",
    }
    assert data["schema_version"] == 1
    assert data["backend"] == "reference"
    row = next(c for c in data["checks"] if c["id"] == "search.hits")
    assert row == {
        "id": "search.hits",
        "title": row["title"],
        "status": "PASSED",
        "reason": None,
        "duration_s": row["duration_s"],
    }
    assert set(data["summary"]) == {
        "total",
        "passed",
        "failed",
        "not_claimed",
        "skipped",
        "ok",
        "complete",
        "missing",
    }
    assert ReportCard.model_validate_json(card.model_dump_json()) == card


def test_card_lists_every_check_in_order() -> None:
    card = run_card(kb.factory(kb.MislabelsEmpty), settings=FAST)
    assert [c.id for c in card.checks] == check_ids()
    assert card.summary.failed == 1 and not card.ok


def test_unknown_check_id_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown check id"):
        run_card(kb.factory(kb.ReferenceBackend), only=["no.such.check"])


def test_a_factory_that_raises_fails_each_check_with_its_reason() -> None:
    def boom(ctx: Any) -> Any:
        raise RuntimeError("needs a url option")

    card = run_card(boom, settings=FAST, only=["search.hits", "status.reports"])
    rows = card.by_id()
    assert [rows[i].status.value for i in ("search.hits", "status.reports")] == ["FAILED", "FAILED"]
    assert rows["search.hits"].reason == (
        "could not open the backend: RuntimeError: needs a url option"
    )


def test_command_json_and_exit_codes(registered: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert conformance_command("reference", True, {"persist": "false"}, settings=FAST) == 0
    data = json.loads(capsys.readouterr().out)
    statuses = {c["id"]: c["status"] for c in data["checks"]}
    assert statuses["search.no_match"] == "PASSED"
    assert statuses["persistence.reopen"] == "NOT_CLAIMED"
    assert data["summary"]["ok"] is True and data["summary"]["complete"] is True

    only = ["search.empty_index", "search.no_match", "persistence.reopen"]
    assert conformance_command("mislabels-empty", True, {}, settings=FAST, only=only) == 1
    data = json.loads(capsys.readouterr().out)
    row = next(c for c in data["checks"] if c["id"] == "search.empty_index")
    assert row["status"] == "FAILED"
    assert "instead of INDEX_EMPTY" in row["reason"]

    assert conformance_command("no-such-backend", True, {}) == 2
    assert "no backend named 'no-such-backend'" in capsys.readouterr().err


def test_command_prints_a_table(registered: None, capsys: pytest.CaptureFixture[str]) -> None:
    code = conformance_command(
        "mislabels-empty",
        False,
        {},
        settings=FAST,
        only=["search.empty_index", "concurrency.processes"],
    )
    assert code == 1
    out = capsys.readouterr().out
    assert "search.empty_index" in out and "FAILED" in out and "NOT_CLAIMED" in out
    assert "not claimed: multiprocess_writers" in out
    assert "1 failed" in out


def test_a_per_op_claim_prints_as_a_sorted_list() -> None:
    from indexplug.protocols import Capabilities
    from indexplug.testing.card import make_card

    caps = Capabilities(filters=True, cooperative_deadlines=frozenset({"status", "search"}))
    card = make_card("x", [], caps.model_dump())
    assert card.capabilities is not None and card.capabilities["filters"] is True
    assert card.capabilities["cooperative_deadlines"] == ["search", "status"]
    assert ReportCard.model_validate_json(card.model_dump_json()) == card


def test_command_says_what_to_install_before_running_without_hypothesis(
    registered: None, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A missing test library stops the run up front, naming what to install (as written, not
    eaten as markup); it never shows as a failed check of the backend."""
    monkeypatch.setitem(sys.modules, "hypothesis", None)  # find_spec: not installed
    for as_json in (True, False):
        code = conformance_command("reference", as_json, {"persist": "false"}, settings=FAST)
        got = capsys.readouterr()
        assert code == 2
        assert got.out == ""  # no card: nothing ran
        assert "filters.operators needs hypothesis" in got.err
        assert "pip install 'indexplug[testing]'" in " ".join(got.err.split())
    # a run that leaves that check out needs nothing more: it runs (its card says "not run"
    # of the rest, so it is not complete)
    only = ["search.no_match"]
    assert conformance_command("reference", True, {}, settings=FAST, only=only) == 1
    rows = {c["id"]: c["status"] for c in json.loads(capsys.readouterr().out)["checks"]}
    assert rows["search.no_match"] == "PASSED"


def test_a_reason_prints_as_written_not_as_markup(registered: None) -> None:
    from io import StringIO

    from indexplug.testing.card import print_card
    from rich.console import Console

    card = run_card("reference", {"persist": "false"}, settings=FAST, only=["search.no_match"])
    row = card.checks[0].model_copy(
        update={"status": CheckStatus.FAILED, "reason": "install indexplug[testing]"}
    )
    buf = StringIO()
    print_card(card.model_copy(update={"checks": [row]}), Console(file=buf, width=200))
    assert "install indexplug[testing]" in buf.getvalue()
