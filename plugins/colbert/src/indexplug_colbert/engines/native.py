"""The native engine: MaxSim over any token-level :class:`~indexplug.protocols.Embedder`.

Storage is :mod:`indexplug_colbert.store` (int8 segments, tombstones, codebooks, a manifest);
candidate generation is :mod:`indexplug_colbert.candidates`; scoring is
:mod:`indexplug_colbert.maxsim`; :mod:`indexplug_colbert.search` runs them over one snapshot.
It needs numpy only, so with the model-free ``hashing:default`` embedder it runs anywhere.

A search, stage by stage (the deadline is checked between each):

1. embed the query, one vector per token;
2. coded segments propose candidates (probe, reach, centroid interaction); the small uncoded
   segment, if any, contributes every live passage;
3. the best ``candidates`` (at least ``top_k``) are scored by exact MaxSim over their stored
   vectors, read from the memory maps;
4. the best ``top_k`` exact scores become hits.

When the pool would cover a quarter of the index, or ``exhaustive`` is set, stage 2 is skipped
and every live passage is scored exactly (the same arithmetic, so results agree).
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from indexplug.deadlines import Deadline
from indexplug.embedcache import EmbeddingCache, cache_for, embed_passages
from indexplug.filters import Filter, matches
from indexplug.passages import Passage
from indexplug.protocols import Embedder, Granularity, Readiness

from indexplug_colbert import kernels
from indexplug_colbert import search as stages
from indexplug_colbert.candidates import codebook_size
from indexplug_colbert.codec import Block, quantize
from indexplug_colbert.engines.base import (
    EmbedderUnavailable,
    Explained,
    IncompatibleIndex,
    PendingWrite,
    Prepared,
    Ranked,
    Staged,
    TokenMatchData,
    check_deadline,
)
from indexplug_colbert.engines.native_settings import OPTIONS, NativeSettings
from indexplug_colbert.manifest import MANIFEST, Manifest
from indexplug_colbert.maxsim import EMPTY_SCORE, as_query, maxsim_blocks, token_matches, top_k
from indexplug_colbert.records import RecordLost, altered, from_record, to_record
from indexplug_colbert.segments import PassageData, Segment, projected_bytes
from indexplug_colbert.store import SegmentView, Snapshot, Store
from indexplug_colbert.transaction import Transaction

__all__ = ["OPTIONS", "NativeEngine", "NativeIndex", "NativeSettings", "live_count"]

DEFAULT_EMBEDDER = "hashing:default"
EMBED_BATCH = 64
"""Passages embedded per call: small enough to check the deadline often, large enough that a
transformer embedder batches well."""
EXHAUSTIVE_SHARE = 0.25
"""Score everything exactly when the pool asks for this share of the index: candidate
generation would save little and could return fewer than ``top_k``."""
SCAN_CHECK = 1024
"""Passages a scan reads between two deadline checks."""


def live_count(folder: Path) -> int:
    """The live passages of the native index whose engine data is in ``folder``, from its
    manifest alone (no embedder, no segment opened); 0 when it has none yet."""
    try:
        raw = (folder / MANIFEST).read_bytes()
    except FileNotFoundError:
        return 0
    return Manifest.from_bytes(raw).live


class NativeEngine:
    """Opens :class:`NativeIndex` objects with one set of settings."""

    name = "native"
    options = OPTIONS
    default_embedder = DEFAULT_EMBEDDER

    def __init__(
        self,
        settings: Mapping[str, Any],
        embedder_factory: Callable[[str], Embedder] | None,
    ) -> None:
        self.settings = NativeSettings.from_options(settings)
        self._embedder_factory = embedder_factory

    def readiness(self) -> Readiness:
        return Readiness.yes()  # numpy only; the embedder's readiness is checked per index

    def open(self, folder: Path, embedder_spec: str) -> NativeIndex:
        if self._embedder_factory is None:
            raise EmbedderUnavailable("the backend was created without an embedder factory")
        try:
            embedder = self._embedder_factory(embedder_spec)
        except Exception as exc:  # unknown provider, missing model, ...
            raise EmbedderUnavailable(
                f"embedder '{embedder_spec}' cannot be loaded: {type(exc).__name__}: {exc}"
            ) from exc
        ready = embedder.readiness()
        if not ready.ready:
            raise EmbedderUnavailable(f"embedder '{embedder_spec}' is not ready: {ready.reason}")
        if Granularity.TOKEN not in embedder.granularities:
            raise IncompatibleIndex(
                f"embedder '{embedder.name}' gives no token vectors (Granularity.TOKEN); late "
                "interaction needs one vector per token"
            )
        return NativeIndex(folder, embedder, self.settings)

    def close(self) -> None:
        pass


def _checked(v: Any, dim: int, what: str) -> np.ndarray:
    arr = np.asarray(v, dtype=np.float32)
    if arr.ndim != 2 or (len(arr) and arr.shape[1] != dim):
        raise IncompatibleIndex(
            f"the embedder returned {what} of shape {arr.shape}, not (n, {dim})"
        )
    if not np.isfinite(arr).all():
        raise IncompatibleIndex(f"the embedder returned non-finite values for {what}")
    return arr


class _Pending:
    """A :class:`~.base.PendingWrite` over a store transaction."""

    def __init__(self, txn: Transaction) -> None:
        self.txn = txn

    def bytes_after(self, extra: int = 0) -> int:
        return self.txn.bytes_after(extra)

    def commit(self) -> None:
        self.txn.commit()

    def abort(self) -> None:
        self.txn.abort()


class NativeIndex:
    """One index served by the native engine."""

    def __init__(self, folder: Path, embedder: Embedder, settings: NativeSettings) -> None:
        self.embedder = embedder
        self.embedder_name = embedder.name
        self.dim = embedder.dim
        self.settings = settings
        self.store = Store(folder, embedder.dim, settings.codebook)

    # -- reading -------------------------------------------------------------------------
    def _snapshot(self) -> Snapshot:
        return self.store.snapshot()

    def live_count(self) -> int:
        return self._snapshot().live

    def known(self, ids: Sequence[str]) -> set[str]:
        return set(self._snapshot().find(ids))

    def size_bytes(self) -> int:
        return self.store.size_bytes()

    def details(self) -> dict[str, Any]:
        m = self._snapshot().manifest
        return {
            "generation": m.generation,
            "segments": len(m.segments),
            "coded_segments": sum(1 for s in m.segments if s.codebook),
            "codebooks": [{"k": c.k, "trained_on": c.trained_on} for c in m.codebooks],
            "token_vectors": sum(s.tokens for s in m.segments),
            "tombstoned": sum(s.removed for s in m.segments),
            "dim": self.dim,
            "vector_codec": "int8, one float32 scale per token",
            "kernels": kernels.describe(),
        }

    def _query(self, query: str) -> np.ndarray:
        q = self.embedder.embed_query(query, Granularity.TOKEN)
        return as_query(_checked(q, self.dim, "the query"))

    def _pool(self, snap: Snapshot, q: np.ndarray, k: int, live: int) -> np.ndarray:
        """The passages to score exactly: every one of the ``live`` passages ``snap`` shows,
        or candidates, and every one again when candidates come short of ``top_k``."""
        pool = max(self.settings.candidates, k)
        if self.settings.exhaustive or pool >= EXHAUSTIVE_SHARE * live:
            return stages.all_live(snap)
        cfg = self.settings
        pairs = stages.candidates(
            snap,
            q,
            nprobe=cfg.nprobe,
            reach_pool=cfg.reach_pool,
            pool=pool,
            pooled_weight=cfg.pooled_weight,
        )
        return pairs if len(pairs) >= min(k, live) else stages.all_live(snap)

    def _passing(self, snap: Snapshot, f: Filter, deadline: Deadline) -> tuple[Snapshot, int]:
        """``snap`` showing only the live passages that pass ``f`` (their masks narrowed, so
        candidate generation and exact scoring never see the others), and how many there are."""
        views: list[SegmentView] = []
        total = 0
        for view in snap.views:
            check_deadline(deadline, "filtering")
            metadata = view.segment.facets().metadata
            keep = np.zeros(view.docs, dtype=bool)
            for d in view.live_docs().tolist():
                keep[d] = matches(f, metadata[d])
            total += int(keep.sum())
            views.append(SegmentView(view.segment, view.docs, keep))
        return Snapshot(snap.manifest, views, snap.centroids), total

    def search(
        self, query: str, k: int, deadline: Deadline, filters: Filter | None = None
    ) -> Ranked:
        check_deadline(deadline, "opening the index")
        snap = self._snapshot()
        if snap.live == 0:
            return Ranked(hits=[], searched=0, query_tokens=0)
        check_deadline(deadline, "embedding the query")
        q = self._query(query)
        if len(q) == 0:
            return Ranked(hits=[], searched=snap.live, query_tokens=0)
        shown, live = snap, snap.live
        if filters is not None:
            shown, live = self._passing(snap, filters, deadline)
            if live == 0:
                return Ranked(hits=[], searched=snap.live, query_tokens=len(q))
        check_deadline(deadline, "generating candidates")
        pairs = self._pool(shown, q, k, live)
        check_deadline(deadline, "exact MaxSim")
        scores = stages.exact(shown, q, pairs, lambda st: check_deadline(deadline, st))
        best = top_k(scores, k)
        check_deadline(deadline, "reading the hits")
        hits = [
            (_passage(snap.views[int(s)].segment, int(d)), float(scores[i]))
            for i, (s, d) in zip(best, pairs[best], strict=True)
        ]
        return Ranked(hits=hits, searched=snap.live, query_tokens=len(q))

    def stored(self, ids: Sequence[str]) -> dict[str, Passage]:
        snap = self._snapshot()
        return {i: _passage(snap.views[s].segment, d) for i, (s, d) in snap.find(ids).items()}

    def of_keys(self, keys: Sequence[str]) -> dict[str, list[Passage]]:
        snap = self._snapshot()
        out: dict[str, list[Passage]] = {}
        for key, places in _keyed(snap, keys).items():
            out[key] = [_passage(snap.views[s].segment, d) for s, d in places]
        return out

    def scan(
        self, after: str | None, limit: int, filters: Filter | None, deadline: Deadline
    ) -> tuple[list[Passage], bool]:
        """A merge of the segments' id orders from the cursor on (each segment keeps its ids
        sorted), so a page costs what it reads, not what the index holds."""
        snap = self._snapshot()
        merged = heapq.merge(*(_in_id_order(s, v, after) for s, v in enumerate(snap.views)))
        page: list[Passage] = []
        last = b""
        for n, (pid, s, d) in enumerate(merged):
            if n % SCAN_CHECK == 0:
                check_deadline(deadline, "scanning")
            if pid == last:
                continue  # one id live twice: served once
            last = pid
            seg = snap.views[s].segment
            if filters is not None and not matches(filters, seg.facets().metadata[d]):
                continue
            if len(page) == limit:
                return page, True
            page.append(_passage(seg, d))
        return page, False

    def candidate_ids(self, query: str, k: int) -> list[str]:
        """The ids a search for ``query`` would score exactly (to measure the recall of
        candidate generation: ``bench/exhaustive_recall.py``)."""
        snap = self._snapshot()
        pairs = self._pool(snap, self._query(query), k, snap.live)
        return [snap.views[int(s)].segment.ids[int(d)].decode("ascii") for s, d in pairs]

    def _embed(self, passages: Sequence[Passage], deadline: Deadline) -> list[Block]:
        cache = self._cache()
        blocks: list[Block] = []
        for b in range(0, len(passages), EMBED_BATCH):
            check_deadline(deadline, "embedding the passages")
            batch = passages[b : b + EMBED_BATCH]
            out = embed_passages(self.embedder, batch, Granularity.TOKEN, cache=cache)
            if len(out) != len(batch):
                raise IncompatibleIndex(
                    f"the embedder returned {len(out)} results for {len(batch)} passages"
                )
            blocks += [quantize(_checked(v, self.dim, "a passage")) for v in out]
        return blocks

    def _cache(self) -> EmbeddingCache | None:
        wanted = self.settings.embed_cache
        if wanted is None:
            wanted = not self.embedder_name.startswith("hashing:")
        if not wanted:
            return None
        return cache_for(self.embedder, root=self.settings.embed_cache_dir, dtype="float16")

    def rerank(self, query: str, passages: Sequence[Passage], deadline: Deadline) -> Ranked:
        check_deadline(deadline, "embedding the query")
        q = self._query(query)
        if len(q) == 0:
            return Ranked(hits=[], searched=len(passages), query_tokens=0)
        blocks = self._embed(passages, deadline)
        check_deadline(deadline, "exact MaxSim")
        scores = maxsim_blocks(q, blocks)
        order = top_k(scores, len(passages))
        return Ranked(
            hits=[(passages[i], float(scores[i])) for i in order],
            searched=len(passages),
            query_tokens=len(q),
        )

    def explain(self, query: str, passage_id: str, deadline: Deadline) -> Explained | None:
        check_deadline(deadline, "finding the passage")
        snap = self._snapshot()
        where = snap.find([passage_id]).get(passage_id)
        if where is None:
            return None
        check_deadline(deadline, "embedding the query")
        q = self._query(query)
        segment = snap.views[where[0]].segment
        block = segment.block(where[1])
        best, sims = token_matches(q, block)
        passage = _passage(segment, where[1])
        q_tokens, p_tokens = self._token_strings(query, passage.text)
        return Explained(
            passage=passage,
            score=float(sims.sum()) if len(block) else EMPTY_SCORE,
            matches=[
                TokenMatchData(query_token=i, passage_token=int(best[i]), similarity=float(v))
                for i, v in enumerate(sims)
            ],
            query_tokens=q_tokens,
            passage_tokens=p_tokens,
        )

    def _token_strings(self, query: str, text: str) -> tuple[list[str] | None, list[str] | None]:
        """Token texts, when the embedder offers ``token_strings(text, query=...)``; a courtesy,
        so any failure just leaves them out."""
        fn = getattr(self.embedder, "token_strings", None)
        if not callable(fn):
            return None, None
        try:
            return list(fn(query, query=True)), list(fn(text, query=False))
        except Exception:
            return None, None

    # -- writing -------------------------------------------------------------------------
    def prepare(self, passages: Sequence[Passage], deadline: Deadline) -> Prepared:
        blocks = self._embed(passages, deadline)
        records = [to_record(p) for p in passages]
        data = [
            PassageData(id=p.id, record=r, vectors=v)
            for p, r, v in zip(passages, records, blocks, strict=True)
        ]
        return Prepared(
            passages=list(passages), projected_bytes=self._projected(data), payload=data
        )

    def _projected(self, data: Sequence[PassageData]) -> int:
        """What the segment of ``data`` will add on disk, before anything is written (plus a
        codebook when one would be trained; a merge with the small segment is not counted,
        since it replaces files that are counted already)."""
        tokens = sum(len(d.vectors) for d in data)
        cfg = self.settings.codebook
        coded = tokens >= cfg.min_tokens
        size = projected_bytes(len(data), tokens, self.dim, sum(len(d.record) for d in data), coded)
        m = self._snapshot().manifest
        current = m.codebook(m.current)
        if coded and (current is None or tokens >= cfg.retrain_growth * current.trained_on):
            size += 128 + codebook_size(tokens, cfg.per_sqrt) * self.dim * 4
        return size

    def stage_add(
        self,
        prepared: Prepared,
        deadline: Deadline,
        *,
        keys: Collection[str] = (),
        keep: Collection[str] = (),
    ) -> Staged:
        """The new passages as a segment and the replaced ones as tombstones, in one
        transaction: the manifest that commits it shows both changes or neither.  The
        tombstones are marked first, so a merge this write makes drops those passages."""
        txn = Transaction(self.store)
        try:
            known = txn.base.find([p.id for p in prepared.passages])
            new: list[PassageData] = [d for d in prepared.payload if d.id not in known]
            kept = set(keep) | {d.id for d in new}
            stale: dict[int, list[int]] = {}
            replaced: list[str] = []
            if keys:
                check_deadline(deadline, "finding the keys' earlier passages")
                for places in _keyed(txn.base, sorted(set(keys))).values():
                    for s, d in places:
                        pid = txn.base.views[s].segment.ids[d].decode("ascii")
                        if pid not in kept:
                            stale.setdefault(s, []).append(d)
                            replaced.append(pid)
            for s, docs in stale.items():
                txn.tombstone(s, docs)
            if new:
                check_deadline(deadline, "writing the segment")
                self._add(txn, new, deadline)
            return Staged([d.id for d in new], replaced, _Pending(txn))
        except BaseException:
            txn.abort()
            raise

    def _add(self, txn: Transaction, new: list[PassageData], deadline: Deadline) -> None:
        """Write ``new``, merging so that every passage is rewritten only a few times.

        At most one small (uncoded) segment is kept: a small batch is merged with it (a rewrite
        bounded by ``codebook_min_tokens``, coded once it reaches that size).  Coded segments
        are merged by size tier (tier ``t``: from ``codebook_min_tokens * f**t`` tokens up to
        ``f`` times that, ``f`` the ``merge_factor``): a batch that would be the ``f``-th
        segment of its tier is written together with the other ``f - 1`` as one segment of the
        next tier, and an add also merges the ``f`` smallest stored segments of the lowest tier
        that holds ``f`` or more (a cascade, one tier per add).  A passage is so rewritten at
        most about once per tier, ``log_f`` of the index size in batches, and the index keeps
        at most about ``f - 1`` segments per tier.  (Merging the two smallest segments whenever
        a fixed number was exceeded, as before, rewrote ever larger segments on every add once
        the index had grown: 3.4 writes a passage at 100,000 passages and 22 at a million, in a
        simulation of 2,000-passage batches, against 1.8 and 2.8 now.)
        """

        def check(stage: str) -> None:
            check_deadline(deadline, stage)

        views = txn.base.views
        f = self.settings.merge_factor
        base = self.settings.codebook.min_tokens
        small = [s for s, v in enumerate(views) if v.segment.lists is None]
        tokens = sum(len(d.vectors) for d in new)
        tiers: dict[int, list[int]] = {}
        for s, v in enumerate(views):
            if v.segment.lists is not None:
                tiers.setdefault(size_tier(len(v.segment.vectors), base, f), []).append(s)
        merged: set[int] = set()
        if small and tokens < base:
            txn.merge(small, extra=new, check=check)
            merged.update(small)
        else:
            peers = tiers.get(size_tier(tokens, base, f), [])
            if len(peers) >= f - 1:
                chosen = sorted(peers, key=lambda s: len(views[s].segment.vectors))[: f - 1]
                check("merging segments")
                txn.merge(chosen, extra=new, check=check)
                merged.update(chosen)
            else:
                txn.add_segment(iter(new), count=len(new), tokens=tokens, check=check)
        full = sorted(t for t, ss in tiers.items() if len([s for s in ss if s not in merged]) >= f)
        if full:
            left = [s for s in tiers[full[0]] if s not in merged]
            check("merging segments")
            txn.merge(sorted(left, key=lambda s: len(views[s].segment.vectors))[:f], check=check)

    def stage_remove(
        self, ids: Sequence[str], deadline: Deadline
    ) -> tuple[list[str], PendingWrite | None]:
        check_deadline(deadline, "finding the passages")
        txn = Transaction(self.store)
        found = txn.base.find(ids)
        if not found:
            txn.abort()
            return [], None
        by_segment: dict[int, list[int]] = {}
        for s, doc in found.values():
            by_segment.setdefault(s, []).append(doc)
        for s, docs in by_segment.items():
            txn.tombstone(s, docs)
        return [i for i in ids if i in found], _Pending(txn)

    def stage_rebuild(self, deadline: Deadline) -> PendingWrite | None:
        txn = Transaction(self.store)
        if not txn.base.views:
            txn.abort()
            return None
        try:
            txn.merge(
                list(range(len(txn.base.views))),
                check=lambda st: check_deadline(deadline, st),
                retrain=True,
            )
        except BaseException:
            txn.abort()
            raise
        return _Pending(txn)

    # -- hooks ---------------------------------------------------------------------------
    def tamper(self, passage_id: str, text: str) -> None:
        """Conformance-kit hook: change a stored passage's text behind the engine's back (its
        id stays, so the guard must refuse to serve it).  Rewrites that segment's records."""
        self.tamper_record(passage_id, {"text": text})

    def tamper_record(self, passage_id: str, changes: Mapping[str, Any]) -> None:
        """Conformance-kit hook: alter fields of a stored record behind the engine's back
        (:func:`~indexplug_colbert.records.altered`: id and digest kept, vectors untouched)."""
        snap = self._snapshot()
        where = snap.find([passage_id]).get(passage_id)
        if where is None:
            raise KeyError(passage_id)
        seg = snap.views[where[0]].segment
        self._rewrite_records(seg, {where[1]: lambda raw: altered(raw, changes)})

    def delete_rows(self, ids: Sequence[str]) -> None:
        """Conformance-kit hook: delete passages' records (their lines in the segment's
        ``passages.jsonl`` left empty) but not their vectors, ids or the manifest's count, as
        an edit of the file behind the engine's back would: searches must fail."""
        snap = self._snapshot()
        by_segment: dict[int, dict[int, Callable[[bytes], bytes]]] = {}
        for s, doc in snap.find(list(ids)).values():
            by_segment.setdefault(s, {})[doc] = lambda raw: b""
        for s, edits in by_segment.items():
            self._rewrite_records(snap.views[s].segment, edits)

    def _rewrite_records(self, seg: Segment, edits: Mapping[int, Callable[[bytes], bytes]]) -> None:
        """Rewrite a committed segment's records in place (only the kit's hooks do: a
        segment is otherwise never modified), each line ``doc`` as ``edits[doc]`` makes it."""
        lines = [seg.record(i).rstrip(b"\n") for i in range(len(seg.ids))]
        for doc, edit in edits.items():
            lines[doc] = edit(lines[doc])
        offsets = np.zeros(len(lines) + 1, dtype=np.int64)
        np.cumsum([len(line) + 1 for line in lines], out=offsets[1:])
        tmp = seg.path / "passages.jsonl.tmp"
        tmp.write_bytes(b"".join(line + b"\n" for line in lines))
        os.replace(tmp, seg.path / "passages.jsonl")
        np.save(seg.path / "records.npy", offsets)
        self.store.forget()

    def close(self) -> None:
        self.store.close()


def _in_id_order(s: int, view: SegmentView, after: str | None) -> Iterator[tuple[bytes, int, int]]:
    """``(id, s, local number)`` of the segment's live passages above ``after``, by id."""
    docs = view.segment.after(after)
    ids = view.segment.ids
    for start in range(0, len(docs), SCAN_CHECK):
        chunk = docs[start : start + SCAN_CHECK]
        if view.alive is not None:
            chunk = chunk[view.alive[chunk]]
        for d, pid in zip(chunk.tolist(), ids[chunk].tolist(), strict=True):
            yield pid, s, d


def _keyed(snap: Snapshot, keys: Sequence[str]) -> dict[str, list[tuple[int, int]]]:
    """``key -> [(segment position, local number), ...]`` of the live passages of ``keys``."""
    out: dict[str, list[tuple[int, int]]] = {}
    if not keys:
        return out
    for s, view in enumerate(snap.views):
        by_key = view.segment.facets().by_key
        for key in keys:
            for d in by_key.get(key, ()):
                if view.is_alive(d):
                    out.setdefault(key, []).append((s, d))
    return out


def _passage(segment: Segment, doc: int) -> Passage:
    """The stored passage ``doc`` of ``segment``; :class:`~indexplug_colbert.records.RecordLost`
    when its record is gone."""
    raw = segment.record(doc)
    if not raw.strip():
        raise RecordLost(segment.ids[doc].decode("ascii", "replace"))
    return from_record(raw)


def size_tier(tokens: int, base: int, factor: int) -> int:
    """The size tier of a segment of ``tokens`` token vectors: 0 below ``base * factor``, then
    one more for every further factor of ``factor``."""
    tier, bound = 0, base * factor
    while tokens >= bound:
        tier += 1
        bound *= factor
    return tier
