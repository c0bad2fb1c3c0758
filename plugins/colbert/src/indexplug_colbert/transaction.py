"""One write to the native store: staged on disk, then committed or aborted as a whole.

Nothing staged is visible to readers until :meth:`Transaction.commit` replaces the manifest, and
:meth:`Transaction.abort` deletes what was staged, so a refused write (over budget, past its
deadline) leaves the index exactly as it was.  The caller holds the index's write lock for the
transaction's whole life.

Coding new segments: a segment of at least ``min_tokens`` token vectors is coded with the
current codebook; if there is none, or the segment is ``retrain_growth`` times larger than what
the current one was trained on (the index outgrew it), a codebook is trained on the segment
first and becomes the current one.  Older segments keep the codebook they were coded with, so
no write ever re-codes what is stored; ``rebuild`` (``merge`` of everything, ``retrain=True``)
brings the index back to one codebook sized for all of it.
"""

from __future__ import annotations

import secrets
import shutil
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from indexplug_colbert.candidates import codebook_size, train_centroids
from indexplug_colbert.manifest import CodebookMeta, Manifest, SegmentMeta
from indexplug_colbert.segments import (
    PassageData,
    Reused,
    code_segment,
    fsync_dir,
    rows,
    save,
    stored,
    write_segment,
)
from indexplug_colbert.store import CENTROIDS, Snapshot, Store

Check = Callable[[str], None]


def _no_check(stage: str) -> None:
    return None


class Transaction:
    """See the module docstring."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.base: Snapshot = store.snapshot(fresh=True)
        m = self.base.manifest
        self.generation = m.generation + 1
        self.segments: list[SegmentMeta] = list(m.segments)
        self.codebooks: list[CodebookMeta] = list(m.codebooks)
        self.current: str | None = m.current
        self._dead: dict[str, NDArray[np.bool_]] = {}
        self._staged: list[Path] = []
        self.done = False

    # -- segments ------------------------------------------------------------------------
    def add_segment(
        self,
        docs: Iterable[PassageData],
        *,
        count: int,
        tokens: int,
        check: Check = _no_check,
        retrain: bool = False,
        reused: Sequence[Reused] = (),
    ) -> SegmentMeta:
        """Write a segment of ``docs`` and code it if it is large enough (module docstring);
        ``reused`` says which of them a merge takes from which stored segment, so that those
        coded with the codebook this segment gets keep their codes
        (:func:`~indexplug_colbert.segments.code_segment`)."""
        folder = self.store.folder
        meta = write_segment(
            folder, self.generation, docs, count=count, tokens=tokens, dim=self.store.dim
        )
        self._staged.append(folder / meta.name)
        if tokens >= self.store.settings.min_tokens:
            book = self._codebook_for(folder / meta.name, tokens, retrain, check)
            check("coding the segment")
            same = [r for r in reused if r.source.codebook == book.name]
            code_segment(folder / meta.name, self.store.centroids(book.name), same)
            meta = replace(meta, codebook=book.name)
        self.segments.append(meta)
        return meta

    def _codebook_for(self, path: Path, tokens: int, retrain: bool, check: Check) -> CodebookMeta:
        cfg = self.store.settings
        current = next((c for c in self.codebooks if c.name == self.current), None)
        if current is not None and not retrain and tokens < cfg.retrain_growth * current.trained_on:
            return current
        check("training a codebook")
        k = codebook_size(tokens, cfg.per_sqrt)
        centroids = train_centroids(
            rows(path),
            k,
            iterations=cfg.iterations,
            sample_per_centroid=cfg.sample_per_centroid,
            seed=cfg.seed,
        )
        name = f"cb-{self.generation:08d}-{secrets.token_hex(4)}"
        (self.store.folder / name).mkdir()
        self._staged.append(self.store.folder / name)
        save(self.store.folder / name / CENTROIDS, centroids)
        fsync_dir(self.store.folder / name)
        book = CodebookMeta(name=name, k=k, trained_on=tokens)
        self.codebooks.append(book)
        self.current = name
        return book

    def merge(
        self,
        positions: Sequence[int],
        *,
        extra: Sequence[PassageData] = (),
        check: Check = _no_check,
        retrain: bool = False,
    ) -> None:
        """Replace base segments ``positions`` by one segment of their live passages (and
        ``extra`` new ones), tombstoned passages dropped."""
        lives: dict[int, NDArray[np.int64]] = {}
        for s in positions:
            view = self.base.views[s]
            docs = view.live_docs()
            dead = self._dead.get(view.segment.name)
            lives[s] = docs[~dead[docs]] if dead is not None else docs
        self.drop_segments([self.base.views[s].segment.name for s in positions])
        count = sum(len(d) for d in lives.values()) + len(extra)
        if count == 0:
            return
        tokens = sum(len(d.vectors) for d in extra)
        for s, docs in lives.items():
            offs = self.base.views[s].segment.offsets
            tokens += int((offs[docs + 1] - offs[docs]).sum())

        def stream() -> Iterator[PassageData]:
            for s, docs in lives.items():
                yield from stored(self.base.views[s].segment, docs)
            yield from extra

        reused, first = [], 0
        for s, docs in lives.items():
            reused.append(Reused(first, self.base.views[s].segment, docs))
            first += len(docs)
        self.add_segment(
            stream(), count=count, tokens=tokens, check=check, retrain=retrain, reused=reused
        )

    def drop_segments(self, names: Iterable[str]) -> None:
        gone = set(names)
        self.segments = [s for s in self.segments if s.name not in gone]
        for name in gone:
            self._dead.pop(name, None)

    # -- removals ------------------------------------------------------------------------
    def tombstone(self, s: int, docs: Sequence[int]) -> None:
        """Mark passages of base segment position ``s`` removed."""
        view = self.base.views[s]
        name = view.segment.name
        if not any(m.name == name for m in self.segments):
            return  # already dropped by this transaction
        dead = self._dead.get(name)
        if dead is None:
            dead = ~view.alive if view.alive is not None else np.zeros(view.docs, dtype=bool)
            self._dead[name] = dead
        dead[list(docs)] = True

    def _stage_tombstones(self) -> None:
        """Write the masks this transaction changed (once, before measuring or committing)."""
        for name, dead in list(self._dead.items()):
            pos = next(i for i, m in enumerate(self.segments) if m.name == name)
            current = self.segments[pos]
            removed = int(dead.sum())
            if removed == current.docs:
                self.segments.pop(pos)  # nothing left in it: drop it rather than mask it all
            else:
                fname = f"tombstones-{self.generation}.npy"
                path = self.store.folder / name / fname
                save(path, dead)
                self._staged.append(path)
                self.segments[pos] = replace(current, removed=removed, tombstones=fname)
            del self._dead[name]

    # -- finishing -----------------------------------------------------------------------
    @property
    def manifest(self) -> Manifest:
        used = {s.codebook for s in self.segments} | {self.current}
        return Manifest(
            generation=self.generation,
            dim=self.store.dim,
            segments=tuple(self.segments),
            codebooks=tuple(c for c in self.codebooks if c.name in used),
            current=self.current,
        )

    def bytes_after(self, extra: int = 0) -> int:
        """Measured on disk: every file the new generation lists (plus ``extra`` bytes the
        caller writes alongside, such as the index's own settings file)."""
        self._stage_tombstones()
        manifest = self.manifest
        folder = self.store.folder
        total = len(manifest.to_bytes()) + extra
        for book in manifest.codebooks:
            total += (folder / book.name / CENTROIDS).stat().st_size
        for meta in manifest.segments:
            for f in (folder / meta.name).iterdir():
                if f.name.startswith("tombstones-") and f.name != meta.tombstones:
                    continue
                total += f.stat().st_size
        return total

    def commit(self) -> Manifest:
        self._stage_tombstones()
        manifest = self.manifest
        self.store.commit(manifest)
        self.done = True
        return manifest

    def abort(self) -> None:
        if self.done:
            return
        for path in self._staged:
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        self._staged.clear()
        self.done = True
