"""Indexing a folder: read text files, cut them into passages, keep the index in step.

Each file's uri (``file://`` absolute path) and SHA-256 are recorded in a manifest kept beside
the index's data in the home folder (``<home>/manifests/<backend>/<index>.json``).  Re-indexing
compares the manifest with the folder: unchanged files are skipped, changed files have their old
passages removed and new ones added, and files that disappeared have their passages removed.
Binary and undecodable files are skipped and counted, never fatal.

The manifest is written only after the backend accepted the change, so a failed or refused write
leaves it describing what the index really holds.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from indexplug.guard import Guard
from indexplug.home import home_dir
from indexplug.outcomes import Indexed, Removed
from indexplug.passages import Passage, Source, now_utc, passages_from_text, sha256_bytes

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


class IngestReport(BaseModel):
    """What ``index_folder`` did; every file is accounted for."""

    index: str
    files_seen: int = 0
    files_indexed: int = 0
    files_unchanged: int = 0
    files_removed: int = 0
    skipped_binary: int = 0
    skipped_too_large: int = 0
    passages_added: int = 0
    passages_known: int = 0
    passages_removed: int = 0
    failures: list[str] = Field(default_factory=list)
    """Outcome messages of writes the backend refused or failed (the manifest keeps the old
    state for those files, so the next run retries them)."""

    @property
    def ok(self) -> bool:
        return not self.failures


def iter_text_files(root: Path) -> Iterator[Path]:
    """Text-like files under ``root`` in a stable order, skipping VCS and build folders."""
    if root.is_file():
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


def manifest_path(backend: str, index: str) -> Path:
    return home_dir() / "manifests" / backend / f"{index}.json"


def _load_manifest(path: Path) -> dict[str, dict[str, Any]]:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text("utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, json.JSONDecodeError):
        return {}


def _save_manifest(path: Path, manifest: dict[str, dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(manifest, indent=0, sort_keys=True), "utf-8")
    os.replace(tmp, path)


def file_passages(
    path: Path, text: str, sha: str, *, max_chars: int, overlap: int
) -> list[Passage]:
    source = Source(
        uri=path.resolve().as_uri(), sha256=sha, retrieved_at=now_utc(), provenance="file"
    )
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
) -> IngestReport:
    """Bring ``index`` in step with the text files under ``root`` (see the module docstring)."""
    root = Path(root)
    if not root.exists():
        raise FileNotFoundError(f"{root} does not exist")
    mpath = manifest_path(guard.name, index)
    manifest = _load_manifest(mpath)
    report = IngestReport(index=index)
    files = list(iter_text_files(root))
    seen: set[str] = set()
    pending: list[tuple[str, dict[str, Any], list[Passage]]] = []

    def flush() -> None:
        batch = [p for _, _, ps in pending for p in ps]
        for i in range(0, max(len(batch), 1), BATCH):
            chunk = batch[i : i + BATCH]
            if not chunk:
                break
            added = guard.add(index, chunk, max_bytes=max_bytes, deadline_s=deadline_s)
            if not isinstance(added, Indexed):
                report.failures.append(added.message)
                pending.clear()
                return
            report.passages_added += added.added
            report.passages_known += added.known
        for uri, entry, _ in pending:
            old_ids: list[str] = list(manifest.get(uri, {}).get("ids", []))
            keep = set(entry["ids"])
            stale = [i for i in old_ids if i not in keep]
            if stale:
                removed = guard.remove(index, stale, deadline_s=deadline_s)
                if isinstance(removed, Removed):
                    report.passages_removed += removed.removed
                else:
                    report.failures.append(removed.message)
            manifest[uri] = entry
            report.files_indexed += 1
        pending.clear()
        _save_manifest(mpath, manifest)

    for n, path in enumerate(files, start=1):
        report.files_seen += 1
        uri = path.resolve().as_uri()
        seen.add(uri)
        try:
            if path.stat().st_size > MAX_FILE_BYTES:
                report.skipped_too_large += 1
                continue
            data = path.read_bytes()
        except OSError as exc:
            report.failures.append(f"{path}: {exc}")
            continue
        sha = sha256_bytes(data)
        if manifest.get(uri, {}).get("sha256") == sha:
            report.files_unchanged += 1
            continue
        text = decode_text(data)
        if text is None:
            report.skipped_binary += 1
            continue
        ps = file_passages(path, text, sha, max_chars=max_chars, overlap=overlap)
        pending.append((uri, {"sha256": sha, "ids": [p.id for p in ps]}, ps))
        if sum(len(x[2]) for x in pending) >= BATCH:
            flush()
        if progress:
            progress(n, len(files))
    flush()
    gone = [u for u in manifest if u not in seen and _under(u, root)]
    for uri in gone:
        ids: list[str] = list(manifest[uri].get("ids", []))
        out = guard.remove(index, ids, deadline_s=deadline_s) if ids else None
        if out is not None and not isinstance(out, Removed):
            report.failures.append(out.message)
            continue
        report.passages_removed += out.removed if out else 0
        report.files_removed += 1
        del manifest[uri]
    _save_manifest(mpath, manifest)
    return report


def _under(uri: str, root: Path) -> bool:
    prefix = root.resolve().as_uri()
    return uri == prefix or uri.startswith(prefix.rstrip("/") + "/")
