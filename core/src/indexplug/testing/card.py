"""The report card: run every check against an installed backend and say how it did.

``indexplug conformance BACKEND [--json] [--option KEY=VALUE ...]`` calls
:func:`conformance_command`, which calls :func:`run_card`.  The checks are the same
:data:`~indexplug.testing.checks.CHECKS` the pytest base class runs; here they are run
directly, each against a fresh instance in a fresh temporary home, so one check's leftovers can
never help or hurt another.

JSON form (``--json``), stable within ``schema_version`` 1; fields may be added, never renamed
or removed::

    {
      "schema_version": 1,
      "backend": "sqlite-fts5",              # the backend's name
      "indexplug_version": "0.1.0",          # the core (and so the kit) that ran the checks
      "capabilities": {"filters": true, ...},  # what the backend declared (null if unreadable),
                                             # and "drop": whether it offers op_drop
      "checks": [
        {"id": "search.no_match",            # stable check id (see CHECKS)
         "title": "...",                     # one line saying what the rule is
         "status": "PASSED",                 # PASSED | FAILED | NOT_CLAIMED | SKIPPED
         "reason": null,                     # why, for every status but PASSED
         "duration_s": 0.012}
      ],
      "summary": {"total": 25, "passed": 22, "failed": 0, "not_claimed": 3, "skipped": 0,
                  "complete": true,          # every check that applies ran
                  "missing": [],             # ids of the checks that apply but did not run
                  "ok": true}                # complete, and no check FAILED
    }

A card lists every check of :data:`~indexplug.testing.checks.CHECKS`, in order, whichever
route made it.  A check *applies* when it needs no capability, or the backend claims the one it
needs (``server`` for ``availability.outage``).  ``NOT_CLAIMED`` means it does not apply (the
backend does not declare the capability; never a pass); ``SKIPPED`` means it applies but did
not run, with the reason: a hook such as ``tamper`` is missing, or it was left out of the run
(``"not run: ..."``: deselected with ``-k``, its mixin left out of the pytest class, not in
``only``).  Every check that applies and did not end PASSED or FAILED is in ``missing``; a
card with any is not ``complete``, and never ``ok``.  Both routes compute this in
:func:`make_card`, so a card cannot claim more than was checked.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from indexplug.guard import Guard
from indexplug.protocols import BackendContext, IndexBackend
from indexplug.testing.checks import (
    CHECKS,
    Check,
    CheckResult,
    CheckStatus,
    KitSettings,
    Subject,
    claimed,
    claims_of,
    run_check,
)

__all__ = [
    "BackendFactory",
    "ReportCard",
    "Summary",
    "applies",
    "conformance_command",
    "make_card",
    "print_card",
    "run_card",
]

SCHEMA_VERSION = 1

BackendRef = str | Callable[[BackendContext], IndexBackend]
"""An installed backend's name, or a factory like the one a ``BackendSpec`` carries."""


class Summary(BaseModel):
    """The counts of a card's rows, and whether they add up to a claim a user may rely on."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    total: int
    passed: int
    failed: int
    not_claimed: int
    skipped: int
    ok: bool
    """True when the card is ``complete`` and no check failed."""
    complete: bool = False
    """True when every check that applies to the claimed capabilities ran (PASSED or FAILED).
    A card written before this field existed reads as not known to be complete."""
    missing: list[str] = Field(default_factory=list)
    """The ids of the checks that apply but did not run, in card order."""


class ReportCard(BaseModel):
    """What ``indexplug conformance`` prints; see the module docstring for the JSON form."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: int = SCHEMA_VERSION
    backend: str
    indexplug_version: str
    capabilities: dict[str, bool | list[str]] | None = None
    """Each claim: ``true``/``false``, or the op names a per-op claim covers (sorted)."""
    checks: list[CheckResult]
    summary: Summary

    @property
    def ok(self) -> bool:
        return self.summary.ok

    def failed(self) -> list[CheckResult]:
        return [c for c in self.checks if c.status is CheckStatus.FAILED]

    def by_id(self) -> dict[str, CheckResult]:
        return {c.id: c for c in self.checks}


def card_capabilities(capabilities: Mapping[str, object]) -> dict[str, bool | list[str]]:
    """Claims as the card's JSON holds them: a per-op claim (a set of op names) sorted into a
    list, so the same backend always prints the same card."""
    out: dict[str, bool | list[str]] = {}
    for key, value in capabilities.items():
        if isinstance(value, (set, frozenset, list, tuple)):
            out[key] = sorted(str(v) for v in value)
        else:
            out[key] = bool(value)
    return out


def _capability(check: Check) -> str | None:
    """The capability a check needs the backend to claim before it applies, if any."""
    return "server" if check.outage_or_claim else check.claim


def applies(check: Check, capabilities: Mapping[str, object] | None) -> bool:
    """Whether a backend with these claims must pass ``check``: it needs no capability, or the
    backend claims the one it needs (``True``, not merely truthy; for ``filter_operators`` a
    non-empty set; for ``drop``, offering ``op_drop``: see
    :func:`~indexplug.testing.checks.claims_of`).  ``availability.outage`` applies to a
    ``server``; it may also run without the claim, but is then not required."""
    capability = _capability(check)
    return capability is None or (
        capabilities is not None and claimed(capabilities.get(capability))
    )


_RAN = (CheckStatus.PASSED, CheckStatus.FAILED)


def make_card(
    backend: str,
    checks: list[CheckResult],
    capabilities: Mapping[str, object] | None = None,
    *,
    not_run: Mapping[str, str] | None = None,
) -> ReportCard:
    """Assemble a card from the results of the checks that were attempted; both routes (the
    command and the pytest plugin's ``--indexplug-card``) call it, so they agree on what a
    card says.

    Every check of ``CHECKS`` gets a row, in order: one not in ``checks`` is ``NOT_CLAIMED``
    when it does not apply to ``capabilities``, else ``SKIPPED`` with ``not_run[id]`` (the
    route's word on why it did not run) as the reason.  Results of ids the kit does not know
    follow, as given.  The card is complete when every check that applies ran, and ok when it
    is complete and none failed.
    """
    from indexplug import __version__

    given = {c.id: c for c in checks}
    rows: list[CheckResult] = []
    for check in CHECKS:
        row = given.pop(check.id, None)
        if row is None:
            if applies(check, capabilities):
                why = (not_run or {}).get(check.id, "not run")
                row = CheckResult(
                    id=check.id, title=check.title, status=CheckStatus.SKIPPED, reason=why
                )
            else:
                why = f"not claimed: {_capability(check)}"
                row = CheckResult(
                    id=check.id, title=check.title, status=CheckStatus.NOT_CLAIMED, reason=why
                )
        rows.append(row)
    rows.extend(given.values())
    kit = {c.id: c for c in CHECKS}
    missing = [
        r.id
        for r in rows
        if r.id in kit and applies(kit[r.id], capabilities) and r.status not in _RAN
    ]

    def n(status: CheckStatus) -> int:
        return sum(1 for c in rows if c.status is status)

    summary = Summary(
        total=len(rows),
        passed=n(CheckStatus.PASSED),
        failed=n(CheckStatus.FAILED),
        not_claimed=n(CheckStatus.NOT_CLAIMED),
        skipped=n(CheckStatus.SKIPPED),
        ok=n(CheckStatus.FAILED) == 0 and not missing,
        complete=not missing,
        missing=missing,
    )
    return ReportCard(
        backend=backend,
        indexplug_version=__version__,
        capabilities=card_capabilities(capabilities) if capabilities is not None else None,
        checks=rows,
        summary=summary,
    )


@dataclass(frozen=True)
class BackendFactory:
    """Opens a new guarded instance of a backend on given storage.

    Picklable when ``backend`` is a name or a module-level function, so the multi-process
    check can send it to child processes, each of which opens its own instance.  Use it as the
    ``backend_factory`` fixture of a :class:`~indexplug.testing.BackendConformance` subclass:
    ``BackendFactory("my-backend", str(tmp_path))``.
    """

    backend: BackendRef
    home: str
    options: Mapping[str, Any] = field(default_factory=dict)

    def __call__(self) -> Guard:
        from indexplug.plugins import get_registry

        if isinstance(self.backend, str):
            return get_registry().backend(self.backend, self.options, home=Path(self.home))
        ctx = BackendContext(
            home=Path(self.home),
            options=dict(self.options),
            embedder_factory=get_registry().embedder,
        )
        return Guard(self.backend(ctx))


@contextmanager
def _subject(
    backend: BackendRef,
    options: Mapping[str, Any],
    settings: KitSettings,
    home: Path | None,
) -> Iterator[Subject]:
    """A fresh instance in a fresh home, with every hook the card can supply itself: reopen
    and the process factory come from the factory; tamper and outage from the backend."""
    with tempfile.TemporaryDirectory(prefix="indexplug-kit-", dir=home) as tmp:
        factory = BackendFactory(backend, tmp, dict(options))
        guard = factory()
        subject = Subject(guard=guard, settings=settings, factory=factory)
        try:
            yield subject
        finally:
            subject.close()
            guard.close()


def run_card(
    backend: BackendRef,
    options: Mapping[str, Any] | None = None,
    *,
    settings: KitSettings | None = None,
    only: Collection[str] | None = None,
    home: Path | None = None,
    on_result: Callable[[CheckResult], None] | None = None,
) -> ReportCard:
    """Run the kit against a backend and return its report card.

    ``backend`` is an installed backend's name (looked up like ``open_backend``) or a factory
    ``(BackendContext) -> IndexBackend``.  ``options`` are the backend's settings.  ``only``
    restricts the run to some check ids (the others that apply are ``SKIPPED``, "not run",
    so the card is not complete and not ok).  ``home`` is
    where the temporary homes go (default: the system's temporary folder).  ``on_result`` is
    called after each check, for progress output.
    """
    settings = settings or KitSettings()
    opts = dict(options or {})
    chosen: list[Check] = [c for c in CHECKS if only is None or c.id in only]
    if only is not None:
        unknown = set(only) - {c.id for c in CHECKS}
        if unknown:
            raise ValueError(f"unknown check id(s): {', '.join(sorted(unknown))}")
    name = backend if isinstance(backend, str) else getattr(backend, "__name__", "backend")
    caps: dict[str, object] | None = None
    results: list[CheckResult] = []
    for check in chosen:
        try:
            with _subject(backend, opts, settings, home) as subject:
                name = subject.guard.name
                if caps is None:
                    caps = claims_of(subject.guard.backend)
                result = run_check(check, subject)
        except Exception as exc:  # a factory that fails is a failed check
            result = CheckResult(
                id=check.id,
                title=check.title,
                status=CheckStatus.FAILED,
                reason=f"could not open the backend: {type(exc).__name__}: {exc}",
            )
        results.append(result)
        if on_result is not None:
            on_result(result)
    left_out = "not run: not among the checks asked for (only=...)"
    return make_card(name, results, caps, not_run={c.id: left_out for c in CHECKS})


_STYLE = {
    CheckStatus.PASSED: "green",
    CheckStatus.FAILED: "bold red",
    CheckStatus.NOT_CLAIMED: "yellow",
    CheckStatus.SKIPPED: "dim",
}


def print_card(card: ReportCard, console: Any = None) -> None:
    """The human form: one row per check, the reason for every status but PASSED."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = console or Console()
    table = Table(title=f"indexplug conformance: {card.backend}", title_justify="left")
    table.add_column("check", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("reason", overflow="fold")
    for c in card.checks:
        style = _STYLE[c.status]
        # a reason is text, never markup: "install indexplug[testing]" must print as written
        table.add_row(c.id, f"[{style}]{c.status.value}[/]", escape(c.reason or ""), style=None)
    console.print(table)
    s = card.summary
    verdict = "[green]complete, no failures[/]"
    if not s.ok:
        # The ids are in the table already: the summary counts them, so each prints once.
        problems = [f"{s.failed} failed"] if s.failed else []
        if s.missing:
            problems.append(
                f"incomplete: {len(s.missing)} check(s) that apply did not run (SKIPPED above)"
            )
        verdict = f"[bold red]{'; '.join(problems) or 'not ok'}[/]"
    console.print(
        f"{s.passed} passed, {s.failed} failed, {s.not_claimed} not claimed, {s.skipped} "
        f"skipped of {s.total} (indexplug {card.indexplug_version}): {verdict}"
    )


NEEDS = {"filters.operators": ("hypothesis", "indexplug[testing]")}
"""The checks that need a library core does not install: check id -> (module, what to install)."""


def missing_libraries(only: Collection[str] | None = None) -> str | None:
    """What to install before the checks in ``only`` (all when ``None``) can run, or ``None``.

    Asked before a run, so a missing test library stops it with one sentence instead of
    showing, after minutes of checks, as a failed check of the backend."""
    import importlib.util

    wanted: dict[str, list[str]] = {}
    for check, (module, extra) in NEEDS.items():
        if (only is None or check in only) and importlib.util.find_spec(module) is None:
            wanted.setdefault(extra, []).append(f"{check} needs {module}")
    if not wanted:
        return None
    extras = " ".join(f"'{e}'" for e in wanted)
    why = "; ".join(w for ws in wanted.values() for w in ws)
    return f"conformance needs test libraries that are not installed ({why}): pip install {extras}"


def conformance_command(
    backend: str,
    json: bool,
    options: dict[str, Any],
    *,
    settings: KitSettings | None = None,
    only: Collection[str] | None = None,
) -> int:
    """``indexplug conformance``: run the card, print it, exit 0 only if the card is ok.

    Exit status: 0 the card is ok (every check that applies ran and passed); 1 it is not (a
    check failed, or one that applies did not run); 2 the backend is not installed, or a
    library the checks need is not (said before any check runs, with what to install: a
    missing test library is never reported as a failed check of the backend).  With
    ``json`` the card goes to stdout as JSON and progress nowhere, so it can be piped.
    Otherwise the table is the only place a check is named: progress is a count on stderr,
    shown only on a terminal and erased when the table prints.
    """
    from rich.console import Console
    from rich.markup import escape

    from indexplug.errors import UnknownBackend
    from indexplug.plugins import get_registry

    err = Console(stderr=True)
    installed = get_registry().backend_names()
    if backend not in installed:
        known = ", ".join(installed) or "none"
        exc = UnknownBackend(f"no backend named '{backend}' is installed (installed: {known})")
        err.print(f"[bold red]error:[/] {exc}")
        return 2
    missing = missing_libraries(only)
    if missing:
        err.print(f"[bold red]error:[/] {escape(missing)}", highlight=False)
        return 2

    if json:
        card = run_card(backend, options, settings=settings, only=only)
        print(card.model_dump_json(indent=2))
        return 0 if card.ok else 1

    total = len(CHECKS) if only is None else len(set(only))
    done: list[CheckResult] = []

    def counted() -> str:
        failed = sum(1 for r in done if r.status is CheckStatus.FAILED)
        return f"conformance of {backend}: {len(done)} of {total} checks run, {failed} failed"

    with err.status(counted()) as status:  # transient: nothing of it stays on the screen

        def progress(r: CheckResult) -> None:
            done.append(r)
            status.update(counted())

        card = run_card(backend, options, settings=settings, only=only, on_result=progress)
    print_card(card)
    return 0 if card.ok else 1
