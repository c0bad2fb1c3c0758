"""pytest plugin of the conformance kit (registered through the ``pytest11`` entry point).

It is loaded into every pytest session where indexplug is installed, so it imports nothing
heavy at import time and does nothing unless kit tests run.  It:

* registers the ``indexplug_check(id)`` marker the kit's test methods carry;
* adds ``--indexplug-card DIR``: after the run, write one JSON report card per
  :class:`~indexplug.testing.BackendConformance` class to ``DIR/<backend>.json`` (the same
  schema as ``indexplug conformance --json``; ``<backend>-<Class>.json`` when several classes
  test the same backend), so an author can publish the card from CI;
* prints a one-line summary per card at the end of the run, counting NOT_CLAIMED apart from
  passed, and naming the checks that apply but did not run.

A card lists every check, as the command's does (:func:`~indexplug.testing.card.make_card`
fills the rows and judges completeness for both).  A check of an unclaimed capability is not
collected (its mixin is left out of the class, see :mod:`indexplug.testing.kit`): NOT_CLAIMED.
A check that applies to the claimed capabilities but did not run (deselected with ``-k`` or
``-m``, its mixin left out of the class, or not selected at all) is SKIPPED with the reason,
and makes the card incomplete and not ok: a card never claims more than the run checked.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from indexplug.testing.checks import Check

_MARK = "indexplug_check"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("indexplug", "indexplug backend conformance kit")
    group.addoption(
        "--indexplug-card",
        metavar="DIR",
        default=None,
        help="write a JSON conformance report card per backend tested with "
        "indexplug.testing.BackendConformance into DIR",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{_MARK}(id): a check of the indexplug backend conformance kit"
    )
    config.pluginmanager.register(_Cards(config), "indexplug-cards")


def _reason(report: pytest.TestReport) -> str:
    """The one-line reason of a skip or failure, as the card shows it."""
    lr: Any = report.longrepr
    if isinstance(lr, tuple) and len(lr) == 3:
        text = str(lr[2])
    else:
        crash = getattr(lr, "reprcrash", None)
        text = str(crash.message) if crash is not None else str(report.longreprtext)
    text = re.sub(r"^(Skipped|Failed): ", "", text.strip())
    return re.sub(r"^\[[a-z_.]+\] ", "", text)


def _capability(check: Check) -> str | None:
    """The capability whose mixin holds a check's test method (``None``: the base class)."""
    return "server" if check.outage_or_claim else check.claim


def _included(cls: type) -> list[str]:
    """The capabilities whose mixin a test class includes, told by the test methods it has
    (what decides whether a check is collected).  Carried by the reports, so that it reaches
    the card under xdist too."""
    from indexplug.testing.checks import CHECKS
    from indexplug.testing.kit import method_name

    return sorted(
        {
            capability
            for c in CHECKS
            if (capability := _capability(c)) is not None and hasattr(cls, method_name(c.id))
        }
    )


class _Cards:
    """Collects the kit's results per test class (one card per class: a class tests one
    backend in one configuration; two classes may test the same backend differently)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.rows: dict[str, dict[str, dict[str, Any]]] = {}
        self.backend: dict[str, str] = {}
        self.caps: dict[str, dict[str, Any]] = {}
        self.mixins: dict[str, list[str]] = {}
        """Per class: the capabilities whose mixin it includes."""
        self.deselected: dict[str, set[str]] = {}
        """Per class: the check ids whose tests were deselected (``-k``, ``-m``, ...)."""

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        props: dict[str, Any] = dict(report.user_properties)
        check = props.get(_MARK)
        if not isinstance(check, str):
            return
        group = report.nodeid.rsplit("::", 1)[0]  # the test class
        if props.get("indexplug_backend"):
            self.backend[group] = str(props["indexplug_backend"])
        if "indexplug_capabilities" in props:
            self.caps[group] = props["indexplug_capabilities"]
        if "indexplug_mixins" in props:
            self.mixins[group] = list(props["indexplug_mixins"])
        if report.when != "call" and report.outcome == "passed":
            return  # a setup or teardown that went fine says nothing about the check
        if report.outcome == "passed":
            status, reason = "PASSED", None
        elif report.outcome == "skipped":
            reason = _reason(report)
            status = "NOT_CLAIMED" if reason.startswith("not claimed") else "SKIPPED"
        else:
            status, reason = "FAILED", _reason(report)
        rows = self.rows.setdefault(group, {})
        if rows.get(check, {}).get("status") != "FAILED":  # a failure in any phase stays
            rows[check] = {
                "status": status,
                "reason": reason,
                "duration_s": round(report.duration, 3),
            }

    @pytest.hookimpl
    def pytest_itemcollected(self, item: pytest.Item) -> None:
        mark = item.get_closest_marker(_MARK)
        if mark is not None and mark.args:
            item.user_properties.append((_MARK, str(mark.args[0])))
            cls = getattr(item, "cls", None)
            if isinstance(cls, type):
                item.user_properties.append(("indexplug_mixins", _included(cls)))

    @pytest.hookimpl
    def pytest_deselected(self, items: Sequence[pytest.Item]) -> None:
        for item in items:
            mark = item.get_closest_marker(_MARK)
            if mark is not None and mark.args:
                group = item.nodeid.rsplit("::", 1)[0]
                self.deselected.setdefault(group, set()).add(str(mark.args[0]))

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.rows:
            return
        cards = self._cards()
        terminalreporter.section("indexplug conformance")
        for name, card in cards:
            s = card.summary
            line = (
                f"{name}: {s.passed} passed, {s.failed} failed, {s.not_claimed} not "
                f"claimed, {s.skipped} skipped of {s.total}"
            )
            if not s.complete:
                line += f"; INCOMPLETE, did not run: {', '.join(s.missing)}"
            terminalreporter.write_line(line)
        out = self.config.getoption("--indexplug-card")
        if out:
            folder = Path(out)
            folder.mkdir(parents=True, exist_ok=True)
            for name, card in cards:
                safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)
                path = folder / f"{safe}.json"
                path.write_text(card.model_dump_json(indent=2) + "\n", encoding="utf-8")
                terminalreporter.write_line(f"report card written to {path}")

    def _not_run(self, group: str) -> dict[str, str]:
        """Why each check without a result in ``group`` did not run; the card shows it for
        the checks that apply (the others are NOT_CLAIMED)."""
        from indexplug.testing.checks import CHECKS
        from indexplug.testing.kit import MIXINS

        cls = group.rsplit("::", 1)[-1]
        included = self.mixins.get(group, [])
        deselected = self.deselected.get(group, set())
        why: dict[str, str] = {}
        for c in CHECKS:
            capability = _capability(c)
            if capability is not None and capability not in included:
                why[c.id] = f"not run: {cls} does not include {MIXINS[capability].__name__}"
            elif c.id in deselected:
                why[c.id] = "not run: deselected (-k, -m or another selection option)"
            else:
                why[c.id] = "not run: not selected in this pytest session"
        return why

    def _cards(self) -> list[tuple[str, Any]]:
        """``(name, card)`` per class; the name is the backend's, with the class's appended
        when several classes tested the same backend."""
        from indexplug.testing.card import make_card
        from indexplug.testing.checks import CHECKS, CheckResult, CheckStatus

        titles = {c.id: c.title for c in CHECKS}
        backends = {g: self.backend.get(g, g.rsplit("::", 1)[-1]) for g in self.rows}
        cards = []
        for group, rows in sorted(self.rows.items()):
            backend = backends[group]
            shared = sum(1 for b in backends.values() if b == backend) > 1
            name = f"{backend}-{group.rsplit('::', 1)[-1]}" if shared else backend
            results = [
                CheckResult(
                    id=check,
                    title=titles.get(check, check),
                    status=CheckStatus(row["status"]),
                    reason=row["reason"],
                    duration_s=row["duration_s"],
                )
                for check, row in rows.items()
            ]
            card = make_card(backend, results, self.caps.get(group), not_run=self._not_run(group))
            cards.append((name, card))
        return cards
