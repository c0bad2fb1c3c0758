"""The native engine's on-disk store: immutable segments, tombstones, codebooks, one manifest.

Layout of ``<home>/<index>/native/``::

    manifest.json            the commit point (see manifest.py)
    cb-<generation>-<tag>/   a codebook: centroids.npy, float32 (K, dim)
    seg-<generation>-<tag>/  a segment (see segments.py), never modified once committed

Why this shape:

* **Incremental writes.**  An add writes one new segment (coded with the current codebook, no
  training) and a remove writes a new tombstone mask for the segments it touches.  Nothing
  already written is rewritten, so a write costs what it adds, not what the index holds.  The one
  exception is bounded: small writes are merged into the single small segment until it is large
  enough for a codebook.  ``rebuild`` compacts everything into one segment, dropping tombstoned
  passages and training a new codebook.
* **Atomic commits.**  New files are written (and fsynced) first; a write becomes visible only
  when ``manifest.json`` is replaced (``os.replace``, atomic on POSIX).  A crash or a refused
  write leaves the previous manifest, and so the previous index, intact; files no manifest lists
  are swept by the next commit.
* **Larger than memory.**  Token vectors are int8 with a scale per token (``dim + 4`` bytes) and
  memory-mapped; a search reads centroids and the segments' maps, and only its final candidates'
  vectors.
* **Readers never lock.**  A search works on a :class:`Snapshot` (one manifest generation, its
  segments open).  Files of an old generation stay readable while a reader holds them (POSIX
  keeps unlinked files alive), and a reader that races a compaction simply reloads.
"""

from __future__ import annotations

import os
import secrets
import shutil
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from indexplug_colbert.manifest import MANIFEST, CodebookSettings, Manifest, StoreError
from indexplug_colbert.segments import ID_DTYPE, Segment, dir_bytes, fsync_dir

CENTROIDS = "centroids.npy"
RELOAD_ATTEMPTS = 5


@dataclass
class SegmentView:
    """A segment as one generation sees it: its data plus that generation's tombstones."""

    segment: Segment
    docs: int
    alive: NDArray[np.bool_] | None
    """``None`` when nothing in the segment is removed (the common case: no mask to apply)."""

    def is_alive(self, doc: int) -> bool:
        return self.alive is None or bool(self.alive[doc])

    def live_docs(self) -> NDArray[np.int64]:
        if self.alive is None:
            return np.arange(self.docs, dtype=np.int64)
        return np.flatnonzero(self.alive).astype(np.int64)


@dataclass
class Snapshot:
    """One manifest generation, open for reading."""

    manifest: Manifest
    views: list[SegmentView] = field(default_factory=list)
    centroids: dict[str, NDArray[np.float32]] = field(default_factory=dict)

    @property
    def live(self) -> int:
        return self.manifest.live

    def find(self, ids: Sequence[str]) -> dict[str, tuple[int, int]]:
        """``id -> (segment position, local number)`` for each id held and not removed."""
        if not ids or not self.views:
            return {}
        wanted = np.array([i.encode("ascii", "replace") for i in ids], dtype=ID_DTYPE)
        found: dict[str, tuple[int, int]] = {}
        for s, view in enumerate(self.views):
            local = view.segment.locate(wanted)
            for i in np.flatnonzero(local >= 0):
                doc = int(local[i])
                if view.is_alive(doc):
                    found.setdefault(ids[int(i)], (s, doc))
        return found


class Store:
    """The segments of one index.  Reads go through :meth:`snapshot`; writes through
    :class:`~indexplug_colbert.transaction.Transaction` (under the index's write lock)."""

    def __init__(self, folder: Path, dim: int, settings: CodebookSettings) -> None:
        self.folder = folder
        self.dim = dim
        self.settings = settings
        self._lock = threading.Lock()
        self._snapshot: Snapshot | None = None
        self._stamp: tuple[int, int, int] | None = None
        self._segments: dict[str, Segment] = {}
        self._centroids: dict[str, NDArray[np.float32]] = {}

    @property
    def manifest_path(self) -> Path:
        return self.folder / MANIFEST

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.manifest_path)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def snapshot(self, *, fresh: bool = False) -> Snapshot:
        """The current generation, cached until ``manifest.json`` changes (``fresh``: read it
        again regardless, as a writer does before building on it)."""
        for attempt in range(RELOAD_ATTEMPTS):
            stamp = self._stat()
            with self._lock:
                if not fresh and self._snapshot is not None and stamp == self._stamp:
                    return self._snapshot
                try:
                    snap = self._load()
                except FileNotFoundError:
                    # a compaction replaced the manifest and swept its files between our reads
                    if attempt == RELOAD_ATTEMPTS - 1:
                        raise
                    continue
                self._snapshot, self._stamp = snap, stamp
                return snap
        raise AssertionError("unreachable")

    def _load(self) -> Snapshot:
        try:
            raw = self.manifest_path.read_bytes()
        except FileNotFoundError:
            return Snapshot(Manifest(generation=0, dim=self.dim))
        manifest = Manifest.from_bytes(raw)
        if manifest.dim != self.dim:
            raise StoreError(
                f"the store holds {manifest.dim}-dimensional vectors; the embedder gives {self.dim}"
            )
        views: list[SegmentView] = []
        segments: dict[str, Segment] = {}
        for meta in manifest.segments:
            seg = self._segments.get(meta.name) or Segment(self.folder / meta.name, meta, self.dim)
            segments[meta.name] = seg
            alive = ~np.load(self.folder / meta.name / meta.tombstones) if meta.tombstones else None
            views.append(SegmentView(seg, meta.docs, alive))
        centroids = {c.name: self.centroids(c.name) for c in manifest.codebooks}
        # segments no longer listed are closed when the last snapshot using them goes
        self._segments = segments
        self._centroids = dict(centroids)
        return Snapshot(manifest, views, centroids)

    def centroids(self, name: str) -> NDArray[np.float32]:
        cached = self._centroids.get(name)
        if cached is None:
            cached = np.load(self.folder / name / CENTROIDS)
            self._centroids[name] = cached
        return cached

    def forget(self) -> None:
        """Drop cached state so the next snapshot reads everything again (after ``tamper``)."""
        with self._lock:
            for seg in self._segments.values():
                seg.close()
            self._segments.clear()
            self._centroids.clear()
            self._snapshot = None
            self._stamp = None

    close = forget

    def size_bytes(self) -> int:
        return dir_bytes(self.folder) if self.folder.exists() else 0

    def commit(self, manifest: Manifest) -> None:
        """Make ``manifest`` the current generation, then sweep what no generation lists."""
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / f".{MANIFEST}.{secrets.token_hex(4)}.tmp"
        with open(tmp, "wb") as fh:
            fh.write(manifest.to_bytes())
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.manifest_path)
        fsync_dir(self.folder)
        self.sweep(manifest)

    def sweep(self, manifest: Manifest) -> None:
        """Delete segments, codebooks and tombstone files ``manifest`` does not list (left by an
        older generation, a refused write or a crash).  Called under the write lock only."""
        segments = {s.name: s for s in manifest.segments}
        codebooks = {c.name for c in manifest.codebooks}
        for entry in self.folder.iterdir():
            if entry.name.startswith("seg-") and entry.is_dir():
                meta = segments.get(entry.name)
                if meta is None:
                    shutil.rmtree(entry, ignore_errors=True)
                    continue
                for f in entry.glob("tombstones-*.npy"):
                    if f.name != meta.tombstones:
                        f.unlink(missing_ok=True)
            elif entry.name.startswith("cb-") and entry.is_dir():
                if entry.name not in codebooks:
                    shutil.rmtree(entry, ignore_errors=True)
            elif entry.name.startswith(f".{MANIFEST}") and entry.name.endswith(".tmp"):
                entry.unlink(missing_ok=True)
