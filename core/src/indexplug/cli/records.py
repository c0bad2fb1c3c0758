"""CLI commands for what indexplug records: ``audit`` (list, ``verify``) and ``history``.

``indexplug audit`` prints audit records as JSON lines (one record a line, every field, non-ASCII
escaped, so stored text cannot reach the terminal as control sequences); ``audit verify`` walks
the hash chain and names the first bad record.  Both read ``INDEXPLUG_HOME/audit``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from indexplug.cli.console import LazyConsole, escape

err = LazyConsole(stderr=True)
out = LazyConsole()
BAD_INPUT = 64
BROKEN = 3
"""``EXIT_CODES["AUDIT_BROKEN"]``: the log does not verify."""

audit_app = typer.Typer(
    name="audit",
    help="The audit log of every change (see docs/security.md).",
    invoke_without_command=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _fail(message: str, code: int = BAD_INPUT) -> typer.Exit:
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False)
    return typer.Exit(code)


def _answer(op: str, args: dict[str, Any], config: Path | None) -> dict[str, Any]:
    from indexplug.invocation import invoke

    answer = invoke(op, args, config=config, caller="cli")
    if answer.get("code") == "BAD_REQUEST":
        problem = answer.get("problem") or {}
        raise _fail(str(problem.get("reason") or answer.get("message")))
    return answer


@audit_app.callback()
def audit_list(
    ctx: typer.Context,
    index: Annotated[str | None, typer.Option("--index", "-i", help="Only this index.")] = None,
    caller: Annotated[str | None, typer.Option(help="Only this caller.")] = None,
    op: Annotated[str | None, typer.Option(help="Only this op (add, remove, drop...).")] = None,
    outcome: Annotated[str | None, typer.Option(help="Only this outcome code.")] = None,
    since: Annotated[float | None, typer.Option(help="From this Unix time.")] = None,
    until: Annotated[float | None, typer.Option(help="Before this Unix time.")] = None,
    after: Annotated[int, typer.Option(help="After this seq (the cursor).")] = 0,
    limit: Annotated[int, typer.Option(help="Records to print (1-1000).")] = 100,
    config: Annotated[Path | None, typer.Option("--config", "-c", help="indexplug.toml.")] = None,
) -> None:
    """Print audit records as JSON lines, oldest first (exit 3 if the chain does not verify)."""
    if ctx.invoked_subcommand is not None:
        return
    args: dict[str, Any] = {"after": after, "limit": limit}
    for name, value in (
        ("index", index),
        ("caller", caller),
        ("op", op),
        ("outcome", outcome),
        ("since", since),
        ("until", until),
    ):
        if value is not None:
            args[name] = value
    answer = _answer("audit", args, config)
    data = answer.get("data") or {}
    for rec in data.get("records", []):
        sys.stdout.write(json.dumps(rec, sort_keys=True) + "\n")
    if data.get("next_after") is not None:
        err.print(f"more: --after {int(data['next_after'])}", highlight=False)
    if not answer.get("ok"):
        raise _fail(str(answer.get("message")), BROKEN)


@audit_app.command("verify")
def audit_verify(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON (stable shape).")] = False,
) -> None:
    """Walk the audit log's hash chain: exit 0 when every record verifies, else 3, naming the
    first bad record (edited, deleted, reordered, torn, truncated, or the file is a link)."""
    from indexplug.audit import AuditLog

    log = AuditLog()
    verdict = log.verify()
    if as_json:
        sys.stdout.write(
            json.dumps(
                {
                    "ok": verdict.ok,
                    "records": verdict.records,
                    "first_bad": verdict.first_bad,
                    "reason": verdict.reason,
                    "path": str(log.log),
                }
            )
            + "\n"
        )
    elif verdict.ok:
        out.print(f"{verdict.records} record(s) verify ({escape(str(log.log))})", highlight=False)
    else:
        err.print(
            f"[bold red]broken:[/] record {verdict.first_bad}: {escape(verdict.reason)} "
            f"({verdict.records} record(s) before it verify; {escape(str(log.log))})",
            highlight=False,
        )
    if not verdict.ok:
        raise typer.Exit(BROKEN)


UNAVAILABLE = 5
"""``EXIT_CODES["INDEX_UNAVAILABLE"]``: the audit log cannot record a change, so none is made."""


def cli_change(
    op: str,
    index: str,
    backend: str,
    config: Path | None,
    run: Any,
    *,
    keys: Any = (),
    detail: dict[str, Any] | None = None,
    code_of: Any = None,
) -> Any:
    """Run the change ``run()`` made by a CLI command, recorded in the audit log as made by
    "cli" where the configuration's ``[audit]`` says so (as ``invoke`` does): the log is
    checked first, so that no change is made that it could not record.  ``code_of`` gives the
    outcome code of a result that has none of its own (index_folder's report)."""
    from indexplug.audit import AuditError, AuditLog
    from indexplug.config import find_config_file, load_config

    path = find_config_file(config)
    cfg = load_config(path, check_backends=False) if path is not None else None
    mode = cfg.audit.enabled if cfg is not None else "auto"
    on = mode == "on" or (mode == "auto" and cfg is not None and cfg.allows_remove(index))
    if not on:
        return run()
    assert cfg is not None
    log = AuditLog(max_ids=cfg.audit.max_ids)
    try:
        log.check()
    except AuditError as exc:
        raise _fail(
            f"the audit log cannot record this change, so none was made: {exc}", UNAVAILABLE
        ) from None
    outcome = run()
    counts = {
        k: v
        for k, v in outcome.model_dump().items()
        if isinstance(v, int) and not isinstance(v, bool)
    }
    ids = list(getattr(outcome, "added_ids", None) or getattr(outcome, "removed_ids", None) or [])
    from indexplug.outcomes import EXIT_CODES

    code = str(code_of(outcome) if code_of is not None else outcome.code)
    try:
        log.append(
            op=op,
            caller="cli",
            index=index,
            backend=backend,
            outcome=code,
            ok=EXIT_CODES.get(code, 3) == 0 if code_of is not None else bool(outcome.ok),
            counts=counts,
            ids=ids,
            keys=list(keys),
            detail=detail,
        )
    except (AuditError, OSError) as exc:
        err.print(
            f"[bold red]warning:[/] the audit log could not record this change: {escape(str(exc))}",
            highlight=False,
        )
    return outcome


history_app = typer.Typer(
    name="history",
    help="The search history of indexes whose history is on (see docs/history.md).",
    invoke_without_command=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

IndexFilter = Annotated[str | None, typer.Option("--index", "-i", help="Only this index.")]
CallerFilter = Annotated[str | None, typer.Option(help="Only this caller.")]
OutcomeFilter = Annotated[str | None, typer.Option(help="Only this outcome code.")]
SinceFilter = Annotated[float | None, typer.Option(help="From this Unix time.")]
UntilFilter = Annotated[float | None, typer.Option(help="Before this Unix time.")]
ConfigFile = Annotated[Path | None, typer.Option("--config", "-c", help="indexplug.toml.")]


def _filters(**given: Any) -> dict[str, Any]:
    return {k: v for k, v in given.items() if v is not None}


@history_app.callback()
def history_list(
    ctx: typer.Context,
    index: IndexFilter = None,
    caller: CallerFilter = None,
    outcome: OutcomeFilter = None,
    since: SinceFilter = None,
    until: UntilFilter = None,
    after: Annotated[int, typer.Option(help="After this id (the cursor).")] = 0,
    limit: Annotated[int, typer.Option(help="Records to print (1-1000).")] = 100,
    config: ConfigFile = None,
) -> None:
    """Print search records as JSON lines, oldest first."""
    if ctx.invoked_subcommand is not None:
        return
    args = _filters(index=index, caller=caller, outcome=outcome, since=since, until=until)
    answer = _answer("history", {**args, "after": after, "limit": limit}, config)
    if not answer.get("ok"):
        raise _fail(str(answer.get("message")), UNAVAILABLE)
    data = answer.get("data") or {}
    for rec in data.get("records", []):
        sys.stdout.write(json.dumps(rec, sort_keys=True) + "\n")
    if data.get("next_after") is not None:
        err.print(f"more: --after {int(data['next_after'])}", highlight=False)


@history_app.command("export")
def history_export(
    file: Annotated[Path, typer.Argument(help="A new JSONL file ('-' for stdout).")],
    index: IndexFilter = None,
    caller: CallerFilter = None,
    outcome: OutcomeFilter = None,
    since: SinceFilter = None,
    until: UntilFilter = None,
) -> None:
    """Write every search record passing the filters as JSON lines (a new file only)."""
    import os

    from indexplug.history import HistoryError, store

    args = _filters(index=index, caller=caller, outcome=outcome, since=since, until=until)
    try:
        h = store()
        if str(file) == "-":
            n = h.export_jsonl(sys.stdout, **args)
        else:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
            try:
                fd = os.open(file, flags, 0o600)
            except FileExistsError:
                raise _fail(f"{file} exists; exports write new files only") from None
            except OSError as exc:
                raise _fail(f"cannot write {file}: {exc.strerror or exc}") from None
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                n = h.export_jsonl(fh, **args)
    except HistoryError as exc:
        raise _fail(str(exc), UNAVAILABLE) from None
    err.print(f"{n} search record(s) written", highlight=False)


@history_app.command("clear")
def history_clear(
    index: Annotated[str, typer.Option("--index", "-i", help="The index whose history to clear.")],
    before: Annotated[
        float | None, typer.Option(help="Only records before this Unix time.")
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    config: ConfigFile = None,
) -> None:
    """Delete an index's search history (only where the configuration allows remove; recorded
    in the audit log)."""
    if not yes and not typer.confirm(f"Delete the search history of '{index}'?"):
        raise typer.Exit(BAD_INPUT)
    answer = _answer("clear_history", _filters(index=index, before=before), config)
    from indexplug.invocation import exit_code

    (out.print if answer.get("ok") else err.print)(
        f"{answer.get('code')} {escape(str(answer.get('message')))}", highlight=False
    )
    raise typer.Exit(exit_code(answer))
