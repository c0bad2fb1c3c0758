"""Moving and backing up an index: ``export``, ``import_`` and ``copy``.

* :func:`export` writes an index as JSONL, one passage per line in the passage's own JSON form
  (``id``, ``text``, ``source`` with its provenance, ``start``/``end``, ``document_sha256``,
  ``metadata``, ``digest`` and ``key``), streamed page by page from ``Guard.scan`` into a
  temporary file that replaces the target only when complete.
* :func:`import_` reads such a file.  Nothing in it is trusted: every line is parsed and
  validated (its id must be its content address and its digest its fields'; a line that is not
  is refused with its number) *before* anything is written, then the passages are added in
  batches.  Importing the same file again adds nothing (ids are content addresses).
* :func:`copy` streams one index into another (any two backends): scan pages become adds, so a
  dense target embeds the passages as it stores them, and ids, keys and provenance are kept.
  Passages with a caller key are copied last, each key's passages in one add (a key split over
  two adds would have the second replace the first).  It is resumable: after each page it
  checkpoints the scan cursor in a small state file under ``INDEXPLUG_HOME/transfers``; a
  repeat of the same copy after an interruption goes on from there (re-adding a page is
  harmless: its passages are *known*).  At the end it verifies: both counts, every source id
  present in the target, and, where the two backends score on the same scale, the top hits of
  a sample of queries.

Paths from a caller who is not the user at the shell (``invoke``, MCP) are confined like
``index_folder``'s: see :func:`confined_output` and :func:`open_confined`.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import stat
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from indexplug.confine import Refused, Why, inside, open_folder, real_path
from indexplug.errors import InvalidRequest
from indexplug.home import home_dir
from indexplug.outcomes import (
    Got,
    Indexed,
    IndexFailed,
    IndexStatus,
    IndexTimeout,
    IndexUnavailable,
    NoMatch,
    OverBudget,
    Scanned,
    Searched,
)
from indexplug.passages import MAX_PASSAGE_CHARS, Passage

_PROC_FD = Path("/proc/self/fd")

if TYPE_CHECKING:
    from indexplug.guard import Guard

PAGE = 500
"""Passages per scan page (and per add) of an export or a copy."""
IMPORT_BATCH = 1000
"""Passages per add of an import."""
KEYS_PER_GET = 64
"""Caller keys read back per ``get`` while copying keyed passages."""
MAX_LINE_BYTES = MAX_PASSAGE_CHARS * 4 + (1 << 20)
"""Longest line an import reads: the longest passage in UTF-8 and a megabyte of the rest."""
MAX_IMPORT_BYTES = 1 << 34
"""Largest file an import reads (16 GiB), checked while reading."""
SAMPLE_QUERIES = 5
VERIFY_TOP_K = 10
SCORE_TOLERANCE = 1e-6

Progress = Callable[[int, int], None]
"""``progress(done, total)``: passages written so far, of how many (total 0: not known)."""
Failure = IndexFailed | IndexTimeout | IndexUnavailable | OverBudget


class _Report(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    @property
    def ok(self) -> bool:
        return True


class Exported(_Report):
    """An index written to JSONL: how many passages, where, how many bytes."""

    code: Literal["EXPORTED"] = "EXPORTED"
    index: str
    backend: str
    path: str
    passages: int = Field(ge=0)
    bytes: int = Field(ge=0)

    @property
    def message(self) -> str:
        return f"Exported {self.passages} passage(s) of '{self.index}' to {self.path}."


class Imported(_Report):
    """A JSONL file read into an index (``added + known`` is every distinct passage)."""

    code: Literal["IMPORTED"] = "IMPORTED"
    index: str
    backend: str
    lines: int = Field(ge=0, description="Passages read (blank lines not counted).")
    added: int = Field(ge=0)
    known: int = Field(ge=0)
    replaced: int = Field(ge=0, description="Earlier passages of the file's keys replaced.")

    @property
    def message(self) -> str:
        return (
            f"Imported {self.lines} passage(s) into '{self.index}': {self.added} added, "
            f"{self.known} already there."
        )


class QueryCheck(BaseModel):
    """One sample query searched on both sides."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    query: str
    source_top: list[str] = Field(description="Ids of the source's top hits, best first.")
    target_top: list[str]
    agree: bool = Field(description="Same scores and, above the last score, the same ids.")


class Verification(BaseModel):
    """What a copy checked at its end."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    source_passages: int = Field(ge=0)
    target_passages: int = Field(ge=0)
    target_before: int = Field(ge=0, description="Passages the target held before the copy.")
    ids_checked: int = Field(ge=0, description="Source ids looked for in the target.")
    missing_ids: int = Field(ge=0)
    missing_sample: list[str] = Field(default_factory=list, description="Up to 10 of them.")
    scales_agree: bool
    queries: list[QueryCheck] = Field(default_factory=list)
    note: str = ""

    @property
    def ok(self) -> bool:
        counts = self.target_passages >= self.source_passages
        if self.target_before == 0:
            counts = self.target_passages == self.source_passages
        return counts and self.missing_ids == 0 and all(q.agree for q in self.queries)


class Copied(_Report):
    """An index copied into another, with the check of the result.

    ``code`` is ``COPIED`` when the check passed, ``COPY_MISMATCH`` when it did not (a count,
    an id or a sample query differs; the passages written are kept)."""

    code: Literal["COPIED", "COPY_MISMATCH"] = "COPIED"
    source: str = Field(description="BACKEND:INDEX copied from.")
    target: str = Field(description="BACKEND:INDEX copied into.")
    read: int = Field(ge=0, description="Passages read from the source by this run.")
    added: int = Field(ge=0)
    known: int = Field(ge=0)
    resumed: bool = Field(description="Whether this run went on from an interrupted one.")
    elapsed_s: float = Field(ge=0)
    verification: Verification

    @property
    def ok(self) -> bool:
        return self.code == "COPIED"

    @property
    def message(self) -> str:
        v = self.verification
        how = " (resumed)" if self.resumed else ""
        check = (
            "verified"
            if self.ok
            else f"NOT verified ({v.missing_ids} id(s) missing; counts {v.source_passages} / "
            f"{v.target_passages}; {sum(not q.agree for q in v.queries)} query(ies) differ)"
        )
        return (
            f"Copied {self.read} passage(s){how} from {self.source} to {self.target} "
            f"({self.added} added, {self.known} known); {check}."
        )


EXIT_CODES: dict[str, int] = {"EXPORTED": 0, "IMPORTED": 0, "COPIED": 0, "COPY_MISMATCH": 3}
"""Exit status of the transfer codes (those of the guard's outcomes are in
:data:`indexplug.outcomes.EXIT_CODES`): a copy whose check failed exits as ``INDEX_FAILED``."""


# -- confinement -------------------------------------------------------------------------------


def confined_output(path: str | os.PathLike[str], roots: Sequence[str]) -> Path:
    """Where an export may write ``path``: its folder's real path must lie inside ``roots``
    (real paths), and the name must be new or a regular file (never a link, which
    :func:`export` would replace, not follow, but a caller asked for something else)."""
    p = Path(os.fspath(path))
    if "\x00" in str(p):
        raise InvalidRequest("the path contains a NUL character", field="path")
    if not p.name or p.name in (".", ".."):
        raise InvalidRequest(f"{path} does not name a file", field="path")
    try:
        folder = real_path(p.parent if str(p.parent) else ".")
    except Refused:
        raise InvalidRequest(f"the folder of {path} does not exist", field="path") from None
    if not inside(folder, roots):
        raise InvalidRequest(
            f"{path} is outside the folders this configuration lets export write (set "
            "defaults.folders)",
            field="path",
        )
    out = Path(folder) / p.name
    try:
        st = os.lstat(out)
    except FileNotFoundError:
        return out
    except OSError as exc:
        raise InvalidRequest(f"{path} cannot be checked: {exc.strerror}", field="path") from None
    if not stat.S_ISREG(st.st_mode):
        raise InvalidRequest(f"{path} exists and is not a regular file", field="path")
    return out


def open_confined(path: str | os.PathLike[str], roots: Sequence[str]) -> IO[bytes]:
    """``path`` opened for reading under :mod:`indexplug.confine`'s rules (its real path inside
    ``roots``, a regular file, opened without following a last link or blocking, the opened
    file checked again); :class:`InvalidRequest` for ``path`` otherwise."""
    if "\x00" in os.fspath(path):
        raise InvalidRequest("the path contains a NUL character", field="path")
    try:
        real = real_path(path)
        if not inside(real, roots):
            raise Refused(Why.OUTSIDE)
        before = os.stat(real)
        if not stat.S_ISREG(before.st_mode):
            raise Refused(Why.SPECIAL)
        flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(real, flags | getattr(os, "O_CLOEXEC", 0))
    except Refused as exc:
        raise InvalidRequest(_refused_reason(path, exc.why), field="path") from None
    except OSError as exc:
        raise InvalidRequest(f"{path} cannot be read: {exc.strerror}", field="path") from None
    try:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode) or (opened.st_dev, opened.st_ino) != (
            before.st_dev,
            before.st_ino,
        ):
            raise InvalidRequest(_refused_reason(path, Why.LOOP), field="path")
        proc = Path("/proc/self/fd") / str(fd)
        if proc.parent.is_dir() and not inside(os.readlink(proc), roots):
            raise InvalidRequest(_refused_reason(path, Why.OUTSIDE), field="path")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _refused_reason(path: str | os.PathLike[str], why: Why) -> str:
    if why is Why.OUTSIDE:
        return (
            f"{path} is outside the folders this configuration lets import read (set "
            "defaults.folders)"
        )
    if why is Why.BROKEN:
        return f"{path} does not exist"
    if why is Why.SPECIAL:
        return f"{path} is not a regular file"
    return f"{path} cannot be read ({why.value})"


# -- export ------------------------------------------------------------------------------------


def passage_line(p: Passage) -> str:
    """One passage as its export line (no newline): the passage's JSON, keys sorted."""
    return json.dumps(p.model_dump(mode="json"), ensure_ascii=False, sort_keys=True)


def export(
    guard: Guard,
    index: str,
    out: str | os.PathLike[str] | IO[str],
    *,
    filters: Any = None,
    progress: Progress | None = None,
    deadline_s: float | None = None,
    exclusive: bool = False,
    roots: Sequence[str] | None = None,
) -> Exported | IndexFailed | IndexTimeout | IndexUnavailable:
    """Write every passage of ``index`` (those passing ``filters``) to ``out`` as JSONL.

    ``out`` is a path (written to a temporary file in the same folder, which replaces it only
    when the export is complete: a failed export leaves no partial file; with ``exclusive``
    it never replaces anything: a file that appeared meanwhile is :class:`FileExistsError`)
    or an open text stream.  With ``roots`` (real paths; see :func:`confined_output`) the
    file is created in its folder opened from its root without following links, so nothing
    lands outside ``roots`` even if a folder is swapped for a link meanwhile
    (:class:`InvalidRequest`).  ``deadline_s`` bounds each page read.  Answers
    :class:`Exported` or the failure that stopped the scan.
    """
    total = _count(guard, index, deadline_s)
    if not isinstance(total, int):
        return total
    if isinstance(out, str | os.PathLike):
        target = Path(os.fspath(out))
        folder = _open_output_folder(target, roots)
        try:
            return _export_in(
                guard, index, folder, target, filters, progress, total, deadline_s, exclusive, roots
            )
        finally:
            os.close(folder)
    got = _write_pages(guard, index, out, filters, progress, total, deadline_s)
    if isinstance(got, int):
        return Exported(index=index, backend=guard.plugin, path="-", passages=got, bytes=0)
    return got


def _open_output_folder(target: Path, roots: Sequence[str] | None) -> int:
    """A descriptor of the folder ``target`` is written in.  With ``roots`` (real paths) it
    is opened from its root one folder at a time without following links
    (:func:`indexplug.confine.open_folder`), so a folder swapped for a link after
    :func:`confined_output` checked the path cannot lead the export out of ``roots``."""
    parent = str(target.parent) if str(target.parent) else os.curdir
    try:
        if roots is not None:
            return open_folder(parent, roots)
        return os.open(parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | os.O_CLOEXEC)
    except Refused as exc:
        raise InvalidRequest(
            f"the folder of {target} is no longer a folder inside the folders this "
            f"configuration lets export write ({exc}); nothing written",
            field="path",
        ) from None
    except OSError as exc:
        raise InvalidRequest(
            f"the folder of {target} cannot be opened: {exc.strerror}", field="path"
        ) from None


def _export_in(
    guard: Guard,
    index: str,
    folder: int,
    target: Path,
    filters: Any,
    progress: Progress | None,
    total: int,
    deadline_s: float | None,
    exclusive: bool,
    roots: Sequence[str] | None,
) -> Exported | IndexFailed | IndexTimeout | IndexUnavailable:
    """Export into a temporary file created in the folder ``folder`` (a descriptor: every name
    below is relative to it, and none is followed if it is a link), which becomes ``target``'s
    name only once complete."""
    name = target.name
    tmp = f".{name}.{secrets.token_hex(8)}.part"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | os.O_CLOEXEC
    fd = os.open(tmp, flags, 0o600, dir_fd=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as stream:
            got = _write_pages(guard, index, stream, filters, progress, total, deadline_s)
            stream.flush()
            os.fsync(stream.fileno())
        if not isinstance(got, int):
            return got
        if roots is not None and _PROC_FD.is_dir():
            where = os.readlink(_PROC_FD / str(folder))
            if not inside(where, roots):  # the opened folder itself was moved out since
                raise InvalidRequest(
                    f"the folder of {target} was moved out of the folders this "
                    "configuration lets export write; nothing written",
                    field="path",
                )
        if exclusive:  # FileExistsError rather than replace anything
            os.link(tmp, name, src_dir_fd=folder, dst_dir_fd=folder, follow_symlinks=False)
        else:
            os.replace(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)
        size = os.stat(name, dir_fd=folder, follow_symlinks=False).st_size
        return Exported(
            index=index, backend=guard.plugin, path=str(target), passages=got, bytes=size
        )
    finally:
        try:
            os.unlink(tmp, dir_fd=folder)
        except FileNotFoundError:
            pass


def _write_pages(
    guard: Guard,
    index: str,
    stream: IO[str],
    filters: Any,
    progress: Progress | None,
    total: int,
    deadline_s: float | None,
) -> int | IndexFailed | IndexTimeout | IndexUnavailable:
    n = 0
    for page in guard.scan_all(index, filters=filters, page=PAGE, deadline_s=deadline_s):
        if not isinstance(page, Scanned):
            return page
        stream.write("".join(passage_line(p) + "\n" for p in page.passages))
        n += len(page.passages)
        if progress is not None:
            progress(n, max(total, n))
    return n


def _count(
    guard: Guard, index: str, deadline_s: float | None
) -> int | IndexTimeout | IndexUnavailable:
    """The passages of ``index`` for progress, read within the caller's deadline: a timeout or
    an outage stops the transfer there (an index that fails otherwise answers that failure
    from its first page)."""
    st = guard.status(index, deadline_s=deadline_s)
    if isinstance(st, IndexTimeout | IndexUnavailable):
        return st
    return st.passages if isinstance(st, IndexStatus) else 0


# -- import ------------------------------------------------------------------------------------


def read_passages(stream: IO[bytes], *, max_bytes: int = MAX_IMPORT_BYTES) -> Iterator[Passage]:
    """The passages of an export, each line checked: JSON, an object with an ``id`` and a
    ``digest``, a valid passage whose id is its content address and whose digest its fields'.
    Raises :class:`InvalidRequest` naming the first line that is not (field ``line N``)."""
    seen = 0
    n = 0
    while True:
        raw = stream.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        n += 1
        seen += len(raw)
        if seen > max_bytes:
            raise InvalidRequest(f"the file is larger than {max_bytes} bytes", field="path")
        if len(raw) > MAX_LINE_BYTES:
            raise _bad_line(n, f"longer than {MAX_LINE_BYTES} bytes")
        if not raw.strip():
            continue
        yield _parse_line(n, raw)


def _bad_line(n: int, reason: str) -> InvalidRequest:
    return InvalidRequest(f"line {n} is not an exported passage: {reason}", field=f"line {n}")


def _parse_line(n: int, raw: bytes) -> Passage:
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except RecursionError:
        raise _bad_line(n, "nested too deeply") from None
    except ValueError as exc:
        raise _bad_line(n, f"not JSON ({' '.join(str(exc).split())[:200]})") from None
    if not isinstance(data, dict):
        raise _bad_line(n, f"a JSON {type(data).__name__}, not an object")
    for name in ("id", "digest"):
        if not isinstance(data.get(name), str):
            raise _bad_line(n, f"no '{name}' (an export line carries both id and digest)")
    try:
        return Passage.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        msg = str(first["msg"]).removeprefix("Value error, ")
        raise _bad_line(n, f"{where + ': ' if where else ''}{msg}") from None
    except RecursionError:
        raise _bad_line(n, "nested too deeply") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def import_(
    guard: Guard,
    index: str,
    source: str | os.PathLike[str] | IO[bytes],
    *,
    max_bytes: int | None = None,
    progress: Progress | None = None,
    deadline_s: float | None = None,
    batch: int = IMPORT_BATCH,
) -> Imported | Failure:
    """Read an export (a path or a binary stream) into ``index``.

    The whole file is checked first (:func:`read_passages`; nothing is written if any line is
    bad), then read again and added in batches of ``batch`` (a stream that cannot seek is
    spooled to a temporary file).  Passages with a caller key are held until the end and
    each key's passages added in one add (a key split over two adds would have the second
    replace the first), so they take memory.  A failed batch answers the failure with
    ``committed``, the passages stored before it; importing the same file again completes the
    rest.
    """
    if isinstance(source, str | os.PathLike):
        with open(source, "rb") as opened:
            return import_(
                guard,
                index,
                opened,
                max_bytes=max_bytes,
                progress=progress,
                deadline_s=deadline_s,
                batch=batch,
            )
    stream = _seekable(source)
    start = stream.tell()
    lines = sum(1 for _ in read_passages(stream))
    stream.seek(start)
    added = known = replaced = done = 0
    pending: list[Passage] = []

    def flush() -> Failure | None:
        nonlocal added, known, replaced, done
        out = guard.add(index, pending, max_bytes=max_bytes, deadline_s=deadline_s)
        if not isinstance(out, Indexed):
            committed = done + (getattr(out, "committed", None) or 0)
            return _with_committed(out, committed)
        added, known, replaced = added + out.added, known + out.known, replaced + out.replaced
        done += len(pending)
        pending.clear()
        if progress is not None:
            progress(done, lines)
        return None

    keyed: dict[str, list[Passage]] = {}
    for p in read_passages(stream):
        if p.key is not None:  # a key's passages go in one add (see the docstring)
            keyed.setdefault(p.key, []).append(p)
            continue
        pending.append(p)
        if len(pending) >= batch:
            failed = flush()
            if failed is not None:
                return failed
    for group in keyed.values():
        if pending and len(pending) + len(group) > batch:
            failed = flush()
            if failed is not None:
                return failed
        pending.extend(group)
    if pending:
        failed = flush()
        if failed is not None:
            return failed
    return Imported(
        index=index,
        backend=guard.plugin,
        lines=lines,
        added=added,
        known=known,
        replaced=replaced,
    )


def _seekable(stream: IO[bytes]) -> IO[bytes]:
    try:
        if stream.seekable():
            return stream
    except (OSError, ValueError):
        pass
    spool: IO[bytes] = tempfile.SpooledTemporaryFile(max_size=64 << 20)  # noqa: SIM115
    while chunk := stream.read(1 << 20):
        spool.write(chunk)
    spool.seek(0)
    return spool


def _with_committed(out: Any, committed: int) -> Failure:
    """A write's or read's failure, saying how many passages were stored before it."""
    if isinstance(out, IndexFailed | IndexTimeout | IndexUnavailable):
        return out.model_copy(update={"committed": committed})
    return cast(Failure, out)


# -- copy --------------------------------------------------------------------------------------


class CopyState(BaseModel):
    """The checkpoint of a copy (``INDEXPLUG_HOME/transfers/<id>.json``)."""

    model_config = ConfigDict(extra="forbid")

    source: str
    target: str
    phase: Literal["scan", "keys"] = "scan"
    after: str | None = None
    keys_done: int = 0
    copied: int = 0
    target_before: int = 0


def state_path(source: str, target: str, home: Path | None = None) -> Path:
    """Where the checkpoint of copying ``source`` to ``target`` (identities) is kept."""
    name = hashlib.sha256(f"{source}\x00{target}".encode()).hexdigest()[:32]
    return (home or home_dir()) / "transfers" / f"{name}.json"


def _save_state(path: Path, state: CopyState) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(prefix=".state-", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(state.model_dump_json())
    os.replace(tmp, path)


def _load_state(path: Path, source: str, target: str) -> CopyState | None:
    try:
        state = CopyState.model_validate_json(path.read_bytes())
    except (OSError, ValueError):
        return None
    return state if (state.source, state.target) == (source, target) else None


def copy(
    src: Guard,
    src_index: str,
    dst: Guard,
    dst_index: str,
    *,
    progress: Progress | None = None,
    source_id: str | None = None,
    target_id: str | None = None,
    restart: bool = False,
    max_bytes: int | None = None,
    deadline_s: float | None = None,
    queries: int = SAMPLE_QUERIES,
    home: Path | None = None,
) -> Copied | Failure:
    """Copy every passage of ``src_index`` on ``src`` into ``dst_index`` on ``dst``.

    ``source_id``/``target_id`` name the two ends for the checkpoint (default
    ``BACKEND:INDEX``; give more, e.g. the backend's settings, when two stores of one backend
    hold indexes of one name).  A copy that was interrupted (a failure, a kill) goes on from
    its checkpoint when called again the same way, unless ``restart``.  ``deadline_s`` bounds
    each read and each write.  Answers :class:`Copied` (``COPY_MISMATCH`` if the final check
    failed) or the failure that stopped it, with ``committed``: the passages this run stored.
    """
    if src_index == dst_index and src is dst:
        raise InvalidRequest("the source and the target are the same index", field="target")
    if not getattr(src.capabilities, "scan", False):
        raise InvalidRequest(
            f"backend '{src.name}' cannot list its passages (no scan), so it cannot be copied",
            field="source",
        )
    source = source_id or f"{src.name}:{src_index}"
    target = target_id or f"{dst.name}:{dst_index}"
    started = time.monotonic()
    path = state_path(source, target, home)
    keys_path = path.with_suffix(".keys")
    state = None if restart else _load_state(path, source, target)
    resumed = state is not None
    if state is None:
        before = dst.status(dst_index, deadline_s=deadline_s)
        if not isinstance(before, IndexStatus):
            return before
        state = CopyState(source=source, target=target, target_before=before.passages)
        keys_path.unlink(missing_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    total = _count(src, src_index, deadline_s)
    if not isinstance(total, int):
        return total
    counts = {"read": 0, "added": 0, "known": 0}
    use_get = bool(getattr(src.capabilities, "get", False))
    buffered: dict[str, list[Passage]] = {}

    def write(batch: list[Passage]) -> Failure | None:
        if not batch:
            return None
        out = dst.add(dst_index, batch, max_bytes=max_bytes, deadline_s=deadline_s)
        if not isinstance(out, Indexed):
            return _with_committed(out, counts["added"] + (getattr(out, "committed", 0) or 0))
        counts["added"] += out.added
        counts["known"] += out.known
        state.copied += len(batch)
        if progress is not None:
            progress(state.copied, max(total, state.copied))
        return None

    while state.phase == "scan":
        page = src.scan(src_index, after=state.after, limit=PAGE, deadline_s=deadline_s)
        if not isinstance(page, Scanned):
            return _with_committed(page, counts["added"])
        counts["read"] += len(page.passages)
        keyed = [p for p in page.passages if p.key is not None]
        if keyed and use_get:
            with open(keys_path, "a", encoding="utf-8") as f:
                f.write("".join(json.dumps(p.key) + "\n" for p in keyed))
        for p in keyed if not use_get else ():
            buffered.setdefault(str(p.key), []).append(p)
        if buffered:  # held in memory, not resumable: a repeat starts over
            path.unlink(missing_ok=True)
        failed = write([p for p in page.passages if p.key is None])
        if failed is not None:
            return failed
        if page.next_after is None:
            state.phase = "keys"
        else:
            state.after = page.next_after
        if not buffered:
            _save_state(path, state)
    if buffered:
        groups = [g for _, g in sorted(buffered.items())]
        for i in range(0, len(groups), KEYS_PER_GET):
            failed = write([p for g in groups[i : i + KEYS_PER_GET] for p in g])
            if failed is not None:
                return failed
    else:
        failed = _copy_keys(src, src_index, keys_path, state, path, write, deadline_s)
        if failed is not None:
            return failed
    check = verify(
        src,
        src_index,
        dst,
        dst_index,
        state.target_before,
        queries=queries,
        deadline_s=deadline_s,
    )
    if not isinstance(check, Verification):
        return check
    path.unlink(missing_ok=True)
    keys_path.unlink(missing_ok=True)
    return Copied(
        code="COPIED" if check.ok else "COPY_MISMATCH",
        source=source,
        target=target,
        read=counts["read"],
        added=counts["added"],
        known=counts["known"],
        resumed=resumed,
        elapsed_s=round(time.monotonic() - started, 3),
        verification=check,
    )


def _copy_keys(
    src: Guard,
    src_index: str,
    keys_path: Path,
    state: CopyState,
    path: Path,
    write: Callable[[list[Passage]], Failure | None],
    deadline_s: float | None,
) -> Failure | None:
    """The keyed passages, every passage of each key in one add (read back by ``get``)."""
    try:
        with open(keys_path, encoding="utf-8") as f:
            keys = sorted({json.loads(line) for line in f if line.strip()})
    except FileNotFoundError:
        keys = []
    while state.keys_done < len(keys):
        group = keys[state.keys_done : state.keys_done + KEYS_PER_GET]
        got = src.get(src_index, keys=group, deadline_s=deadline_s)
        if not isinstance(got, Got):
            return _with_committed(got, state.copied)
        by_key: dict[str, list[Passage]] = {}
        for p in got.passages:
            by_key.setdefault(str(p.key), []).append(p)
        failed = write([p for k in group for p in by_key.get(k, [])])
        if failed is not None:
            return failed
        state.keys_done += len(group)
        _save_state(path, state)
    return None


def verify(
    src: Guard,
    src_index: str,
    dst: Guard,
    dst_index: str,
    target_before: int = 0,
    *,
    queries: int = SAMPLE_QUERIES,
    deadline_s: float | None = None,
) -> Verification | IndexFailed | IndexTimeout | IndexUnavailable:
    """Check a copy: both counts, every source id in the target (by ``get``, else by scanning
    the target), and where both score on the same scale and the target held nothing else
    (``target_before`` 0) the top hits of ``queries`` sample queries (the opening words of
    passages spread over the source).  ``deadline_s`` bounds each read."""
    s_status = src.status(src_index, deadline_s=deadline_s)
    d_status = dst.status(dst_index, deadline_s=deadline_s)
    for st in (s_status, d_status):
        if not isinstance(st, IndexStatus):
            return st
    assert isinstance(s_status, IndexStatus) and isinstance(d_status, IndexStatus)
    present: set[str] | None = None
    notes: list[str] = []
    dst_get = bool(getattr(dst.capabilities, "get", False))
    if not dst_get:
        if getattr(dst.capabilities, "scan", False):
            present = set()
            for page in dst.scan_all(dst_index, page=PAGE, deadline_s=deadline_s):
                if not isinstance(page, Scanned):
                    return page
                present.update(p.id for p in page.passages)
        else:
            notes.append("the target can neither get nor scan: ids not checked")
    checked = missing = 0
    missing_sample: list[str] = []
    texts: list[str] = []
    every = max(1, s_status.passages // max(1, queries))
    seen = 0
    for page in src.scan_all(src_index, page=PAGE, deadline_s=deadline_s):
        if not isinstance(page, Scanned):
            return page
        ids = [p.id for p in page.passages]
        for p in page.passages:
            if seen % every == 0 and len(texts) < queries:
                texts.append(" ".join(p.text.split()[:12]))
            seen += 1
        if dst_get:
            got = dst.get(dst_index, ids, deadline_s=deadline_s)
            if not isinstance(got, Got):
                return got
            lost = list(got.missing_ids)
        elif present is not None:
            lost = [i for i in ids if i not in present]
        else:
            continue
        checked += len(ids)
        missing += len(lost)
        missing_sample += lost[: max(0, 10 - len(missing_sample))]
    scales_agree = src.score_scale.name == dst.score_scale.name
    checks: list[QueryCheck] = []
    if scales_agree and target_before:
        notes.append(
            "the target held other passages before the copy (scores depend on the whole "
            "index): top hits not compared"
        )
    elif scales_agree:
        for q in texts:
            checks.append(
                _compare(
                    q,
                    src.search(src_index, q, top_k=VERIFY_TOP_K, deadline_s=deadline_s),
                    dst.search(dst_index, q, top_k=VERIFY_TOP_K, deadline_s=deadline_s),
                )
            )
    else:
        notes.append(
            f"scores differ in scale ({src.score_scale.name} / {dst.score_scale.name}): "
            "top hits not compared"
        )
    return Verification(
        source_passages=s_status.passages,
        target_passages=d_status.passages,
        target_before=target_before,
        ids_checked=checked,
        missing_ids=missing,
        missing_sample=missing_sample,
        scales_agree=scales_agree,
        queries=checks,
        note="; ".join(notes),
    )


def _compare(query: str, a: Any, b: Any) -> QueryCheck:
    """Whether two answers to one query agree: the same scores (within
    :data:`SCORE_TOLERANCE`, relative) and the same ids above the last score (hits tied at the
    cut may differ)."""

    def hits(out: Any) -> list[tuple[str, float]]:
        if isinstance(out, Searched):
            return [(h.passage.id, h.score) for h in out.hits]
        return [] if isinstance(out, NoMatch) else [("<" + str(out.code) + ">", 0.0)]

    ha, hb = hits(a), hits(b)
    agree = len(ha) == len(hb) and all(
        abs(x[1] - y[1]) <= SCORE_TOLERANCE * max(1.0, abs(x[1]))
        for x, y in zip(ha, hb, strict=True)
    )
    if agree and ha:
        cut = ha[-1][1]
        above_a = {i for i, s in ha if abs(s - cut) > SCORE_TOLERANCE * max(1.0, abs(cut))}
        above_b = {i for i, s in hb if abs(s - cut) > SCORE_TOLERANCE * max(1.0, abs(cut))}
        agree = above_a == above_b
    return QueryCheck(
        query=query, source_top=[i for i, _ in ha], target_top=[i for i, _ in hb], agree=agree
    )
