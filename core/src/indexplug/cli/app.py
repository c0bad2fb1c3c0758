"""The ``indexplug`` command line (typer + rich).

Every command that lists or reports has ``--json`` with a stable shape (the outcome models'
JSON).  Exit codes tell a result (0), no match (1), an empty index (2) and each failure kind apart
(see :data:`indexplug.outcomes.EXIT_CODES`); a usage or input error, click's own included (an
unknown option, ``-k abc``), exits 64 with one sentence on stderr, never a traceback; an error
nobody expected exits 3 (``INDEX_FAILED``) with one sentence too.  Only 130 (interrupted) and
141 (the reader of the output went away) are outside the table, as in any shell.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from typer.core import TyperGroup

from indexplug.cli.console import PIPE_CLOSED as PIPE_CLOSED
from indexplug.cli.console import LazyConsole, escape
from indexplug.errors import IndexplugError, InvalidRequest

if TYPE_CHECKING:
    from indexplug.targets import Target

# What a command imports it imports when it runs: ``--help`` and ``invoke`` never load rich's
# console, the outcome models, numpy or a backend (tests/core/test_import_boundary.py).
BAD_INPUT = 64
"""``EXIT_CODES["BAD_REQUEST"]``, written out so that starting needs no outcome models (a test
holds the two equal)."""
FAILED = 3
"""``EXIT_CODES["INDEX_FAILED"]``, likewise."""
INTERRUPTED = 130


out = LazyConsole()
err = LazyConsole(stderr=True)
_CLICK_ERROR: type[Exception] = next(
    c for c in type(typer.BadParameter("")).__mro__ if c.__name__ == "ClickException"
)
"""click's base of its usage and file errors (typer may carry its own copy of click, so it is
found from ``typer.BadParameter`` rather than imported)."""


def one_line(text: str, limit: int = 2000) -> str:
    """``text`` as one printable line of at most about ``limit`` characters: line breaks and
    control characters (a terminal escape in a hostile name) are shown escaped, never acted on,
    and a 100,000-character value echoed in a message is cut."""
    if len(text) > limit:
        text = f"{text[:limit]}... ({len(text) - limit:,} more characters)"
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class Commands(TyperGroup):
    """The command group, so that no input ends in a traceback or a code outside the table.

    click exits 2 on a usage error (which is ``INDEX_EMPTY`` here) and 1 on an abort (``NO_MATCH``
    here): both exit 64 instead.  An exception no command expected is one sentence and exit 3;
    ``INDEXPLUG_TRACE=1`` adds the traceback for whoever debugs it.
    """

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, _CLICK_ERROR):
            raise
        except BrokenPipeError:
            out.on_broken_pipe()  # written past rich, as invoke does: the same exit
        except Exception as exc:
            if os.environ.get("INDEXPLUG_TRACE"):
                traceback.print_exc()
            what = getattr(ctx, "invoked_subcommand", None) or "the command"
            raise fail(f"{what} failed unexpectedly: {type(exc).__name__}: {exc}", FAILED) from None

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except _CLICK_ERROR as exc:
            if not standalone_mode:
                raise
            _usage_error(exc)
            code = BAD_INPUT
        except typer.Abort:
            if not standalone_mode:
                raise
            err.print("[bold red]error:[/] aborted (nothing was confirmed)", highlight=False)
            code = BAD_INPUT
        else:
            code = rv if isinstance(rv, int) and not isinstance(rv, bool) else 0
        if not standalone_mode:
            return code
        sys.exit(code)


def _usage_error(exc: Exception) -> None:
    """Print click's usage error as one sentence (the help itself for a bare group)."""
    ctx = getattr(exc, "ctx", None)
    if type(exc).__name__ == "NoArgsIsHelpError":
        # its message is the help, which typer's rich help has printed already (it returns "")
        text = exc.format_message() if hasattr(exc, "format_message") else ""
        if text.strip():
            err.print(escape(text), highlight=False)
        return
    message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
    hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
    err.print(
        f"[bold red]error:[/] {escape(one_line(message))}{escape(hint)}",
        highlight=False,
        soft_wrap=True,
    )


app = typer.Typer(
    name="indexplug",
    help="Many retrieval index backends behind one honest interface.",
    cls=Commands,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

T = TypeVar("T")

BackendOpt = Annotated[
    str | None, typer.Option("--backend", "-b", help="Backend name (default: sqlite-fts5).")
]
OptionOpt = Annotated[
    list[str] | None,
    typer.Option("--option", "-o", help="Backend setting KEY=VALUE (repeatable)."),
]
EmbedderOpt = Annotated[
    str | None, typer.Option("--embedder", "-e", help="Embedder spec PROVIDER:MODEL.")
]
ConfigOpt = Annotated[
    Path | None, typer.Option("--config", "-c", help="indexplug.toml to read indexes from.")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON (stable shape).")]
IndexOpt = Annotated[str, typer.Option("--index", "-i", help="Index name.")]
DeadlineOpt = Annotated[
    float | None, typer.Option("--deadline", help="Seconds the op may take (default 10).")
]


def fail(message: str, code: int = BAD_INPUT) -> typer.Exit:
    """Print ``message`` as one ``error:`` line on stderr; the exit to raise with ``code``."""
    err.print(f"[bold red]error:[/] {escape(one_line(message))}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def guarded(fn: Callable[[], T]) -> T:
    """Run a command body, turning expected errors into one sentence and an exit code.

    The caller's mistakes (a bad request, option, setting, name, configuration or input file,
    a path that is missing or of the wrong kind) exit 64; any other ``OSError`` (a full disk
    while saving, an I/O error) is the index failing and exits 3.
    """
    try:
        return fn()
    except typer.Exit:
        raise
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError) as exc:
        raise fail(str(exc)) from None
    except BrokenPipeError:
        raise  # the reader of the output went away: 141, quietly (Commands.invoke)
    except OSError as exc:
        raise fail(f"the index could not be written or read: {exc}", FAILED) from None
    except KeyError as exc:  # str() of a KeyError is the key's repr
        raise fail(str(exc).strip("'\"")) from None
    except (IndexplugError, ValueError) as exc:
        raise fail(str(exc)) from None


def cli_change(*args: Any, **kw: Any) -> Any:
    """:func:`indexplug.cli.records.cli_change` (the audit log), imported when first used."""
    from indexplug.cli import records

    return records.cli_change(*args, **kw)


def resolve_target(index: str, **how: Any) -> Target:
    """:func:`indexplug.cli.resolve.resolve_target`, imported when a command first needs it."""
    from indexplug.cli import resolve

    return resolve.resolve_target(index, **how)


def target(
    index: str,
    backend: str | None,
    option: list[str] | None,
    embedder: str | None,
    config: Path | None,
) -> Target:
    return resolve_target(index, backend=backend, options=option, embedder=embedder, config=config)


def emit(outcome: Any, as_json: bool) -> None:
    if as_json:
        out.print_json(outcome.model_dump_json())
    else:
        style = "green" if outcome.ok else ("yellow" if outcome.code == "NO_MATCH" else "red")
        out.print(f"[{style}]{outcome.code}[/] {outcome.message}", highlight=False)


def finish(outcome: Any) -> None:
    from indexplug.outcomes import EXIT_CODES
    from indexplug.transfer import EXIT_CODES as TRANSFER_EXIT_CODES

    raise typer.Exit({**EXIT_CODES, **TRANSFER_EXIT_CODES}.get(outcome.code, FAILED))


@contextmanager
def progress_bar(label: str, quiet: bool) -> Iterator[Callable[[int, int], None]]:
    """A rich progress bar on stderr for a long write; ``progress(done, total)`` moves it.
    Hidden for ``--json`` and when stderr is not a terminal."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    with Progress(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err.get(),
        disable=quiet or not sys.stderr.isatty(),
    ) as bar:
        task = bar.add_task(label, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total or None)


@app.command()
def backends(as_json: JsonOpt = False) -> None:
    """List installed backends with readiness, capabilities and score scale."""
    from indexplug.plugins import get_registry

    reg = get_registry()
    rows = reg.describe_backends()
    problems = [{"plugin": p.plugin, "problem": p.problem} for p in reg.problems]
    if as_json:
        out.print_json(
            json.dumps(
                {
                    "backends": [r.model_dump(mode="json") for r in rows],
                    "embedders": [e.model_dump(mode="json") for e in reg.describe_embedders()],
                    "problems": problems,
                }
            )
        )
        return
    from rich.padding import Padding
    from rich.table import Table

    out.print("[bold]indexplug backends[/]", highlight=False)
    for r in rows:
        caps = ", ".join(
            k if v is True else f"{k} ({', '.join(sorted(v))})"
            for k, v in (r.capabilities.model_dump() if r.capabilities else {}).items()
            if v
        )
        ready = "[green]ready[/]" if r.ready else f"[red]not ready[/]: {escape(r.reason or '')}"
        # one block per backend, its fields stacked: every value keeps the width of the
        # terminal less a label, where six columns side by side left each a few characters
        block = Table.grid(padding=(0, 2))
        block.add_column(style="dim", no_wrap=True)
        block.add_column(overflow="fold")
        block.add_row("plugin", escape(r.plugin))
        block.add_row("scale", escape(r.score_scale.name) if r.score_scale else "-")
        block.add_row("capabilities", escape(caps) or "-")
        block.add_row("description", escape(r.description) or "-")
        out.print(f"\n[bold cyan]{escape(r.name)}[/]  {ready}", highlight=False)
        out.print(Padding(block, (0, 0, 0, 2)), highlight=False)
    out.print()
    embedders = ", ".join(e.provider for e in reg.describe_embedders())
    out.print(f"embedders: {embedders or 'none'}")
    for p in problems:
        out.print(f"[red]plugin problem[/] {p['plugin']}: {p['problem']}", highlight=False)


@app.command()
def index(
    path: Annotated[Path, typer.Argument(help="Folder (or file) to index.")],
    index: IndexOpt,
    backend: BackendOpt = None,
    option: OptionOpt = None,
    embedder: EmbedderOpt = None,
    config: ConfigOpt = None,
    max_bytes: Annotated[
        int | None, typer.Option(help="Storage budget (set on first write).")
    ] = None,
    max_chars: Annotated[int, typer.Option(help="Longest passage in characters.")] = 1200,
    overlap: Annotated[int, typer.Option(help="Characters shared by neighbouring passages.")] = 150,
    allow_drop: Annotated[
        bool,
        typer.Option(
            "--allow-drop",
            help="Let the run drop and rebuild the index when its ingest manifest was lost.",
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Index the text files of a folder; re-running updates only what changed."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from indexplug.ingest import RebuildNotAllowed, index_folder
    from indexplug.invocation import folder_code
    from indexplug.outcomes import EXIT_CODES

    def body() -> int:
        t = target(index, backend, option, embedder, config)
        if not path.exists():
            raise FileNotFoundError(f"{path} does not exist")
        with Progress(
            TextColumn("indexing"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=err.get(),
            disable=as_json or not sys.stderr.isatty(),
        ) as bar:
            task = bar.add_task("files", total=None)
            try:
                report = cli_change(
                    "index_folder",
                    t.index,
                    t.backend_name,
                    config,
                    lambda: index_folder(
                        t.guard,
                        path,
                        t.index,
                        max_bytes=max_bytes or t.max_bytes,
                        max_chars=max_chars,
                        overlap=overlap,
                        progress=lambda n, total: bar.update(task, completed=n, total=total),
                        allow_drop=allow_drop,
                    ),
                    detail={"path": str(path)},
                    code_of=folder_code,
                )
            except RebuildNotAllowed as exc:
                raise fail(str(exc), EXIT_CODES["NOT_ALLOWED"]) from None
        if as_json:
            out.print_json(report.model_dump_json())
        else:
            out.print(
                f"[green]indexed[/] {report.files_indexed} file(s) into '{t.index}' "
                f"({report.passages_added} passage(s) added, {report.passages_known} known, "
                f"{report.passages_removed} removed); {report.files_unchanged} unchanged, "
                f"{report.skipped_binary} binary skipped, {report.files_removed} gone.",
                highlight=False,
            )
            for f in report.failures:
                err.print(f"[red]failed:[/] {escape(one_line(f))}", highlight=False)
        return EXIT_CODES[folder_code(report)]

    raise typer.Exit(guarded(body))


@app.command()
def add(
    file: Annotated[Path, typer.Argument(help="JSONL of passages ('-' for stdin).")],
    index: IndexOpt,
    backend: BackendOpt = None,
    option: OptionOpt = None,
    embedder: EmbedderOpt = None,
    config: ConfigOpt = None,
    max_bytes: Annotated[int | None, typer.Option(help="Storage budget.")] = None,
    deadline: DeadlineOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Add passages from JSONL: each line a Passage, or {"text", "uri", ...} to build one
    ("key": the caller's document id, whose earlier passages the new ones replace)."""
    from indexplug.passages import Passage

    def body() -> Any:
        t = target(index, backend, option, embedder, config)
        lines = _input_lines(file)
        passages = []
        for n, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
                if "source" in data:
                    passages.append(Passage.model_validate(data))
                else:
                    passages.append(
                        Passage.create(
                            data["text"],
                            data["uri"],
                            start=int(data.get("start", 0)),
                            end=data.get("end"),
                            metadata=data.get("metadata"),
                            key=data.get("key"),
                        )
                    )
            except (KeyError, TypeError, ValueError, RecursionError) as exc:
                reason = f"{type(exc).__name__}: {exc}" if isinstance(exc, RecursionError) else exc
                raise ValueError(f"line {n} of {file} is not a passage: {reason}") from None
        with progress_bar("adding", as_json) as moved:
            return cli_change(
                "add",
                t.index,
                t.backend_name,
                config,
                lambda: t.guard.add(
                    t.index,
                    passages,
                    max_bytes=max_bytes or t.max_bytes,
                    deadline_s=deadline,
                    progress=moved,
                ),
                keys=sorted({p.key for p in passages if p.key is not None}),
            )

    outcome = guarded(body)
    emit(outcome, as_json)
    finish(outcome)


def _input_lines(file: Path) -> list[str]:
    """The lines of the JSONL input (``-``: standard input); a file that cannot be read as
    UTF-8 text (a folder, no permission, binary) or is over the input bound
    (:data:`~indexplug.cli.inputs.MAX_INPUT_BYTES`) is the caller's mistake, refused naming it."""
    from indexplug.cli.inputs import read_input

    try:
        text = read_input(file).decode("utf-8")
    except InvalidRequest:
        raise
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise InvalidRequest(f"cannot read {file} as UTF-8 text: {why}", field="file") from None
    return text.splitlines()


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="Plain-text query.")],
    index: IndexOpt,
    k: Annotated[int, typer.Option("-k", "--top-k", help="How many hits.")] = 10,
    backend: BackendOpt = None,
    option: OptionOpt = None,
    embedder: EmbedderOpt = None,
    config: ConfigOpt = None,
    deadline: DeadlineOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Search an index and print the hits."""

    def body() -> Any:
        t = target(index, backend, option, embedder, config)
        return t.search(query, top_k=k, deadline_s=deadline)

    outcome = guarded(body)
    from indexplug.outcomes import Searched

    if isinstance(outcome, Searched) and not as_json:
        from rich.table import Table
        from rich.text import Text

        # two narrow columns and one wide one: where each hit comes from (its source, shown
        # relative to the working folder) above the passage, so neither is squeezed
        table = Table(title=f"{outcome.message}  scale: {outcome.scale.name}")
        table.add_column("#", justify="right", no_wrap=True)
        table.add_column("score", justify="right", no_wrap=True)
        table.add_column("source / passage", overflow="fold", ratio=1)
        for h in outcome.hits:
            snippet = " ".join(h.passage.text.split())
            snippet = snippet[:200] + ("…" if len(snippet) > 200 else "")
            where = f"{display_uri(h.passage.source.uri)} [{h.passage.start}:{h.passage.end}]"
            cell = Text(where, style="cyan")
            cell.append("\n")
            cell.append(snippet)
            table.add_row(str(h.rank), f"{h.score:.3f}", cell)
        out.print(table)
    else:
        emit(outcome, as_json)
    finish(outcome)


def display_uri(uri: str, cwd: Path | None = None) -> str:
    """``uri`` as a person reads it: a ``file:`` URI of a path under the working folder (``cwd``)
    as that path relative to it, any other URI as it is.  For display only (``--json`` keeps
    the URI)."""
    from urllib.parse import unquote, urlparse

    try:
        parts = urlparse(uri)
        if parts.scheme != "file" or parts.netloc not in ("", "localhost"):
            return uri
        if os.name == "nt":  # urllib.request costs a search its http, ssl and email modules
            from urllib.request import url2pathname

            path = Path(url2pathname(parts.path))
        else:
            path = Path(unquote(parts.path))
        here = cwd or Path.cwd()
        for base in (here, here.resolve()):
            try:
                relative = path.relative_to(base)
            except ValueError:
                continue
            return str(relative) if relative.parts else uri
    except (OSError, ValueError):  # a working folder that is gone; a NUL in the path
        return uri
    return uri


@app.command()
def status(
    index: IndexOpt,
    backend: BackendOpt = None,
    option: OptionOpt = None,
    embedder: EmbedderOpt = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show how many passages an index holds, its size and budget."""
    outcome = guarded(lambda: target(index, backend, option, embedder, config).guard.status(index))
    emit(outcome, as_json)
    finish(outcome)


@app.command()
def stats(
    index: IndexOpt,
    backend: BackendOpt = None,
    option: OptionOpt = None,
    embedder: EmbedderOpt = None,
    config: ConfigOpt = None,
    deadline: DeadlineOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show what an index holds: passages (as status says and as a scan counts them), keys,
    sources, bytes against the budget, text lengths, embedder, score scale, last write, and
    the backend's own figures."""
    import time

    from indexplug.ops import StatsData
    from indexplug.stats import index_stats

    def body() -> Any:
        return index_stats(
            target(index, backend, option, embedder, config).guard, index, deadline_s=deadline
        )

    got = guarded(body)
    if not isinstance(got, StatsData):
        emit(got, as_json)
        finish(got)
    if as_json:
        out.print_json(got.model_dump_json())
        raise typer.Exit(0)
    lengths = got.text_chars
    rows = [
        (
            "passages",
            f"{got.passages}" + (f" (scan: {got.scanned})" if got.scanned is not None else ""),
        ),
        ("distinct keys", got.distinct_keys),
        ("distinct sources", got.distinct_sources),
        ("bytes", f"{got.bytes_used}" + (f" of {got.max_bytes}" if got.max_bytes else "")),
        ("text bytes", got.text_bytes),
        (
            "text chars",
            f"min {lengths.min}, p50 {lengths.p50}, p90 {lengths.p90}, max {lengths.max}"
            if lengths
            else None,
        ),
        ("embedder", f"{got.embedder} (dim {got.dim})" if got.embedder else None),
        ("score scale", got.scale.name),
        (
            "last write",
            time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(got.last_write))
            if got.last_write
            else None,
        ),
        *((f"extra: {k}", v) for k, v in sorted(got.extras.items())),
        *(("note", n) for n in got.notes),
    ]
    for name, value in rows:
        shown = "-" if value is None else one_line(str(value), 200)
        out.print(f"{name}: {shown}", highlight=False, markup=False)


@app.command()
def similarity(
    index: IndexOpt,
    query: Annotated[str, typer.Argument(help="The text scored against the others.")],
    text: Annotated[
        list[str] | None, typer.Option("--text", "-t", help="A text to score (repeatable).")
    ] = None,
    id_: Annotated[
        list[str] | None, typer.Option("--id", help="A stored passage's id (repeatable).")
    ] = None,
    backend: BackendOpt = None,
    option: OptionOpt = None,
    embedder: EmbedderOpt = None,
    config: ConfigOpt = None,
    deadline: DeadlineOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Score QUERY against texts (--text) or stored passages (--id) with the index's own
    scorer (cosine for a dense index, MaxSim for late interaction); a lexical index exits 69
    (not supported)."""
    from indexplug.ops import SimilarityData
    from indexplug.similarity import NotSupported, score

    if bool(text) == bool(id_):
        raise fail("give --text or --id (one of them, repeatable)")

    def body() -> Any:
        return score(
            target(index, backend, option, embedder, config).guard,
            index,
            query,
            texts=list(text) if text else None,
            ids=list(id_) if id_ else None,
            deadline_s=deadline,
        )

    got = guarded(body)
    if isinstance(got, NotSupported):
        raise fail(got.reason, 69)
    if not isinstance(got, SimilarityData):
        emit(got, as_json)
        finish(got)
    if as_json:
        out.print_json(got.model_dump_json())
    else:
        for s in got.scores:
            shown = s.id or (text or [])[s.n]
            out.print(f"{s.score:.6f}  {escape(one_line(shown, 80))}", highlight=False)
        for missing in got.missing_ids:
            err.print(f"missing: {escape(missing)}", highlight=False)
    raise typer.Exit(0)


FilterOpt = Annotated[
    str | None,
    typer.Option(
        "--filter",
        "-f",
        help='Metadata filter as JSON, e.g. \'{"year": {"$gte": 2020}}\' (see docs/concepts.md).',
    ),
]
KeyOpt = Annotated[
    list[str] | None, typer.Option("--key", help="A caller key (repeatable): its passages.")
]


def parse_filter_option(text: str | None) -> Any:
    """``--filter`` as a checked filter (a bad one is the caller's mistake: exit 64)."""
    if text is None:
        return None
    from indexplug.filters import parse_filter

    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise InvalidRequest(f"--filter is not JSON: {exc}", field="filters") from None
    parse_filter(value)
    return value


@app.command()
def remove(
    ids: Annotated[list[str] | None, typer.Argument(help="Passage ids to remove.")] = None,
    index: IndexOpt = "",
    key: KeyOpt = None,
    filter_: FilterOpt = None,
    backend: BackendOpt = None,
    option: OptionOpt = None,
    embedder: EmbedderOpt = None,
    config: ConfigOpt = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Remove passages by id, by caller key (--key) or by filter (--filter); asks first unless
    --yes."""

    def body() -> Any:
        if not index:
            raise InvalidRequest("give --index", field="index")
        filters = parse_filter_option(filter_)
        if not (ids or key or filters is not None):
            raise InvalidRequest("give ids, --key or --filter (what to remove)", field="ids")
        t = target(index, backend, option, embedder, config)
        what = ", ".join(
            part
            for part in (
                f"{len(ids)} passage(s)" if ids else "",
                f"every passage of {len(key)} key(s)" if key else "",
                "every passage passing the filter" if filters is not None else "",
            )
            if part
        )
        if not yes and not typer.confirm(f"Remove {what} from '{t.index}'?"):
            raise typer.Exit(BAD_INPUT)
        return cli_change(
            "remove",
            t.index,
            t.backend_name,
            config,
            lambda: t.guard.remove(t.index, ids or [], keys=key or [], filters=filters),
            keys=key or [],
            detail={"filters": filters} if filters is not None else None,
        )

    outcome = guarded(body)
    emit(outcome, as_json)
    finish(outcome)


# -- the data interface: get, scan, indexes, drop; moving an index: export, import, copy ------


def print_passages(title: str, passages: Sequence[Any]) -> None:
    """Passages for a person: id, source and span above the text (stored text, untrusted)."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title)
    table.add_column("id", no_wrap=True)
    table.add_column("source / passage", overflow="fold", ratio=1)
    for p in passages:
        where = f"{display_uri(p.source.uri)} [{p.start}:{p.end}]"
        if p.key is not None:
            where += f" key={p.key}"
        cell = Text(where, style="cyan")
        snippet = " ".join(p.text.split())
        cell.append("\n" + snippet[:300] + ("…" if len(snippet) > 300 else ""))
        table.add_row(p.id[:12] + "…", cell)
    out.print(table)


@app.command()
def get(
    ids: Annotated[list[str] | None, typer.Argument(help="Passage ids.")] = None,
    index: IndexOpt = "",
    key: KeyOpt = None,
    backend: BackendOpt = None,
    option: OptionOpt = None,
    embedder: EmbedderOpt = None,
    config: ConfigOpt = None,
    deadline: DeadlineOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Read stored passages back by id or by caller key (--key); lists what is not there."""

    def body() -> Any:
        if not index:
            raise InvalidRequest("give --index", field="index")
        if not (ids or key):
            raise InvalidRequest("give ids or --key (what to read)", field="ids")
        t = target(index, backend, option, embedder, config)
        return t.guard.get(t.index, ids or [], keys=key or [], deadline_s=deadline)

    outcome = guarded(body)
    if outcome.code == "GOT" and not as_json:
        print_passages(outcome.message, outcome.passages)
        for missing in [*outcome.missing_ids, *outcome.missing_keys]:
            err.print(f"[yellow]not there:[/] {escape(one_line(missing))}", highlight=False)
    else:
        emit(outcome, as_json)
    finish(outcome)


@app.command()
def scan(
    index: IndexOpt,
    filter_: FilterOpt = None,
    after: Annotated[
        str | None, typer.Option(help="Cursor: the last id of the previous page.")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=10_000, help="Passages per page.")] = 20,
    backend: BackendOpt = None,
    option: OptionOpt = None,
    embedder: EmbedderOpt = None,
    config: ConfigOpt = None,
    deadline: DeadlineOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """One page of an index's passages in id order; the next page is --after the cursor."""

    def body() -> Any:
        t = target(index, backend, option, embedder, config)
        return t.guard.scan(
            t.index,
            filters=parse_filter_option(filter_),
            after=after,
            limit=limit,
            deadline_s=deadline,
        )

    outcome = guarded(body)
    if outcome.code == "SCANNED" and not as_json:
        print_passages(outcome.message, outcome.passages)
        if outcome.next_after:
            err.print(f"next page: --after {outcome.next_after}", highlight=False)
    else:
        emit(outcome, as_json)
    finish(outcome)


@app.command()
def indexes(
    backend: BackendOpt = None,
    option: OptionOpt = None,
    embedder: EmbedderOpt = None,
    config: ConfigOpt = None,
    index: Annotated[
        str | None,
        typer.Option("--index", "-i", help="A configured index: list its backend's indexes."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """List the indexes a backend holds, with their passage counts."""

    def body() -> Any:
        t = target(index or "default", backend, option, embedder, config)
        return t.guard.indexes()

    outcome = guarded(body)
    if outcome.code == "INDEXES" and not as_json:
        from rich.table import Table

        table = Table(title=outcome.message)
        table.add_column("index")
        table.add_column("passages", justify="right")
        for info in outcome.indexes:
            table.add_row(escape(info.name), str(info.passages))
        out.print(table)
    else:
        emit(outcome, as_json)
    finish(outcome)


@app.command()
def drop(
    index: IndexOpt,
    backend: BackendOpt = None,
    option: OptionOpt = None,
    embedder: EmbedderOpt = None,
    config: ConfigOpt = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Delete a whole index (asks first unless --yes)."""

    def body() -> Any:
        t = target(index, backend, option, embedder, config)
        if not callable(getattr(t.guard.backend, "op_drop", None)):
            raise InvalidRequest(f"backend '{t.backend_name}' does not offer 'drop'")
        if not yes and not typer.confirm(f"Delete the whole index '{t.index}'?"):
            raise typer.Exit(BAD_INPUT)
        return cli_change("drop", t.index, t.backend_name, config, lambda: t.guard.drop(t.index))

    outcome = guarded(body)
    emit(outcome, as_json)
    finish(outcome)


@app.command()
def migrate(
    index: IndexOpt,
    backend: BackendOpt = None,
    option: OptionOpt = None,
    embedder: EmbedderOpt = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Move an index written by an earlier version of its backend to the layout it writes now
    (resumable: run it again if it stops)."""

    def body() -> Any:
        t = target(index, backend, option, embedder, config)
        if not callable(getattr(t.guard.backend, "op_migrate", None)):
            raise InvalidRequest(f"backend '{t.backend_name}' does not offer 'migrate'")
        return cli_change(
            "migrate",
            t.index,
            t.backend_name,
            config,
            lambda: t.guard.call_extra("migrate", t.index),
        )

    outcome = guarded(body)
    emit(outcome, as_json)
    finish(outcome)


@app.command()
def export(
    file: Annotated[Path, typer.Argument(help="JSONL file to write ('-' for stdout).")],
    index: IndexOpt,
    filter_: FilterOpt = None,
    backend: BackendOpt = None,
    option: OptionOpt = None,
    embedder: EmbedderOpt = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Write an index's passages to JSONL, one passage per line with every field (id, key,
    text, source, span, metadata, digest)."""
    from indexplug import transfer

    def body() -> Any:
        t = target(index, backend, option, embedder, config)
        filters = parse_filter_option(filter_)
        if str(file) == "-":
            return transfer.export(t.guard, t.index, sys.stdout, filters=filters)
        with progress_bar("exporting", as_json) as moved:
            return transfer.export(t.guard, t.index, file, filters=filters, progress=moved)

    outcome = guarded(body)
    if str(file) != "-":
        emit(outcome, as_json)
    elif not outcome.ok:
        emit(outcome, False)
    finish(outcome)


@app.command("import")
def import_(
    file: Annotated[Path, typer.Argument(help="JSONL written by export ('-' for stdin).")],
    index: IndexOpt,
    backend: BackendOpt = None,
    option: OptionOpt = None,
    embedder: EmbedderOpt = None,
    config: ConfigOpt = None,
    max_bytes: Annotated[int | None, typer.Option(help="Storage budget.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Add the passages of an export to an index; every line is checked (its id and digest)
    before anything is written."""
    from indexplug import transfer

    def body() -> Any:
        t = target(index, backend, option, embedder, config)
        with progress_bar("importing", as_json) as moved:
            if str(file) == "-":
                return transfer.import_(
                    t.guard, t.index, sys.stdin.buffer, max_bytes=max_bytes, progress=moved
                )
            if file.is_dir():
                raise IsADirectoryError(f"{file} is a folder, not a JSONL file")
            return cli_change(
                "import",
                t.index,
                t.backend_name,
                config,
                lambda: transfer.import_(
                    t.guard,
                    t.index,
                    file,
                    max_bytes=max_bytes or t.max_bytes,
                    progress=moved,
                ),
                detail={"path": str(file)},
            )

    outcome = guarded(body)
    emit(outcome, as_json)
    finish(outcome)


def end_target(
    spec: str, options: list[str] | None, embedder: str | None, config: Path | None
) -> Any:
    """``BACKEND:INDEX`` (with its --*-option settings), or the name of a configured index."""
    backend, sep, name = spec.partition(":")
    if not sep:
        if options or embedder:
            raise InvalidRequest(
                f"{spec!r} is a configured index: its settings come from the config"
            )
        return resolve_target(spec, config=config)
    if not backend or not name:
        raise InvalidRequest(f"{spec!r} is not BACKEND:INDEX")
    return resolve_target(name, backend=backend, options=options, embedder=embedder, config=None)


@app.command()
def copy(
    source: Annotated[str, typer.Argument(help="BACKEND:INDEX (or a configured index) to copy.")],
    dest: Annotated[str, typer.Argument(help="BACKEND:INDEX (or a configured index) to fill.")],
    src_option: Annotated[
        list[str] | None, typer.Option("--src-option", help="Source setting KEY=VALUE.")
    ] = None,
    dst_option: Annotated[
        list[str] | None, typer.Option("--dst-option", help="Target setting KEY=VALUE.")
    ] = None,
    src_embedder: Annotated[
        str | None, typer.Option("--src-embedder", help="Source embedder PROVIDER:MODEL.")
    ] = None,
    dst_embedder: Annotated[
        str | None, typer.Option("--dst-embedder", help="Target embedder PROVIDER:MODEL.")
    ] = None,
    config: ConfigOpt = None,
    restart: Annotated[
        bool, typer.Option(help="Start over instead of going on from an interrupted copy.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Copy every passage of one index into another, on any two backends (a dense target
    embeds them), with a progress bar; an interrupted copy goes on where it stopped when run
    again, and the result is verified (counts, ids, sample queries on one score scale)."""
    from indexplug import transfer
    from indexplug.invocation import end_id, refuse_same_index

    def body() -> Any:
        src = end_target(source, src_option, src_embedder, config)
        dst = end_target(dest, dst_option, dst_embedder, config)
        refuse_same_index(src, dst)
        with progress_bar("copying", as_json) as moved:
            return cli_change(
                "copy",
                dst.index,
                dst.backend_name,
                config,
                lambda: transfer.copy(
                    src.guard,
                    src.index,
                    dst.guard,
                    dst.index,
                    progress=moved,
                    source_id=end_id(src),
                    target_id=end_id(dst),
                    restart=restart,
                    max_bytes=dst.max_bytes,
                ),
                detail={"source": source},
            )

    outcome = guarded(body)
    emit(outcome, as_json)
    if not as_json and outcome.code in ("COPIED", "COPY_MISMATCH"):
        v = outcome.verification
        err.print(
            f"checked: {v.ids_checked} id(s), {v.missing_ids} missing; "
            f"{sum(q.agree for q in v.queries)}/{len(v.queries)} sample queries agree"
            + (f"; {v.note}" if v.note else ""),
            highlight=False,
        )
    finish(outcome)


@app.command("eval")
def eval_(
    dataset: Annotated[
        Path, typer.Argument(help="BEIR folder: corpus.jsonl, queries.jsonl, qrels/")
    ],
    backend: BackendOpt = None,
    option: OptionOpt = None,
    embedder: EmbedderOpt = None,
    config: ConfigOpt = None,
    index: Annotated[str | None, typer.Option(help="Index name (default: eval-DATASET).")] = None,
    split: Annotated[str, typer.Option(help="Qrels split.")] = "test",
    keep: Annotated[bool, typer.Option(help="Keep the index (default: reuse is refused).")] = False,
    batch: Annotated[
        int,
        typer.Option(
            min=1,
            max=10_000,
            help="Passages per add (one add for the whole corpus suits engines that "
            "rebuild on every add).",
        ),
    ] = 1000,
    as_json: JsonOpt = False,
) -> None:
    """Index a BEIR dataset into a fresh index and report nDCG@10, Recall@100, MRR@10, speed."""
    from indexplug.evaluation import load_beir, run_eval

    def body() -> Any:
        ds = load_beir(dataset, split)
        name = index or f"eval-{''.join(c if c.isalnum() else '-' for c in ds.name.lower())}"
        t = target(name, backend, option, embedder, config)
        st = t.guard.status(t.index)
        if st.code == "STATUS" and st.exists and st.passages:  # type: ignore[union-attr]
            raise ValueError(
                f"index '{t.index}' already holds passages; eval needs a fresh index "
                "(remove it or pass --index NAME)"
            )
        report = run_eval(
            t.guard,
            ds,
            t.index,
            backend=t.backend_name,
            options=t.describe(),
            searcher=t.search,
            batch=batch,
        )
        if not keep:
            t.drop()
        return report

    report = guarded(body)
    if as_json:
        out.print_json(report.model_dump_json())
        return
    from rich.table import Table

    table = Table(title=f"{report.dataset} on {report.backend}")
    table.add_column("measure")
    table.add_column("value", justify="right")
    for label, value in (
        ("nDCG@10", f"{report.ndcg_at_10:.4f}"),
        ("Recall@100", f"{report.recall_at_100:.4f}"),
        ("MRR@10", f"{report.mrr_at_10:.4f}"),
        ("passages", str(report.passages)),
        ("queries", str(report.queries)),
        ("indexing (passages/s)", f"{report.passages_per_second:,.0f}"),
        (
            "latency p50 / p95 / p99 (ms)",
            f"{report.latency_ms.p50} / {report.latency_ms.p95} / {report.latency_ms.p99}",
        ),
        ("outcomes", ", ".join(f"{k}={v}" for k, v in report.outcomes.items())),
    ):
        table.add_row(label, value)
    out.print(table)


@app.command()
def conformance(
    backend: Annotated[str, typer.Argument(help="Installed backend to certify.")],
    option: OptionOpt = None,
    embedder: EmbedderOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Run the conformance kit against an installed backend and print its report card."""
    from indexplug.cli.resolve import parse_options
    from indexplug.testing.card import conformance_command

    def body() -> int:
        opts = parse_options(option)
        if embedder:
            opts["embedder"] = embedder
        return conformance_command(backend, as_json, opts)

    raise typer.Exit(guarded(body))


# Deployments: config check/show, invoke, serve (indexplug.cli.orchestration).
from indexplug.cli.orchestration import config_app, invoke_command, serve_command  # noqa: E402

app.add_typer(config_app)
app.command("invoke")(invoke_command)
app.command("serve")(serve_command)

# What indexplug records: audit, history (indexplug.cli.records).
from indexplug.cli.records import audit_app, history_app  # noqa: E402

app.add_typer(audit_app)
app.add_typer(history_app)

# The named tokens of serve --http (indexplug.cli.tokens).
from indexplug.cli.tokens import token_app  # noqa: E402

app.add_typer(token_app)


QUIET_PROGRESS = {"HF_HUB_DISABLE_PROGRESS_BARS": "1", "TQDM_DISABLE": "1"}
"""What turns off the progress bars of the libraries a plugin loads (huggingface_hub's and, through
it, transformers' "Loading weights"; tqdm's generally), read when those libraries import."""


def quiet_progress(argv: Sequence[str], *, terminal: bool) -> bool:
    """Turn off libraries' progress bars unless a person watches a terminal: when stderr is not
    one, and in ``--json``, ``invoke`` and ``serve`` mode, where a program reads the output.

    Only the environment is touched (no library is imported for it), and a value the caller set
    wins.  Returns whether the bars were turned off."""
    program = "--json" in argv or (bool(argv) and argv[0] in ("invoke", "serve"))
    if terminal and not program:
        return False
    for key, value in QUIET_PROGRESS.items():
        os.environ.setdefault(key, value)
    return True


def _stdout_closed() -> bool:
    """Whether the process was started with standard output closed (``>&-``)."""
    try:
        os.fstat(1)
    except OSError:
        return True
    return sys.stdout is None


def main() -> None:
    """Console-script entry point.

    With standard output closed (``cmd >&-``) a command's answer would go nowhere, or worse,
    into the first file the command opens (which takes descriptor 1): refused before anything
    is opened, with exit 64 and one line on stderr.
    """
    if _stdout_closed():
        sys.stderr.write("error: standard output is closed: the answer would be lost\n")
        raise SystemExit(BAD_INPUT)
    quiet_progress(sys.argv[1:], terminal=sys.stderr.isatty())
    try:
        app()
    except KeyboardInterrupt:
        err.print("interrupted")
        raise SystemExit(INTERRUPTED) from None


if __name__ == "__main__":
    main()
