"""Indexing a folder: read text files, cut them into passages, keep the index in step.

Each file's uri (``file://`` real path), SHA-256 and passage ids are recorded in a manifest bound
to the index (:mod:`indexplug.manifest`: kept in the indexplug home, never among the passages,
and checked against what the index holds at each run).  Re-indexing compares the manifest with
the folder: unchanged files are skipped, changed files have their old passages removed and new
ones added, and files that disappeared or are no longer eligible have their passages removed.
A missing, recreated or damaged index or manifest makes the run a full re-index that removes
whatever is stale; where that takes dropping the index, the run needs ``allow_drop`` (the gate
``drop`` passes) and changes nothing without it.

What is read is confined (:mod:`indexplug.confine`): only regular files whose real path lies
inside the folder being indexed, each read under a byte cap and the deadline.  Links that lead
out, FIFOs, devices, sockets, symlink loops, broken links, binary and oversized files are
skipped, counted under their own names in the report and logged, never fatal.

The manifest is written ahead of each write (old and new ids both listed) and again after the
backend accepted it, so it never names fewer passages than the index may hold from this folder.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from pydantic import BaseModel, Field

from indexplug.confine import Refused, Why, read_confined, real_path
from indexplug.errors import IndexplugError
from indexplug.guard import Guard
from indexplug.manifest import (
    Busy,
    Entry,
    ingest_lock,
    load_manifest,
    manifest_path,
    marker,
    save_manifest,
    was_ingested,
)
from indexplug.names import validate_index_name
from indexplug.outcomes import Got, Indexed, IndexStatus, Removed
from indexplug.passages import Passage, Source, now_utc, passages_from_text, sha256_bytes

__all__ = [
    "MAX_FILE_BYTES",
    "IngestReport",
    "RebuildNotAllowed",
    "decode_text",
    "file_passages",
    "index_folder",
    "iter_text_files",
    "manifest_path",
]

log = logging.getLogger("indexplug.ingest")

TEXT_SUFFIXES = frozenset(
    [
        ".txt",
        ".md",
        ".markdown",
        ".rst",
        ".adoc",
        ".org",
        ".tex",
        ".csv",
        ".tsv",
        ".json",
        ".jsonl",
        ".yaml",
        ".yml",
        ".toml",
        ".ini",
        ".cfg",
        ".py",
        ".pyi",
        ".js",
        ".ts",
        ".tsx",
        ".jsx",
        ".java",
        ".kt",
        ".go",
        ".rs",
        ".c",
        ".h",
        ".cc",
        ".cpp",
        ".hpp",
        ".cs",
        ".rb",
        ".php",
        ".swift",
        ".scala",
        ".sh",
        ".bash",
        ".zsh",
        ".sql",
        ".html",
        ".htm",
        ".css",
        ".xml",
        ".r",
        ".jl",
        ".lua",
        ".pl",
        ".hs",
        ".ml",
        ".ex",
        ".exs",
        ".erl",
        ".clj",
        ".vue",
        ".svelte",
        ".proto",
        ".graphql",
        ".dockerfile",
        ".makefile",
    ]
)
SKIP_DIRS = frozenset(
    {".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv", ".tox"}
)
MAX_FILE_BYTES = 20_000_000
BATCH = 2000
REMOVE_BATCH = 10_000
SAMPLE_IDS = 64
"""How many of the manifest's ids each run checks the index still holds (backends with get)."""


class RebuildNotAllowed(IndexplugError):
    """Only dropping the index could bring it in step with its folder (its ingest manifest
    was lost or damaged while it holds passages), and the run was not allowed to drop it."""


_SKIP_FIELD = {
    Why.OUTSIDE: "skipped_outside",
    Why.SPECIAL: "skipped_special",
    Why.LOOP: "skipped_loops",
    Why.BROKEN: "skipped_broken",
    Why.TOO_LARGE: "skipped_too_large",
    Why.UNREADABLE: "skipped_unreadable",
}
_SKIP_SAYS = {
    Why.OUTSIDE: "its real path is outside the folder (a link that leads out)",
    Why.SPECIAL: "not a regular file (a FIFO, device or socket)",
    Why.LOOP: "a symlink loop",
    Why.BROKEN: "a broken link, or it disappeared",
    Why.TOO_LARGE: "over the size cap (MAX_FILE_BYTES)",
    Why.UNREADABLE: "it cannot be read",
}


class IngestReport(BaseModel):
    """What ``index_folder`` did; every file is accounted for."""

    index: str
    files_seen: int = 0
    files_indexed: int = 0
    files_unchanged: int = 0
    files_removed: int = Field(
        default=0, description="Files whose passages were removed: gone, or no longer eligible."
    )
    skipped_binary: int = Field(default=0, description="Binary or undecodable files.")
    skipped_too_large: int = Field(default=0, description="Files over the size cap.")
    skipped_outside: int = Field(
        default=0, description="Links whose real path is outside the folder (not followed)."
    )
    skipped_special: int = Field(default=0, description="FIFOs, devices and sockets (not read).")
    skipped_loops: int = Field(default=0, description="Symlink loops.")
    skipped_broken: int = Field(default=0, description="Broken links, files that disappeared.")
    skipped_unreadable: int = Field(default=0, description="Files that could not be read.")
    skipped_duplicates: int = Field(
        default=0, description="Links to a file already read in this run."
    )
    passages_added: int = 0
    passages_known: int = 0
    passages_removed: int = 0
    rebuilt: str | None = Field(
        default=None,
        description="Why this run re-indexed every file (the index or its manifest was missing, "
        "recreated or damaged); null for an incremental run.",
    )
    failures: list[str] = Field(default_factory=list)
    """Outcome messages of writes the backend refused or failed, and files whose reading timed
    out (the manifest keeps those files' old and new ids, so the next run retries them and
    removes what is stale)."""

    @property
    def ok(self) -> bool:
        return not self.failures


def iter_text_files(root: Path) -> Iterator[Path]:
    """Text-like names under ``root`` in a stable order, skipping VCS and build folders.

    Names only: nothing is opened, and links to folders are not descended into (what a name
    really is gets decided by :func:`indexplug.confine.read_confined`).
    """
    if not root.is_dir():
        yield root
        return
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
        for name in sorted(filenames):
            p = Path(dirpath) / name
            if p.suffix.lower() in TEXT_SUFFIXES or name.lower() in {
                "readme",
                "license",
                "makefile",
            }:
                yield p


def decode_text(data: bytes) -> str | None:
    """UTF-8 text, or ``None`` for binary (a NUL byte) or undecodable bytes."""
    if b"\x00" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def file_passages(
    path: Path,
    text: str,
    sha: str,
    *,
    max_chars: int,
    overlap: int,
    real: str | None = None,
) -> list[Passage]:
    """The passages of one file; the source uri is its real path (``real``, else resolved)."""
    uri = Path(real).as_uri() if real is not None else Path(real_path(path)).as_uri()
    source = Source(uri=uri, sha256=sha, retrieved_at=now_utc(), provenance="file")
    return passages_from_text(
        text,
        source,
        max_chars=max_chars,
        overlap=overlap,
        document_sha256=sha,
        metadata={"path": str(path), "suffix": path.suffix.lower()},
    )


def index_folder(
    guard: Guard,
    root: Path,
    index: str,
    *,
    max_bytes: int | None = None,
    max_chars: int = 1200,
    overlap: int = 150,
    deadline_s: float = 120.0,
    progress: Callable[[int, int], None] | None = None,
    allow_drop: bool = False,
) -> IngestReport:
    """Bring ``index`` in step with the text files under ``root`` (see the module docstring).

    ``deadline_s`` bounds each write, the reading of each file, and the wait for another run
    into the same index.  ``allow_drop`` lets a run whose manifest was lost or damaged drop the
    index to rebuild it (the gate ``drop`` passes); without it such a run raises
    :class:`RebuildNotAllowed` having changed nothing.  Raises ``FileNotFoundError`` when
    ``root`` does not resolve.
    """
    validate_index_name(index)
    try:
        root_real = real_path(root)
    except Refused as exc:
        raise FileNotFoundError(f"{root} does not exist or cannot be resolved ({exc})") from None
    report = IngestReport(index=index)
    try:
        with ingest_lock(guard.name, index, deadline_s):
            run = _Run(guard, Path(root), root_real, index, report, max_bytes, deadline_s)
            run.allow_drop = allow_drop
            run.run(max_chars, overlap, progress)
    except Busy as exc:
        report.failures.append(str(exc))
    return report


class _Run:
    """One ``index_folder`` run, holding the index's ingest lock."""

    def __init__(
        self,
        guard: Guard,
        root: Path,
        root_real: str,
        index: str,
        report: IngestReport,
        max_bytes: int | None,
        deadline_s: float,
    ) -> None:
        self.guard = guard
        self.root = root
        self.root_real = root_real
        self.index = index
        self.report = report
        self.budget = max_bytes
        self.deadline_s = deadline_s
        self.manifest = load_manifest(guard.name, index)
        self.allow_drop = False

    # -- binding the manifest to the index ---------------------------------------------------
    def bind(self) -> bool:
        """Check the manifest against the index (see :mod:`indexplug.manifest`); False when the
        index cannot be checked, and nothing may be written.  Raises :class:`RebuildNotAllowed`
        (nothing written) when only dropping the index could make it right and the run may not."""
        m, report = self.manifest, self.report
        status = self.guard.status(self.index, deadline_s=self.deadline_s)
        if not isinstance(status, IndexStatus):
            report.failures.append(f"the index could not be checked: {status.message}")
            return False
        if status.max_bytes is not None:
            self.budget = _smaller(self.budget, status.max_bytes)
        held = status.passages if status.exists else 0
        if m.state != "ok" and not (m.state == "missing" and not was_ingested(*self._key)):
            # the index holds passages no one can name any more (when it holds any)
            if held > 0:
                if not self.allow_drop:
                    raise RebuildNotAllowed(
                        f"the ingest manifest of '{self.index}' is {m.state}, so its "
                        f"{held} passage(s) can only be made right by dropping the index and "
                        "indexing the folder again, and dropping needs allow_remove (through "
                        "invoke and MCP) or --allow-drop (indexplug index); nothing was changed"
                    )
                report.rebuilt = (
                    f"the manifest was {m.state} while the index held passages index_folder "
                    "had put there, so the index was dropped and every file indexed again"
                )
                if not self._drop():
                    return False
            m.files.clear()
            m.roots.clear()
        elif m.state != "ok":
            m.files.clear()  # a first ingest: what the index holds is not ours to remove
        elif m.legacy:
            report.rebuilt = "the manifest is of an older format, so every file was checked again"
            m.invalidate()
        elif not status.estimate and held < len(m.ids()):
            report.rebuilt = (
                f"the index holds {held} passage(s), fewer than its manifest lists (it was "
                "deleted, recreated or had passages removed), so every file was indexed again"
            )
            m.invalidate()
        elif self._lost_some(m.ids()):
            report.rebuilt = (
                "the index does not hold passages its manifest lists (it was deleted or "
                "recreated), so every file was indexed again"
            )
            m.invalidate()
        if m.marked:
            self._unmark()
        m.add_root(self.root_real)
        save_manifest(m)
        return True

    @property
    def _key(self) -> tuple[str, str]:
        return self.guard.name, self.index

    def _lost_some(self, ids: set[str]) -> bool:
        """Whether the index lacks any of a sample of ``ids`` (backends that claim ``get``);
        the count check alone misses an index recreated with as many passages of others."""
        if not ids or not getattr(self.guard.backend.capabilities, "get", False):
            return False
        ordered = sorted(ids)
        step = max(1, len(ordered) // SAMPLE_IDS)
        sample = ordered[::step][:SAMPLE_IDS]
        got = self.guard.get(self.index, sample, deadline_s=self.deadline_s)
        return isinstance(got, Got) and bool(got.missing_ids)

    def _unmark(self) -> None:
        """Remove the marker passage earlier versions kept in the index (one fixed id)."""
        out = self.guard.remove(self.index, [marker().id], deadline_s=self.deadline_s)
        if isinstance(out, Removed):
            self.manifest.marked = False
        else:
            self.report.failures.append(f"the old ingest marker was not removed: {out.message}")

    def _drop(self) -> bool:
        """Drop the index (its passages are unknown); False if it cannot be."""
        if not callable(getattr(self.guard.backend, "op_drop", None)):
            self.report.failures.append(
                f"the manifest of '{self.index}' was lost and backend '{self.guard.name}' "
                "cannot drop the index, so passages of old files may remain: delete the index "
                "and index the folder again"
            )
            return False
        out = self.guard.drop(self.index, deadline_s=self.deadline_s)
        if getattr(out, "ok", False) is not True:
            why = getattr(out, "message", type(out).__name__)
            self.report.failures.append(f"the index could not be dropped to rebuild it: {why}")
            return False
        self.manifest.marked = False
        return True

    # -- the folder ----------------------------------------------------------------------
    def run(
        self, max_chars: int, overlap: int, progress: Callable[[int, int], None] | None
    ) -> None:
        if not self.bind():
            return
        m, report = self.manifest, self.report
        roots = [self.root_real]
        files = list(iter_text_files(self.root))
        seen: set[str] = set()  # uris of eligible files (their passages stay)
        read: set[str] = set()  # real paths read in this run (links to one file count once)
        pending: list[tuple[str, Entry, list[Passage]]] = []
        for n, path in enumerate(files, start=1):
            report.files_seen += 1
            if progress:
                progress(n, len(files))
            try:
                real, data = read_confined(
                    path,
                    roots,
                    max_bytes=MAX_FILE_BYTES,
                    deadline_at=time.monotonic() + self.deadline_s,
                )
            except Refused as exc:
                self._skipped(path, exc.why, seen)
                continue
            if real in read:
                report.skipped_duplicates += 1
                continue
            read.add(real)
            uri = Path(real).as_uri()
            sha = sha256_bytes(data)
            entry = m.files.get(uri)
            if entry is not None and entry.sha256 == sha:
                seen.add(uri)
                report.files_unchanged += 1
                continue
            text = decode_text(data)
            if text is None:
                report.skipped_binary += 1
                log.info("skipped %r: binary or not UTF-8", str(path))
                continue
            seen.add(uri)
            ps = file_passages(path, text, sha, max_chars=max_chars, overlap=overlap, real=real)
            pending.append((uri, Entry(sha, [p.id for p in ps], (max_chars, overlap)), ps))
            if sum(len(x[2]) for x in pending) >= BATCH:
                self.flush(pending)
        self.flush(pending)
        self.remove_gone(seen)
        save_manifest(m)

    def _skipped(self, path: Path, why: Why, seen: set[str]) -> None:
        if why is Why.TIMEOUT:
            # not a verdict on the file: keep what the index holds of it and say so
            try:
                seen.add(Path(real_path(path)).as_uri())
            except Refused:
                pass
            self.report.failures.append(
                f"reading {str(path)!r} timed out after {self.deadline_s:g} s"
            )
            return
        name = _SKIP_FIELD[why]
        setattr(self.report, name, getattr(self.report, name) + 1)
        log.warning("skipped %r: %s", str(path), _SKIP_SAYS[why])

    def flush(self, pending: list[tuple[str, Entry, list[Passage]]]) -> None:
        """Add the pending files' passages, then remove their old ones; the manifest lists old
        and new ids while the write is in flight, so a failure leaves nothing unnamed."""
        if not pending:
            return
        m, report = self.manifest, self.report
        old: dict[str, list[str]] = {}
        for uri, entry, _ in pending:
            before = m.files.get(uri)
            old[uri] = list(before.ids) if before is not None else []
            had = set(old[uri])
            union = old[uri] + [i for i in entry.ids if i not in had]
            m.files[uri] = Entry("", union, before.chunking if before else entry.chunking)
        save_manifest(m)
        batch = [p for _, _, ps in pending for p in ps]
        for i in range(0, len(batch), BATCH):
            added = self.guard.add(
                self.index, batch[i : i + BATCH], max_bytes=self.budget, deadline_s=self.deadline_s
            )
            if not isinstance(added, Indexed):
                report.failures.append(added.message)
                pending.clear()
                save_manifest(m)
                return
            report.passages_added += added.added
            report.passages_known += added.known
        for uri, entry, _ in pending:
            keep = set(entry.ids)
            stale = [i for i in old[uri] if i not in keep]
            if stale and not self._remove(stale):
                continue  # the entry keeps old and new ids: the next run removes the old
            m.files[uri] = entry
            report.files_indexed += 1
        pending.clear()
        save_manifest(m)

    def remove_gone(self, seen: set[str]) -> None:
        """Remove the passages of files under the root that are gone or no longer eligible."""
        m, report = self.manifest, self.report
        prefix = Path(self.root_real).as_uri()
        for uri in [u for u in m.files if u not in seen and _under(u, prefix)]:
            if not self._remove(m.files[uri].ids):
                continue
            report.files_removed += 1
            del m.files[uri]

    def _remove(self, ids: Sequence[str]) -> bool:
        for i in range(0, len(ids), REMOVE_BATCH):
            out = self.guard.remove(
                self.index, list(ids[i : i + REMOVE_BATCH]), deadline_s=self.deadline_s
            )
            if not isinstance(out, Removed):
                self.report.failures.append(out.message)
                return False
            self.report.passages_removed += out.removed
        return True


def _smaller(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def _under(uri: str, prefix: str) -> bool:
    return uri == prefix or uri.startswith(prefix.rstrip("/") + "/")
