"""The ingest manifest, and what ties it to the index it describes.

``index_folder`` keeps, per index, a manifest of the files it put there (``file://`` uri ->
SHA-256 of the bytes, the passage ids, how the file was cut) and of the folders it read, in
``<home>/manifests/<backend>/<index>.json``.  All of this bookkeeping lives in the indexplug
home, never among the passages: no caller can forge it through ``add``, ``import`` or ``copy``,
and it never shows in ``status`` counts, ``scan``, ``search`` or ``export``.

The manifest is only worth anything while it describes what the index really holds, so it is
checked against the index at every run:

* **The manifest carries a checksum** of its own content and the backend and index it is for,
  and is replaced atomically (written, fsynced, renamed).  A truncated, edited or foreign file
  reads as *damaged*, never as a smaller manifest.
* **A sidecar records that the index was ingested** (``<index>.ingested``, written with the
  first manifest), so a manifest deleted on its own reads as *lost*, not as a first ingest.
* **The index must still hold what the manifest lists**: fewer passages than the manifest
  names, or a sample of its ids that the index no longer has (``get``, where the backend claims
  it), means the index was deleted or recreated since.

Then (see ``ingest._Run.bind``): a sound manifest and an index holding its passages:
incremental.  A sound manifest but an index that lost them: every file is read and added again
and every old id that is not re-added is removed.  A damaged or lost manifest next to an index
that holds passages: no one can name them any more, so the index must be dropped and rebuilt,
which needs the same permission as ``drop`` (``allow_drop``; ``allow_remove`` through invoke
and MCP) and is refused otherwise with nothing changed.  Neither: a first ingest, which removes
nothing.

A file lock (``<index>.lock``) serialises ingest runs into one index, so two runs cannot both
decide the manifest is missing, or write over each other's entries.

Indexes built by earlier versions hold a marker passage (:func:`marker`); a run that finds a
manifest of that format removes that one passage (a fixed content address) and rewrites the
manifest in the current format.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from indexplug.home import home_dir
from indexplug.passages import Passage

FORMAT = 3
MARKED_FORMAT = 2
"""The format whose indexes hold the marker passage (read as sound; the marker is removed)."""
MARKER_URI = "urn:indexplug:ingest-marker"
MARKER_TEXT = "IndexplugIngestMarker"
"""One unlikely word: lexical backends match it only for a query containing it."""

_SHA = re.compile(r"^[0-9a-f]{64}$")
State = Literal["ok", "missing", "damaged"]


@lru_cache(maxsize=1)
def marker() -> Passage:
    """The marker passage earlier versions kept in each index ``index_folder`` built (the same
    id everywhere); only ever removed now, never added."""
    return Passage.create(MARKER_TEXT, MARKER_URI, metadata={"indexplug": "ingest-marker"})


@dataclass
class Entry:
    """One file the index holds: its bytes' hash (``""``: must be read again), its passage ids
    in document order, and the ``(max_chars, overlap)`` it was cut with."""

    sha256: str
    ids: list[str]
    chunking: tuple[int, int] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"sha256": self.sha256, "ids": self.ids}
        if self.chunking is not None:
            out["chunking"] = list(self.chunking)
        return out


@dataclass
class Manifest:
    """What ``index_folder`` put into one index (see the module docstring)."""

    backend: str
    index: str
    files: dict[str, Entry] = field(default_factory=dict)
    roots: list[str] = field(default_factory=list)
    """Real paths of the folders (or files) ingested into the index."""
    state: State = "ok"
    """How it was loaded: ``missing`` and ``damaged`` manifests load empty."""
    legacy: bool = False
    """Loaded from the first format (no checksum, no marker in the index yet)."""
    marked: bool = False
    """Loaded from the format whose index holds the marker passage (to remove once)."""

    def ids(self) -> set[str]:
        return {i for e in self.files.values() for i in e.ids}

    def invalidate(self) -> None:
        """Make every file read and added again (old ids are kept, to remove what is stale)."""
        for e in self.files.values():
            e.sha256 = ""

    def add_root(self, root: str) -> None:
        if root not in self.roots:
            self.roots.append(root)

    def body(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "backend": self.backend,
            "index": self.index,
            "roots": sorted(self.roots),
            "files": {u: e.to_json() for u, e in sorted(self.files.items())},
        }


def manifest_path(backend: str, index: str) -> Path:
    return home_dir() / "manifests" / backend / f"{index}.json"


def ingested_path(backend: str, index: str) -> Path:
    """The sidecar that records that ``index_folder`` has ingested into the index."""
    return home_dir() / "manifests" / backend / f"{index}.ingested"


def was_ingested(backend: str, index: str) -> bool:
    """Whether ``index_folder`` has ever written a manifest for the index (in this home)."""
    try:
        return ingested_path(backend, index).is_file() or manifest_path(backend, index).exists()
    except OSError:
        return True  # cannot tell: treat a missing manifest as lost, never as a first ingest


def _checksum(body: dict[str, Any]) -> str:
    canon = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canon.encode("ascii")).hexdigest()


def _entry(raw: Any) -> Entry:
    if not isinstance(raw, dict):
        raise ValueError("an entry is not an object")
    sha, ids, chunking = raw.get("sha256"), raw.get("ids"), raw.get("chunking")
    if not isinstance(sha, str) or (sha and not _SHA.match(sha)):
        raise ValueError("an entry's sha256 is malformed")
    if not isinstance(ids, list) or not all(isinstance(i, str) and _SHA.match(i) for i in ids):
        raise ValueError("an entry's ids are malformed")
    pair: tuple[int, int] | None = None
    if chunking is not None:
        if not (
            isinstance(chunking, list)
            and len(chunking) == 2
            and all(type(x) is int and x >= 0 for x in chunking)
        ):
            raise ValueError("an entry's chunking is malformed")
        pair = (chunking[0], chunking[1])
    return Entry(sha256=sha, ids=list(ids), chunking=pair)


def load_manifest(backend: str, index: str) -> Manifest:
    """The manifest of ``index``; empty with state ``missing`` or ``damaged`` when it cannot be
    trusted (unreadable, not JSON, wrong checksum, another index's, malformed entries).

    A manifest of the first format (a bare ``uri -> entry`` object without checksum) is read
    with every hash cleared, so each file is checked again once while its ids stay known.
    """
    path = manifest_path(backend, index)
    empty = Manifest(backend=backend, index=index)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        empty.state = "missing"
        return empty
    except OSError:
        empty.state = "damaged"
        return empty
    try:
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError("not an object")
        if "format" not in data:  # the first format: trusted only to name old ids
            files = {str(u): _entry(e) for u, e in data.items()}
            m = Manifest(backend=backend, index=index, files=files, legacy=True)
            m.invalidate()
            return m
        body = {k: v for k, v in data.items() if k != "checksum"}
        if data.get("checksum") != _checksum(body):
            raise ValueError("the checksum does not match")
        if data.get("format") not in (FORMAT, MARKED_FORMAT) or (
            data.get("backend"),
            data.get("index"),
        ) != (backend, index):
            raise ValueError("the manifest is of another format or index")
        roots = data.get("roots")
        files_raw = data.get("files")
        if not isinstance(roots, list) or not all(isinstance(r, str) for r in roots):
            raise ValueError("roots are malformed")
        if not isinstance(files_raw, dict):
            raise ValueError("files are malformed")
        files = {str(u): _entry(e) for u, e in files_raw.items()}
        return Manifest(
            backend=backend,
            index=index,
            files=files,
            roots=list(roots),
            marked=data.get("format") == MARKED_FORMAT,
        )
    except (ValueError, TypeError, RecursionError):
        empty.state = "damaged"
        return empty


_CACHE: dict[tuple[str, str], tuple[tuple[int, int, int], Manifest]] = {}
_CACHE_LOCK = threading.Lock()
CACHED_MANIFESTS = 8


def cached_manifest(backend: str, index: str) -> Manifest | None:
    """The sound manifest of ``index`` for reading only (context expansion asks once per hit),
    re-read when its file changes; ``None`` when there is none or it cannot be trusted."""
    try:
        st = manifest_path(backend, index).stat()
    except OSError:
        return None
    stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
    key = (backend, index)
    with _CACHE_LOCK:
        hit = _CACHE.get(key)
        if hit is not None and hit[0] == stamp:
            return hit[1]
    m = load_manifest(backend, index)
    if m.state != "ok" or m.legacy:
        return None
    with _CACHE_LOCK:
        if len(_CACHE) >= CACHED_MANIFESTS:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = (stamp, m)
    return m


def save_manifest(m: Manifest) -> None:
    """Replace the manifest atomically (a crash leaves the old one or the new one, whole)."""
    path = manifest_path(m.backend, m.index)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = m.body()
    data = json.dumps({**body, "checksum": _checksum(body)}, sort_keys=True, indent=0)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    m.state, m.legacy = "ok", False
    sidecar = ingested_path(m.backend, m.index)
    if not sidecar.exists():
        sidecar.write_text(json.dumps({"backend": m.backend, "index": m.index}) + "\n")


_THREAD_LOCKS: dict[str, threading.Lock] = {}
_THREAD_LOCKS_GUARD = threading.Lock()


class Busy(Exception):
    """Another ingest run holds the index past the time given to wait for it."""


@contextlib.contextmanager
def ingest_lock(backend: str, index: str, wait_s: float) -> Iterator[None]:
    """Hold the index's ingest lock (threads of this process, and other processes where
    ``fcntl`` exists); :class:`Busy` when it is not free within ``wait_s`` seconds."""
    path = manifest_path(backend, index).with_suffix(".lock")
    with _THREAD_LOCKS_GUARD:
        tlock = _THREAD_LOCKS.setdefault(str(path), threading.Lock())
    if not tlock.acquire(timeout=max(wait_s, 0.0)):
        raise Busy(f"another index run into '{index}' is still going")
    try:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX: the thread lock alone
            yield
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
        try:
            until = time.monotonic() + wait_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= until:
                        raise Busy(f"another index run into '{index}' is still going") from None
                    time.sleep(0.05)
            yield
        finally:
            os.close(fd)
    finally:
        tlock.release()
