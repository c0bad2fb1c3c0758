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
      "capabilities": {"filters": true, ...},  # what the backend declared (null if unreadable)
      "checks": [
        {"id": "search.no_match",            # stable check id (see CHECKS)
         "title": "...",                     # one line saying what the rule is
         "status": "PASSED",                 # PASSED | FAILED | NOT_CLAIMED | SKIPPED
         "reason": null,                     # why, for every status but PASSED
         "duration_s": 0.012}
      ],
      "summary": {"total": 25, "passed": 20, "failed": 0, "not_claimed": 3, "skipped": 2,
                  "ok": true}                # ok: no check FAILED
    }

``NOT_CLAIMED`` means the backend does not declare the capability (never a pass);
``SKIPPED`` means it could not be checked here (a hook such as ``tamper`` is missing, or the
rule does not apply, e.g. "no matching word" for a dense backend), with the reason.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from indexplug.guard import Guard
from indexplug.protocols import BackendContext, IndexBackend
from indexplug.testing.checks import (
    CHECKS,
    Check,
    CheckResult,
    CheckStatus,
    KitSettings,
    Subject,
    run_check,
)

__all__ = [
    "BackendFactory",
    "ReportCard",
    "Summary",
    "conformance_command",
    "make_card",
    "print_card",
    "run_card",
]

SCHEMA_VERSION = 1

BackendRef = str | Callable[[BackendContext], IndexBackend]
"""An installed backend's name, or a factory like the one a ``BackendSpec`` carries."""


class Summary(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    total: int
    passed: int
    failed: int
    not_claimed: int
    skipped: int
    ok: bool
    """True when no check failed (NOT_CLAIMED and SKIPPED are not failures, nor passes)."""


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


def make_card(
    backend: str, checks: list[CheckResult], capabilities: Mapping[str, object] | None = None
) -> ReportCard:
    """Assemble a card (also used by the pytest plugin's ``--indexplug-card``)."""
    from indexplug import __version__

    def n(status: CheckStatus) -> int:
        return sum(1 for c in checks if c.status is status)

    summary = Summary(
        total=len(checks),
        passed=n(CheckStatus.PASSED),
        failed=n(CheckStatus.FAILED),
        not_claimed=n(CheckStatus.NOT_CLAIMED),
        skipped=n(CheckStatus.SKIPPED),
        ok=n(CheckStatus.FAILED) == 0,
    )
    return ReportCard(
        backend=backend,
        indexplug_version=__version__,
        capabilities=card_capabilities(capabilities) if capabilities is not None else None,
        checks=checks,
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
    restricts the run to some check ids (the others are left off the card).  ``home`` is
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
                if caps is None and subject.capabilities is not None:
                    caps = subject.capabilities.model_dump()
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
    return make_card(name, results, caps)


_STYLE = {
    CheckStatus.PASSED: "green",
    CheckStatus.FAILED: "bold red",
    CheckStatus.NOT_CLAIMED: "yellow",
    CheckStatus.SKIPPED: "dim",
}


def print_card(card: ReportCard, console: Any = None) -> None:
    """The human form: one row per check, the reason for every status but PASSED."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    table = Table(title=f"indexplug conformance: {card.backend}", title_justify="left")
    table.add_column("check", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("reason", overflow="fold")
    for c in card.checks:
        style = _STYLE[c.status]
        table.add_row(c.id, f"[{style}]{c.status.value}[/]", c.reason or "", style=None)
    console.print(table)
    s = card.summary
    verdict = "[green]no failures[/]" if s.ok else f"[bold red]{s.failed} failed[/]"
    console.print(
        f"{s.passed} passed, {s.failed} failed, {s.not_claimed} not claimed, {s.skipped} "
        f"skipped of {s.total} (indexplug {card.indexplug_version}): {verdict}"
    )


def conformance_command(
    backend: str,
    json: bool,
    options: dict[str, Any],
    *,
    settings: KitSettings | None = None,
    only: Collection[str] | None = None,
) -> int:
    """``indexplug conformance``: run the card, print it, exit 0 only if nothing failed.

    Exit status: 0 no check failed; 1 some check failed; 2 the backend is not installed.
    With ``json`` the card goes to stdout as JSON and progress nowhere, so it can be piped.
    """
    from rich.console import Console

    from indexplug.errors import UnknownBackend
    from indexplug.plugins import get_registry

    err = Console(stderr=True)
    installed = get_registry().backend_names()
    if backend not in installed:
        known = ", ".join(installed) or "none"
        exc = UnknownBackend(f"no backend named '{backend}' is installed (installed: {known})")
        err.print(f"[bold red]error:[/] {exc}")
        return 2

    progress: Callable[[CheckResult], None] | None = None
    if not json:

        def progress(r: CheckResult) -> None:
            err.print(f"  {r.id}: [{_STYLE[r.status]}]{r.status.value}[/]", highlight=False)

    card = run_card(backend, options, settings=settings, only=only, on_result=progress)
    if json:
        print(card.model_dump_json(indent=2))
    else:
        print_card(card)
    return 0 if card.ok else 1
