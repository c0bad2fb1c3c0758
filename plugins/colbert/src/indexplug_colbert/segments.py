"""One segment on disk: how it is written (once) and read (memory-mapped, many times).

Files of ``seg-<generation>-<tag>/``::

    vectors.npy        int8 (tokens, dim): token vector codes (see codec.py), memory-mapped
    scales.npy         float32 (tokens,): one scale per token vector
    offsets.npy        int64 (passages + 1): passage i owns token rows offsets[i]:offsets[i + 1]
    ids.npy            S64: the passages' content-addressed ids
    passages.jsonl     one passage (JSON) per line, read for hits only
    records.npy        int64 (passages + 1): byte offsets of those lines
    lists.npy, list_docs.npy, doc_codes.npy, doc_code_offsets.npy
                       the maps into the segment's codebook (segments large enough only)
    pooled.npy         float32 (passages, dim): each passage's pooled vector (same segments)
    tombstones-<generation>.npy   bool (passages): removed passages, one file per generation

Every file is fsynced before the manifest that lists the segment is written.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from indexplug_colbert.candidates import (
    SegmentLists,
    assign,
    doc_pairs,
    lists_from_pairs,
    pooled_vectors,
    token_pairs,
)
from indexplug_colbert.codec import Block, DequantizedRows
from indexplug_colbert.manifest import SegmentMeta, StoreError
from indexplug_colbert.records import Facets, facets

ID_DTYPE = "S64"
NPY_HEADER = 128
"""Bytes of an ``.npy`` header (numpy pads it to a multiple of 64; 128 for ours)."""
LIST_FILES = ("lists.npy", "list_docs.npy", "doc_codes.npy", "doc_code_offsets.npy", "pooled.npy")


@dataclass(frozen=True)
class PassageData:
    """What a segment is written from: per passage, its id, stored record and vectors."""

    id: str
    record: bytes
    """The passage as one line of JSON (no trailing newline)."""
    vectors: Block


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    try:
        fsync_file(path)
    except OSError:
        pass  # some filesystems cannot fsync a directory; the rename is still atomic


def save(path: Path, array: NDArray[Any]) -> None:
    with open(path, "wb") as fh:
        np.save(fh, array, allow_pickle=False)
        fh.flush()
        os.fsync(fh.fileno())


def dir_bytes(path: Path) -> int:
    """Bytes of the regular files under ``path`` (what the budget measures)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.stat(os.path.join(root, f)).st_size
            except FileNotFoundError:
                pass
    return total


def projected_bytes(docs: int, tokens: int, dim: int, record_bytes: int, coded: bool) -> int:
    """The size a segment of this shape will have on disk, before writing it (budget check):
    exact for the vectors, offsets, ids and records; a bound for the codebook maps (at most one
    entry per token in each direction).  A codebook trained alongside is not counted here."""
    size = 5 * NPY_HEADER + tokens * (dim + 4) + (docs + 1) * 16 + docs * 64
    size += record_bytes + docs  # one newline per record
    if coded:
        size += len(LIST_FILES) * NPY_HEADER + tokens * 8 + (docs + 1) * 8 + docs * dim * 4
    return size


def write_segment(
    folder: Path,
    generation: int,
    docs: Iterable[PassageData],
    *,
    count: int,
    tokens: int,
    dim: int,
) -> SegmentMeta:
    """Write a segment's data files (no codebook maps yet) and return its (uncoded) meta.

    ``tokens`` is known up front so vectors stream into memory maps instead of being gathered
    in memory (a compaction of an index larger than memory).
    """
    if count < 1:
        raise ValueError("a segment holds at least one passage")
    name = f"seg-{generation:08d}-{secrets.token_hex(4)}"
    path = folder / name
    path.mkdir(parents=True)
    vectors = np.lib.format.open_memmap(
        path / "vectors.npy", mode="w+", dtype=np.int8, shape=(tokens, dim)
    )
    scales = np.lib.format.open_memmap(
        path / "scales.npy", mode="w+", dtype=np.float32, shape=(tokens,)
    )
    offsets = np.zeros(count + 1, dtype=np.int64)
    records = np.zeros(count + 1, dtype=np.int64)
    ids = np.zeros(count, dtype=ID_DTYPE)
    row = written = 0
    with open(path / "passages.jsonl", "wb") as fh:
        for i, d in enumerate(docs):
            n = len(d.vectors)
            vectors[row : row + n] = d.vectors.codes
            scales[row : row + n] = d.vectors.scales
            row += n
            offsets[i + 1] = row
            ids[i] = d.id.encode("ascii")
            fh.write(d.record + b"\n")
            records[i + 1] = fh.tell()
            written = i + 1
        fh.flush()
        os.fsync(fh.fileno())
    if row != tokens or written != count:
        raise ValueError(f"expected {count} passages / {tokens} tokens, got {written} / {row}")
    vectors.flush()
    scales.flush()
    del vectors, scales
    fsync_file(path / "vectors.npy")
    fsync_file(path / "scales.npy")
    save(path / "offsets.npy", offsets)
    save(path / "ids.npy", ids)
    save(path / "records.npy", records)
    return SegmentMeta(name=name, docs=count, tokens=tokens)


def rows(path: Path) -> DequantizedRows:
    """A written segment's token vectors as float32 rows (for training and assignment)."""
    return DequantizedRows(
        np.load(path / "vectors.npy", mmap_mode="r"), np.load(path / "scales.npy", mmap_mode="r")
    )


@dataclass(frozen=True)
class Reused:
    """Passages ``first``, ``first + 1``, ... of a segment being coded are the passages ``docs``
    of ``source`` (a merge), and ``source`` was coded with the same codebook."""

    first: int
    source: Segment
    docs: NDArray[np.int64]


def code_segment(path: Path, centroids: NDArray[np.float32], reused: Sequence[Reused] = ()) -> None:
    """Assign every token of the segment at ``path`` to a centroid, write both maps and the
    passages' pooled vectors.

    Passages named in ``reused`` keep the centroids and pooled vectors their source segment
    has: with the same codebook and the same stored vectors, assigning them again would give
    the same centroids (but for a token equally near two of them to within float rounding,
    which the product's row count can tip either way) and the same pooled vectors, and
    assignment (a product with the whole codebook) is most of what writing a segment costs once
    the codebook has thousands of centroids.  Only the other passages' tokens are assigned.
    """
    vectors = rows(path)
    offsets = np.load(path / "offsets.npy")
    k, ndocs = len(centroids), len(offsets) - 1
    pooled = np.zeros((ndocs, vectors.codes.shape[1]), dtype=np.float32)
    covered = np.zeros(ndocs, dtype=bool)
    pairs: list[NDArray[np.int64]] = []
    for r in reused:
        stop = r.first + len(r.docs)
        lists, source_pooled = r.source.lists, r.source.pooled
        if lists is None or source_pooled is None or len(r.docs) == 0:
            continue
        pairs.append(doc_pairs(lists, r.docs, r.first, k))
        pooled[r.first : stop] = source_pooled[r.docs]
        covered[r.first : stop] = True
    todo = np.flatnonzero(~covered)
    for run in np.split(todo, np.flatnonzero(np.diff(todo) != 1) + 1) if len(todo) else []:
        a, b = int(run[0]), int(run[-1]) + 1
        lo, hi = int(offsets[a]), int(offsets[b])
        local = offsets[a : b + 1] - lo
        codes = assign(DequantizedRows(vectors.codes[lo:hi], vectors.scales[lo:hi]), centroids)
        pairs.append(token_pairs(codes, local, k, first=a))
        pooled[a:b] = pooled_vectors(vectors.codes[lo:hi], vectors.scales[lo:hi], local)
    every = np.sort(np.concatenate(pairs)) if pairs else np.zeros(0, dtype=np.int64)
    lists = lists_from_pairs(every, ndocs, k)
    save(path / "pooled.npy", pooled)
    save(path / "lists.npy", lists.list_offsets)
    save(path / "list_docs.npy", lists.list_docs)
    save(path / "doc_codes.npy", lists.doc_codes)
    save(path / "doc_code_offsets.npy", lists.doc_offsets)
    fsync_dir(path)


class Segment:
    """One committed segment, opened read-only.  Tombstones are not part of it (they change by
    generation); a snapshot pairs a segment with its current mask."""

    def __init__(self, path: Path, meta: SegmentMeta, dim: int) -> None:
        self._fd = -1
        self.path = path
        self.name = meta.name
        self.codebook = meta.codebook
        self.vectors: NDArray[np.int8] = np.load(path / "vectors.npy", mmap_mode="r")
        self.scales: NDArray[np.float32] = np.load(path / "scales.npy", mmap_mode="r")
        self.offsets: NDArray[np.int64] = np.load(path / "offsets.npy")
        self.ids: NDArray[np.bytes_] = np.load(path / "ids.npy")
        self.records: NDArray[np.int64] = np.load(path / "records.npy")
        if len(self.ids) != meta.docs or len(self.offsets) != meta.docs + 1:
            raise StoreError(f"segment {meta.name} does not hold the {meta.docs} passages listed")
        if self.vectors.shape != (meta.tokens, dim) or self.scales.shape != (meta.tokens,):
            raise StoreError(f"segment {meta.name} has vectors of shape {self.vectors.shape}")
        self._id_order = np.argsort(self.ids, kind="stable")
        self._sorted_ids = self.ids[self._id_order]
        self.lists: SegmentLists | None = None
        self.pooled: NDArray[np.float32] | None = None
        if meta.codebook is not None:
            self.pooled = np.load(path / "pooled.npy", mmap_mode="r")
            self.lists = SegmentLists(
                list_offsets=np.load(path / "lists.npy"),
                list_docs=np.load(path / "list_docs.npy", mmap_mode="r"),
                doc_offsets=np.load(path / "doc_code_offsets.npy"),
                doc_codes=np.load(path / "doc_codes.npy", mmap_mode="r"),
            )
        self._facets: Facets | None = None
        # Keep the passages file open: a compaction may unlink it while a snapshot is in use.
        self._fd = os.open(path / "passages.jsonl", os.O_RDONLY)

    def facets(self) -> Facets:
        """Each passage's caller key and metadata (what filters and keys read), parsed from
        the records once: a committed segment never changes (the kit's hooks that edit one
        make the store open it afresh)."""
        cached = self._facets
        if cached is None:
            blob = os.pread(self._fd, int(self.records[-1]), 0)
            offs = self.records.tolist()
            cached = facets(
                (self.ids[i].decode("ascii", "replace"), blob[offs[i] : offs[i + 1]])
                for i in range(len(self.ids))
            )
            self._facets = cached
        return cached

    def after(self, after: str | None) -> NDArray[np.int64]:
        """Local numbers of the passages whose id is above ``after``, in ascending id order."""
        if after is None:
            return self._id_order.astype(np.int64, copy=False)
        raw = after.encode("utf-8")
        # ids are ASCII hex, so byte order is string order; a longer cursor sorts right after
        # its first 64 bytes, which no id (at most 64 bytes) passes but by being larger
        start = int(np.searchsorted(self._sorted_ids, np.bytes_(raw[:64]), side="right"))
        return self._id_order[start:].astype(np.int64, copy=False)

    def block(self, doc: int) -> Block:
        """Passage ``doc``'s token vectors, views into the memory maps."""
        start, end = self.offsets[doc], self.offsets[doc + 1]
        return Block(self.vectors[start:end], self.scales[start:end])

    def record(self, doc: int) -> bytes:
        start, end = int(self.records[doc]), int(self.records[doc + 1])
        return os.pread(self._fd, end - start, start)

    def locate(self, ids: NDArray[np.bytes_]) -> NDArray[np.int64]:
        """Segment-local numbers of ``ids`` (``-1`` where absent), by binary search."""
        pos = np.minimum(np.searchsorted(self._sorted_ids, ids), len(self._sorted_ids) - 1)
        found = self._sorted_ids[pos] == ids
        return np.where(found, self._id_order[pos], -1).astype(np.int64)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:
        self.close()


def stored(segment: Segment, docs: Iterable[int]) -> Iterable[PassageData]:
    """Stream passages of a segment as they are stored (for merging: nothing is re-encoded)."""
    for d in docs:
        doc = int(d)
        yield PassageData(
            id=segment.ids[doc].decode("ascii"),
            record=segment.record(doc).rstrip(b"\n"),
            vectors=segment.block(doc),
        )


Check = Callable[[str], None]
