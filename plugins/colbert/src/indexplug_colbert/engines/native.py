"""The native engine: MaxSim over any token-level :class:`~indexplug.protocols.Embedder`.

Storage is :mod:`indexplug_colbert.store` (int8 segments, tombstones, one manifest);
candidate generation is :mod:`indexplug_colbert.candidates` (per-segment centroids, centroid
interaction); scoring is :mod:`indexplug_colbert.maxsim` (exact MaxSim over the stored vectors).
It needs numpy only, so with the model-free ``hashing:default`` embedder it runs anywhere.

A search, stage by stage (the deadline is checked between each):

1. embed the query, one vector per token;
2. segments with a codebook propose candidates with approximate scores; small segments without
   one contribute every live passage (they are below ``codebook_min_tokens`` by construction);
3. the best ``candidates`` proposals (at least ``top_k``) are scored by exact MaxSim, read
   from the memory-mapped vectors;
4. the best ``top_k`` exact scores become hits.

When ``top_k`` asks for a large share of the index, or ``exhaustive`` is set, stage 2 is skipped
and every live passage is scored exactly (the same arithmetic, so results agree).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from indexplug.deadlines import Deadline
from indexplug.embedcache import EmbeddingCache, cache_for, embed_passages
from indexplug.passages import Passage, Source
from indexplug.protocols import Embedder, Granularity, Readiness

from indexplug_colbert import candidates as cand
from indexplug_colbert.codec import Block, quantize
from indexplug_colbert.engines.base import (
    EmbedderUnavailable,
    Explained,
    IncompatibleIndex,
    PendingWrite,
    Prepared,
    Ranked,
    TokenMatchData,
    check_deadline,
)
from indexplug_colbert.maxsim import EMPTY_SCORE, as_query, maxsim_blocks, token_matches, top_k
from indexplug_colbert.store import (
    CodebookSettings,
    PassageData,
    Snapshot,
    Store,
    StoreError,
    Transaction,
    projected_segment_bytes,
)

DEFAULT_EMBEDDER = "hashing:default"
EMBED_BATCH = 64
"""Passages embedded per call: small enough to check the deadline often, large enough that a
transformer embedder batches well."""
SCORE_CHUNK = 128
"""Passages per exact-MaxSim product (bounds memory; the deadline is checked between chunks)."""
EXHAUSTIVE_SHARE = 0.25
"""Score everything exactly when ``top_k`` (or the candidate pool) asks for this share of the
index: candidate generation would save little and could return fewer than ``top_k``."""

OPTIONS = frozenset(
    {
        "candidates",
        "nprobe",
        "codebook_min_tokens",
        "centroids_per_sqrt",
        "kmeans_iterations",
        "max_segments",
        "seed",
        "exhaustive",
        "embed_cache",
        "embed_cache_dir",
    }
)


def _int(options: Mapping[str, Any], key: str, default: int, low: int) -> int:
    value = options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"colbert setting {key} must be an integer, got {value!r}")
    n = int(value)
    if n < low:
        raise ValueError(f"colbert setting {key} must be at least {low}, got {n}")
    return n


def _bool(options: Mapping[str, Any], key: str, default: bool) -> bool:
    value = options.get(key, default)
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


@dataclass(frozen=True)
class NativeSettings:
    """The native engine's settings (``--option KEY=VALUE`` or ``settings`` in the config)."""

    candidates: int = 256
    """Passages re-scored by exact MaxSim per search (at least ``top_k``)."""
    nprobe: int = 8
    """Centroids probed per query token in each coded segment."""
    max_segments: int = 12
    """Above this many segments an add also merges the smallest ones (tiered merging)."""
    exhaustive: bool = False
    """Score every passage exactly (no candidate generation): the reference, and for tests."""
    embed_cache: bool = True
    """Reuse token vectors already computed for a passage id (:mod:`indexplug.embedcache`,
    kept as float16, which is what the index quantises anyway, see :mod:`.codec`)."""
    embed_cache_dir: Path | None = None
    """Where that cache lives (default: ``<indexplug home>/embedcache``)."""
    codebook: CodebookSettings = field(default_factory=CodebookSettings)

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> NativeSettings:
        unknown = set(options) - OPTIONS
        if unknown:
            raise ValueError(f"unknown native engine setting(s): {', '.join(sorted(unknown))}")
        per_sqrt = float(options.get("centroids_per_sqrt", CodebookSettings.per_sqrt))
        if not 0.1 <= per_sqrt <= 64:
            raise ValueError("colbert setting centroids_per_sqrt must be between 0.1 and 64")
        return cls(
            candidates=_int(options, "candidates", cls.candidates, 1),
            nprobe=_int(options, "nprobe", cls.nprobe, 1),
            max_segments=_int(options, "max_segments", cls.max_segments, 2),
            exhaustive=_bool(options, "exhaustive", cls.exhaustive),
            embed_cache=_bool(options, "embed_cache", cls.embed_cache),
            embed_cache_dir=(
                Path(str(options["embed_cache_dir"])).expanduser()
                if options.get("embed_cache_dir")
                else None
            ),
            codebook=CodebookSettings(
                min_tokens=_int(options, "codebook_min_tokens", CodebookSettings.min_tokens, 64),
                per_sqrt=per_sqrt,
                iterations=_int(options, "kmeans_iterations", CodebookSettings.iterations, 1),
                seed=_int(options, "seed", CodebookSettings.seed, 0),
            ),
        )


class NativeEngine:
    """Factory of :class:`NativeIndex` objects; holds the settings."""

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

    def embedder(self, spec: str) -> Embedder:
        if self._embedder_factory is None:
            raise LookupError("the backend was created without an embedder factory")
        return self._embedder_factory(spec)

    def open(self, folder: Path, embedder_spec: str) -> NativeIndex:
        try:
            embedder = self.embedder(embedder_spec)
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


def _check_vectors(v: Any, dim: int, what: str) -> np.ndarray:
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
        try:
            return self.store.snapshot()
        except StoreError as exc:
            raise IncompatibleIndex(str(exc)) from exc

    def live_count(self) -> int:
        return self._snapshot().live

    def known(self, ids: Sequence[str]) -> set[str]:
        return set(self._snapshot().find(ids))

    def size_bytes(self) -> int:
        return self.store.size_bytes()

    def details(self) -> dict[str, Any]:
        snap = self._snapshot()
        segs = snap.manifest.segments
        return {
            "generation": snap.manifest.generation,
            "segments": len(segs),
            "coded_segments": sum(1 for s in segs if s.coded),
            "token_vectors": sum(s.tokens for s in segs),
            "tombstoned": sum(s.removed for s in segs),
            "dim": self.embedder.dim,
            "vector_codec": "int8, one float32 scale per token",
        }

    def _query(self, query: str) -> np.ndarray:
        q = self.embedder.embed_query(query, Granularity.TOKEN)
        return as_query(_check_vectors(q, self.embedder.dim, "the query"))

    def _passage(self, snap: Snapshot, s: int, doc: int) -> Passage:
        return _from_record(snap.views[s].segment.record(doc))

    def search(self, query: str, k: int, deadline: Deadline) -> Ranked:
        check_deadline(deadline, "opening the index")
        snap = self._snapshot()
        live = snap.live
        if live == 0:
            return Ranked(hits=[], searched=0, query_tokens=0)
        check_deadline(deadline, "embedding the query")
        q = self._query(query)
        if len(q) == 0:
            return Ranked(hits=[], searched=live, query_tokens=0)
        check_deadline(deadline, "generating candidates")
        pool = max(self.settings.candidates, k)
        exhaustive = self.settings.exhaustive or pool >= EXHAUSTIVE_SHARE * live
        pairs = self._all_live(snap) if exhaustive else self._candidates(snap, q, pool)
        check_deadline(deadline, "exact MaxSim")
        scores = self._exact(snap, q, pairs, deadline)
        best = top_k(scores, k)
        check_deadline(deadline, "reading the hits")
        hits = [
            (self._passage(snap, int(pairs[i, 0]), int(pairs[i, 1])), float(scores[i]))
            for i in best
        ]
        return Ranked(
            hits=hits,
            searched=live,
            query_tokens=len(q),
            details={"scored_exactly": len(pairs), "exhaustive": exhaustive},
        )

    def candidate_ids(self, query: str, k: int) -> list[str]:
        """The ids a search for ``query`` would score exactly (for measuring the recall of
        candidate generation, see ``bench/exhaustive_recall.py``)."""
        snap = self._snapshot()
        q = self._query(query)
        pool = max(self.settings.candidates, k)
        if self.settings.exhaustive or pool >= EXHAUSTIVE_SHARE * snap.live:
            pairs = self._all_live(snap)
        else:
            pairs = self._candidates(snap, q, pool)
        return [snap.views[int(s)].segment.ids[int(d)].decode("ascii") for s, d in pairs]

    def _all_live(self, snap: Snapshot) -> np.ndarray:
        parts = [
            np.stack([np.full(len(d), s, dtype=np.int64), d], axis=1)
            for s in range(len(snap.views))
            if len(d := snap.live_docs(s))
        ]
        return np.concatenate(parts) if parts else np.zeros((0, 2), dtype=np.int64)

    def _candidates(self, snap: Snapshot, q: np.ndarray, pool: int) -> np.ndarray:
        """``(segment, passage)`` pairs for the exact stage: the best ``pool`` approximations
        from coded segments, plus every live passage of uncoded (small) segments."""
        sure: list[np.ndarray] = []
        proposed: list[np.ndarray] = []
        approx: list[np.ndarray] = []
        for s, view in enumerate(snap.views):
            book = view.segment.codebook
            if book is None:
                d = snap.live_docs(s)
                sure.append(np.stack([np.full(len(d), s, dtype=np.int64), d], axis=1))
                continue
            docs, scores = cand.approximate(q, book, self.settings.nprobe, view.alive)
            proposed.append(np.stack([np.full(len(docs), s, dtype=np.int64), docs], axis=1))
            approx.append(scores)
        if proposed:
            pairs = np.concatenate(proposed)
            keep = top_k(np.concatenate(approx), pool)
            sure.append(pairs[keep])
        return np.concatenate(sure) if sure else np.zeros((0, 2), dtype=np.int64)

    def _exact(
        self, snap: Snapshot, q: np.ndarray, pairs: np.ndarray, deadline: Deadline
    ) -> np.ndarray:
        scores = np.full(len(pairs), EMPTY_SCORE, dtype=np.float32)
        # read in storage order: neighbouring passages share pages of the memory map
        order = np.lexsort((pairs[:, 1], pairs[:, 0]))
        for c in range(0, len(order), SCORE_CHUNK):
            if c:
                check_deadline(deadline, "exact MaxSim")
            idx = order[c : c + SCORE_CHUNK]
            blocks = [snap.views[int(s)].segment.block(int(d)) for s, d in pairs[idx]]
            scores[idx] = maxsim_blocks(q, blocks)
        return scores

    def rerank(self, query: str, passages: Sequence[Passage], deadline: Deadline) -> Ranked:
        check_deadline(deadline, "embedding the query")
        q = self._query(query)
        if len(q) == 0:
            return Ranked(hits=[], searched=len(passages), query_tokens=0)
        blocks: list[Block] = []
        for b in range(0, len(passages), EMBED_BATCH):
            check_deadline(deadline, "embedding the passages")
            batch = passages[b : b + EMBED_BATCH]
            out = embed_passages(self.embedder, batch, Granularity.TOKEN, cache=self._cache())
            blocks += [quantize(_check_vectors(v, self.embedder.dim, "a passage")) for v in out]
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
        s, doc = where
        block = snap.views[s].segment.block(doc)
        best, sims = token_matches(q, block)
        passage = self._passage(snap, s, doc)
        tokens = getattr(self.embedder, "token_strings", None)
        q_tokens = p_tokens = None
        if callable(tokens):
            try:
                q_tokens = list(tokens(query, query=True))
                p_tokens = list(tokens(passage.text, query=False))
            except Exception:  # token strings are a courtesy, never a failure
                q_tokens = p_tokens = None
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

    # -- writing -------------------------------------------------------------------------
    def _cache(self) -> EmbeddingCache | None:
        if not self.settings.embed_cache:
            return None
        return cache_for(self.embedder, root=self.settings.embed_cache_dir, dtype="float16")

    def prepare(self, passages: Sequence[Passage], deadline: Deadline) -> Prepared:
        vectors: list[Block] = []
        cache = self._cache()
        for b in range(0, len(passages), EMBED_BATCH):
            check_deadline(deadline, "embedding the passages")
            batch = passages[b : b + EMBED_BATCH]
            out = embed_passages(self.embedder, batch, Granularity.TOKEN, cache=cache)
            if len(out) != len(batch):
                raise IncompatibleIndex(
                    f"the embedder returned {len(out)} results for {len(batch)} passages"
                )
            vectors += [quantize(_check_vectors(v, self.embedder.dim, "a passage")) for v in out]
        records = [p.model_dump_json(exclude_none=True).encode("utf-8") for p in passages]
        tokens = sum(len(v) for v in vectors)
        projected = projected_segment_bytes(
            len(passages),
            tokens,
            self.embedder.dim,
            sum(len(r) for r in records),
            self.settings.codebook,
        )
        data = [
            PassageData(id=p.id, record=r, vectors=v)
            for p, r, v in zip(passages, records, vectors, strict=True)
        ]
        return Prepared(passages=list(passages), projected_bytes=projected, payload=data)

    def stage_add(self, prepared: Prepared, deadline: Deadline) -> tuple[list[str], PendingWrite]:
        txn = self.store.begin()
        try:
            known = txn.base.find([p.id for p in prepared.passages])
            new: list[PassageData] = [d for d in prepared.payload if d.id not in known]
            if new:
                check_deadline(deadline, "writing the segment")
                self._add(txn, new, deadline)
            return [d.id for d in new], _Pending(txn)
        except BaseException:
            txn.abort()
            raise

    def _add(self, txn: Transaction, new: list[PassageData], deadline: Deadline) -> None:
        """Write ``new`` as a segment, keeping at most one small (uncoded) segment: a small
        batch is merged with it (a rewrite bounded by ``codebook_min_tokens``, which gets a
        codebook once it is that large); a large batch gets a coded segment of its own.  Above
        ``max_segments`` the smallest segments are merged too (tiered merging)."""
        min_tokens = self.settings.codebook.min_tokens
        views = txn.base.views
        small = [s for s, v in enumerate(views) if v.segment.codebook is None]
        new_tokens = sum(len(d.vectors) for d in new)
        if small and new_tokens < min_tokens:
            txn.merge(small, extra=new, check=lambda st: check_deadline(deadline, st))
        else:
            txn.add_segment(
                iter(new),
                count=len(new),
                tokens=new_tokens,
                check=lambda st: check_deadline(deadline, st),
            )
        excess = len(txn.segments) - self.settings.max_segments
        if excess > 0:
            base_names = {v.meta.name: s for s, v in enumerate(views)}
            listed = [m for m in txn.segments if m.name in base_names]
            smallest = sorted(listed, key=lambda m: m.tokens)[: excess + 1]
            check_deadline(deadline, "merging segments")
            txn.merge(
                [base_names[m.name] for m in smallest],
                check=lambda st: check_deadline(deadline, st),
            )

    def stage_remove(
        self, ids: Sequence[str], deadline: Deadline
    ) -> tuple[list[str], PendingWrite | None]:
        check_deadline(deadline, "finding the passages")
        txn = self.store.begin()
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
        txn = self.store.begin()
        if not txn.base.views:
            txn.abort()
            return None
        try:
            txn.merge(
                list(range(len(txn.base.views))), check=lambda st: check_deadline(deadline, st)
            )
        except BaseException:
            txn.abort()
            raise
        return _Pending(txn)

    # -- hooks ---------------------------------------------------------------------------
    def tamper(self, passage_id: str, text: str) -> None:
        """Conformance-kit hook: change a stored passage's text behind the engine's back (its
        id stays, so the guard must refuse to serve it).  Rewrites that one segment's records."""
        snap = self._snapshot()
        where = snap.find([passage_id]).get(passage_id)
        if where is None:
            raise KeyError(passage_id)
        s, doc = where
        seg = snap.views[s].segment
        lines = [seg.record(i).rstrip(b"\n") for i in range(len(seg.ids))]
        data = json.loads(lines[doc])
        data["text"] = text
        lines[doc] = json.dumps(data, ensure_ascii=False).encode("utf-8")
        offsets = np.zeros(len(lines) + 1, dtype=np.int64)
        np.cumsum([len(line) + 1 for line in lines], out=offsets[1:])
        tmp = seg.path / "passages.jsonl.tmp"
        tmp.write_bytes(b"".join(line + b"\n" for line in lines))
        os.replace(tmp, seg.path / "passages.jsonl")
        np.save(seg.path / "records.npy", offsets)
        self.store.forget()

    def close(self) -> None:
        self.store.close()


def _from_record(raw: bytes) -> Passage:
    data = json.loads(raw)
    return Passage.from_stored(
        id=data["id"],
        text=data["text"],
        source=Source.model_validate(data["source"]),
        start=data["start"],
        end=data["end"],
        document_sha256=data.get("document_sha256"),
        metadata=data.get("metadata") or None,
    )
