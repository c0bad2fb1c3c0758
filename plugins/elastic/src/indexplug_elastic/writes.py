"""Adding passages: keys, budget checks, embedding, bulk writes, rollback.

The order of an add, and why:

1. read the index's facts fresh (create the index if it is missing): the budget and the
   embedder recorded with the index govern the write, whatever this process was configured
   with;
2. read what the batch's keys hold now (a realtime ``mget`` of their documents: ids, digests
   and sequence numbers), and with a budget or an embedder, which passages without a key are
   already stored: the projection needs the new ones only, and embedding stored passages would
   be wasted;
3. project the size (average stored bytes per passage times the new passages) and refuse
   before writing anything if it is over;
4. embed, serialise and bulk-write: a passage without a key is ``create`` d as a document of
   its own (a known id answers 409 and is reported as known); a key's passages are its document,
   written whole with ``index`` on the sequence number read in 2 (``create`` if it had none), so
   replacing a key is one request, atomic in Lucene.  A key someone else wrote in between
   answers 409 and is read and written again; a key whose passages are exactly the batch's
   (same ids and digests) is not written at all;
5. any document refused by the server: roll back what this call wrote and name each refused
   one; otherwise refresh and measure the store size, and if it is over the budget roll back
   too.  Rolling back deletes the documents this call created and puts back the earlier
   version of each key it replaced (each on the sequence number this call wrote, so a later
   writer's version is never undone), so a refused write leaves the index as it was.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from indexplug.budget import effective_max_bytes, over_budget
from indexplug.deadlines import Deadline
from indexplug.embedcache import cache_for, embed_passages
from indexplug.outcomes import (
    AddOutcome,
    Indexed,
    IndexUnavailable,
    Removed,
    RemoveOutcome,
    VectorAddOutcome,
)
from indexplug.passages import Passage
from indexplug.protocols import Granularity

from indexplug_elastic import bulk
from indexplug_elastic.context import Context
from indexplug_elastic.documents import (
    Stored,
    dumps,
    inner_hits,
    key_doc_id,
    nested,
    parent,
    record_of,
    vector_of,
)
from indexplug_elastic.failures import classify, error_reason
from indexplug_elastic.mapping import DIGESTS, IDS, KEY, IndexMeta

FIRST_WRITE_FACTOR = 1.5
"""Projected bytes on disk per byte of passage JSON while an index holds nothing to average
over (compressed source, postings, norms; measured on SciFact: about 1.1)."""
VECTOR_BYTES_PER_DIM = 5
"""Float vector values plus HNSW graph, per dimension, for the same first-write projection."""
REPORTED_FAILURES = 10
"""Failed passages named one by one in a reason (the count says how many more)."""
KEY_ROUNDS = 50
"""Times a key changed by another writer between our read and our write is read and written
again before the add answers unavailable (each round is one lost race with a live writer)."""


@dataclass
class KeyState:
    """What a key's document holds now (from a realtime get)."""

    ids: list[str]
    digests: list[str]
    seq_no: int
    primary_term: int


@dataclass
class Plan:
    """What one round of an add writes."""

    loose: list[Passage] = field(default_factory=list)
    """Passages without a key, not known to be stored."""
    keys: dict[str, list[Passage]] = field(default_factory=dict)
    """Keys to write, with the batch's passages of each."""
    states: dict[str, KeyState | None] = field(default_factory=dict)
    """What each key to write held when read (None: no document)."""


@dataclass(frozen=True)
class Given:
    """The caller's vectors of an ``add_vectors`` (by passage id), of embedder ``embedder``:
    stored instead of vectors the backend embeds."""

    vectors: Mapping[str, np.ndarray]
    embedder: str
    dim: int | None
    """Their length (None when there are none: an empty write)."""


def add(
    cx: Context,
    index: str,
    es_index: str,
    passages: Sequence[Passage],
    requested: int | None,
    deadline: Deadline,
    given: Given | None = None,
) -> VectorAddOutcome:
    """Add ``passages`` (see the module docstring); with ``given``, the caller's vectors are
    stored instead of embedding the passages, once the index is known to record their
    embedder (else ``BadRequest``, before anything is written)."""
    client = cx.conn.within(deadline)
    meta = cx.meta(client, es_index, deadline, fresh=True)
    created = False
    if meta is None:
        meta, created = cx.create(client, es_index, requested, deadline)
    if given is not None:
        bad = cx.vector_problem(index, meta, given.embedder, given.dim)
        if bad is not None:
            if created:
                cx.drop_new(es_index, deadline)
            return bad
    problem = cx.embedder_problem(meta, writing=True)
    if problem:
        return cx.failed(index, problem, "EmbedderMismatch")
    budget = effective_max_bytes(meta.max_bytes, requested)
    ids = [p.id for p in passages]
    loose = [p for p in passages if p.key is None]
    by_key: dict[str, list[Passage]] = {}
    for p in passages:
        if p.key is not None:
            by_key.setdefault(p.key, []).append(p)
    known: set[str] = set()
    if loose and (budget is not None or meta.embedder is not None):
        # Worth a read first: the projection needs the new passages only, and embedding
        # passages the index already holds would be wasted work.
        stored = cx.conn.within(deadline).mget(
            index=es_index, ids=[p.id for p in loose], source=False
        )
        known = {d["_id"] for d in stored["docs"] if d.get("found")}
    loose = [p for p in loose if p.id not in known]
    states = read_keys(cx, es_index, list(by_key), deadline)
    added: set[str] = {p.id for p in loose}
    replaced = 0
    plan = Plan(loose=loose)
    for key, ps in by_key.items():
        replaced += _plan_key(plan, key, ps, states[key], added)

    if budget is not None and added:
        size_before, count = cx.measure(cx.conn.within(deadline), es_index)
        new = [p for p in passages if p.id in added]
        if count:
            needed = size_before + int(size_before / count * len(new))
        else:
            needed = size_before + sum(estimate(p, meta) for p in new)
        refused = over_budget(index, cx.name, needed=needed, max_bytes=budget, check="projected")
        if refused:
            if created:
                cx.drop_new(es_index, deadline)
            return refused

    undo = Undo()
    result = bulk.BulkResult()
    for rounds in range(KEY_ROUNDS + 1):
        if not (plan.loose or plan.keys):
            break
        if rounds == KEY_ROUNDS:
            undo.run(cx, es_index, deadline)
            return IndexUnavailable(
                index=index,
                backend=cx.name,
                reason=f"other writers kept replacing the same keys ({KEY_ROUNDS} tries); "
                "nothing was changed: add again",
            )
        if budget is not None:
            undo.remember(cx, index, es_index, plan, deadline)
        got = write(cx, es_index, plan, meta, deadline, given)
        undo.wrote(plan, got)
        result.done += got.done
        result.failed.update(got.failed)
        if got.failed:
            break
        # a passage without a key already there: known; a key changed meanwhile: again
        conflicted = set(got.conflict)
        added -= {p.id for p in plan.loose if p.id in conflicted}
        again = {k: ps for k, ps in plan.keys.items() if key_doc_id(k) in conflicted}
        plan = Plan()
        if again:
            fresh = read_keys(cx, es_index, list(again), deadline)
            for key, ps in again.items():
                added -= {p.id for p in ps}
                replaced -= _replaced(ps, states[key])
                states[key] = fresh[key]
                replaced += _plan_key(plan, key, ps, fresh[key], added)
    if result.failed:
        return refused_items(cx, index, es_index, passages, result, undo, deadline)
    client = cx.conn.within(deadline)
    bytes_used = None
    if budget is not None:
        bytes_used, _ = cx.measure(client, es_index)
        refused = over_budget(index, cx.name, needed=bytes_used, max_bytes=budget, check="measured")
        if refused:
            undo.run(cx, es_index, deadline)
            if created:
                cx.drop_new(es_index, deadline)
            return refused
    elif result.done:
        client.indices.refresh(index=es_index)
    if meta.max_bytes is None and requested is not None:
        meta = meta.with_budget(requested)
        client.indices.put_mapping(
            index=es_index, meta=meta.to_meta(), master_timeout=cx.server_timeout(deadline)
        )
        cx.remember(es_index, meta)
    out = Indexed.of_batch(
        index=index,
        backend=cx.name,
        ids=ids,
        added_ids=[i for i in ids if i in added],
        bytes_used=bytes_used,
        max_bytes=budget,
    )
    return out.model_copy(update={"replaced": replaced}) if replaced else out


def _replaced(ps: Sequence[Passage], state: KeyState | None) -> int:
    """How many of a key's stored passages the batch's ``ps`` replace."""
    if state is None:
        return 0
    keep = {p.id for p in ps}
    return sum(1 for i in state.ids if i not in keep)


def _plan_key(
    plan: Plan, key: str, ps: list[Passage], state: KeyState | None, added: set[str]
) -> int:
    """Put key ``key`` (the batch's passages ``ps``) into ``plan`` unless it holds exactly
    them already; mark its new passages added; answer how many it replaces."""
    if state is not None:
        stored = dict(zip(state.ids, state.digests, strict=False))
        if len(stored) == len(ps) and all(stored.get(p.id) == (p.digest or "") for p in ps):
            return 0  # the same version again: nothing to write
        added.update(p.id for p in ps if p.id not in stored)
    else:
        added.update(p.id for p in ps)
    plan.keys[key] = ps
    plan.states[key] = state
    return _replaced(ps, state)


def read_keys(
    cx: Context, es_index: str, keys: Sequence[str], deadline: Deadline
) -> dict[str, KeyState | None]:
    """What each key's document holds now (a realtime get: no refresh needed)."""
    if not keys:
        return {}
    got = cx.conn.within(deadline).mget(
        index=es_index,
        ids=[key_doc_id(k) for k in keys],
        source_includes=[IDS, DIGESTS],
        realtime=True,
    )
    out: dict[str, KeyState | None] = {}
    for key, doc in zip(keys, got["docs"], strict=True):
        if "error" in doc:
            raise RuntimeError(f"reading key {key[:40]!r}: {error_reason(doc['error'])}")
        if not doc.get("found"):
            out[key] = None
            continue
        src = doc.get("_source") or {}
        out[key] = KeyState(
            ids=[str(i) for i in src.get(IDS) or []],
            digests=[str(d) for d in src.get(DIGESTS) or []],
            seq_no=int(doc["_seq_no"]),
            primary_term=int(doc["_primary_term"]),
        )
    return out


def estimate(p: Passage, meta: IndexMeta) -> int:
    raw = len(p.text.encode("utf-8")) * (2 if meta.analysis == "client" else 1) + 400
    vec = (meta.dim or 0) * VECTOR_BYTES_PER_DIM
    return int(raw * FIRST_WRITE_FACTOR) + vec


def documents(
    cx: Context,
    es_index: str,
    meta: IndexMeta,
    loose: Sequence[Passage],
    keys: dict[str, list[Passage]],
    heads: dict[str, dict[str, Any]],
    failed: dict[str, tuple[int, Any]],
    vectors_of: Mapping[str, Any] | None = None,
) -> Iterator[bulk.Action]:
    """The bulk actions writing ``loose`` (each its own document, ``create``) and ``keys``
    (each one document, with the action line in ``heads``), embedded and serialised; a
    document that cannot be serialised goes to ``failed``.  A passage with a vector in
    ``vectors_of`` (by id: the caller's, or the one it is stored with) keeps it; only the
    others are embedded."""
    every = [*loose, *(p for ps in keys.values() for p in ps)]
    vectors: list[Any] = [None] * len(every)
    if meta.embedder is not None and every:
        have = vectors_of or {}
        todo = [p for p in every if p.id not in have]
        made: list[Any] = []
        if todo:
            emb = cx.embedder()
            cache = cache_for(emb) if cx.opts.embed_cache else None
            made = embed_passages(emb, todo, Granularity.TEXT, cache=cache)
        fresh = iter(made)
        vectors = [
            np.asarray(have[p.id], dtype=np.float32) if p.id in have else next(fresh) for p in every
        ]
    analysis = cx.analysis if meta.analysis == "client" else None
    vec = iter(vectors)
    for p in loose:
        v = next(vec)
        try:
            body = dumps(parent(None, [p], [nested(p, analysis=analysis, vector=v)]))
        except Exception as exc:  # e.g. text with a lone surrogate: not UTF-8
            failed[p.id] = _unserialisable(exc)
            continue
        yield bulk.create(es_index, p.id, body)
    for key, ps in keys.items():
        doc_id = key_doc_id(key)
        children = [nested(p, analysis=analysis, vector=next(vec)) for p in ps]
        try:
            body = dumps(parent(key, ps, children))
        except Exception as exc:
            failed[doc_id] = _unserialisable(exc)
            continue
        yield doc_id, heads[key], body


def stored_vectors(
    cx: Context, es_index: str, keys: Sequence[str], deadline: Deadline
) -> dict[str, tuple[float, ...]]:
    """The vectors the passages of ``keys`` are stored with, by passage id (after a refresh,
    so the search sees at least the versions a realtime read just saw: a newer one makes the
    write on the older sequence number fail and be planned again)."""
    from indexplug_elastic import reads

    client = cx.conn.within(deadline)
    client.indices.refresh(index=es_index)
    out: dict[str, tuple[float, ...]] = {}
    for i in range(0, len(keys), reads.GET_IDS):
        body = reads.get_body([], keys[i : i + reads.GET_IDS], cx.ms(deadline), vectors=True)
        found = cx.conn.within(deadline).search(index=es_index, **body)
        for hit in found["hits"]["hits"]:
            for s in inner_hits(hit):
                vec = vector_of(s)
                if vec is not None:
                    out[s.pid] = vec
    return out


def _unserialisable(exc: Exception) -> tuple[int, Any]:
    return 400, {"type": "serialization_error", "reason": f"{type(exc).__name__}: {exc}"}


def write(
    cx: Context,
    es_index: str,
    plan: Plan,
    meta: IndexMeta,
    deadline: Deadline,
    given: Given | None = None,
) -> bulk.BulkResult:
    """Embed (if the index has vectors), serialise and bulk-write one round's ``plan``.  With
    ``given``, the caller's vectors are written, except for the passages a key already holds:
    they keep the vector they are stored with (known, unchanged)."""
    vectors_of: dict[str, Any] | None = None
    if given is not None:
        vectors_of = dict(given.vectors)
        held = [k for k in plan.keys if plan.states.get(k) is not None]
        if held:
            vectors_of.update(stored_vectors(cx, es_index, held, deadline))
    heads: dict[str, dict[str, Any]] = {}
    for key in plan.keys:
        state = plan.states.get(key)
        target: dict[str, Any] = {"_index": es_index, "_id": key_doc_id(key)}
        if state is None:
            heads[key] = {"create": target}
        else:
            target.update(if_seq_no=state.seq_no, if_primary_term=state.primary_term)
            heads[key] = {"index": target}
    unserialisable: dict[str, tuple[int, Any]] = {}
    total = len(plan.loose) + len(plan.keys)
    result = bulk.send_all(
        lambda: cx.conn.within(deadline),
        es_index,
        documents(cx, es_index, meta, plan.loose, plan.keys, heads, unserialisable, vectors_of),
        total=total,
        max_docs=cx.opts.bulk_docs,
        max_bytes=cx.opts.bulk_bytes,
        timeout=lambda: cx.server_timeout(deadline),
        progress=cx.opts.progress,
    )
    result.failed.update(unserialisable)
    return result


@dataclass
class Undo:
    """What an add wrote, to put back when it is refused: documents it created (deleted) and
    the earlier version of each key it replaced (written again), each on the sequence number
    this add wrote it at."""

    created: list[str] = field(default_factory=list)
    earlier: dict[str, tuple[str, list[Passage]]] = field(default_factory=dict)
    """Key document id -> (key, its passages before this add), for keys read before writing."""
    vectors: dict[str, tuple[float, ...]] = field(default_factory=dict)
    """The vectors those passages were stored with (put back as they were, not embedded
    again: they may be a caller's own)."""
    versions: dict[str, tuple[int, int]] = field(default_factory=dict)

    def remember(
        self, cx: Context, index: str, es_index: str, plan: Plan, deadline: Deadline
    ) -> None:
        """Read the records of the keys ``plan`` replaces (only a budget can refuse an add
        after it wrote, so only then are they read)."""
        from indexplug_elastic import reads

        held = [k for k in plan.keys if plan.states.get(k) is not None]
        if not held:
            return
        got = reads.drive(cx, deadline, reads.get_plan(cx, index, es_index, (), held, deadline))
        passages = getattr(got, "passages", None)
        if passages is None:
            raise RuntimeError(f"reading the keys an add replaces: {got}")
        for key in held:
            self.earlier[key_doc_id(key)] = (key, [p for p in passages if p.key == key])
        meta = cx.cached_meta(es_index)
        if meta is not None and meta.embedder is not None:
            self.vectors.update(stored_vectors(cx, es_index, held, deadline))

    def wrote(self, plan: Plan, result: bulk.BulkResult) -> None:
        done = set(result.done)
        for p in plan.loose:
            if p.id in done:
                self.created.append(p.id)
        for key in plan.keys:
            doc_id = key_doc_id(key)
            if doc_id not in done:
                continue
            self.versions[doc_id] = result.versions[doc_id]
            if plan.states.get(key) is None:
                self.created.append(doc_id)
                self.earlier.pop(doc_id, None)

    def run(self, cx: Context, es_index: str, deadline: Deadline) -> bool:
        """Undo every write.  It runs even past the op's deadline (a few seconds at most):
        leaving half of a refused write in place would be worse than answering late."""
        if not (self.created or self.versions):
            return True
        allowance = Deadline.after(max(deadline.remaining(), 5.0))
        meta = cx.cached_meta(es_index)
        actions: list[bulk.Action] = []
        for doc_id in self.created:
            target: dict[str, Any] = {"_index": es_index, "_id": doc_id}
            if doc_id in self.versions:
                seq, term = self.versions[doc_id]
                target.update(if_seq_no=seq, if_primary_term=term)
            actions.append((doc_id, {"delete": target}, None))
        restore = {doc_id: kp for doc_id, kp in self.earlier.items() if doc_id in self.versions}
        try:
            if restore and meta is not None:
                failed: dict[str, tuple[int, Any]] = {}
                heads = {}
                for doc_id, (key, _) in restore.items():
                    seq, term = self.versions[doc_id]
                    heads[key] = {
                        "index": {
                            "_index": es_index,
                            "_id": doc_id,
                            "if_seq_no": seq,
                            "if_primary_term": term,
                        }
                    }
                keys = {key: ps for key, ps in restore.values()}
                actions += list(
                    documents(cx, es_index, meta, [], keys, heads, failed, self.vectors)
                )
            result = bulk.send_all(
                lambda: cx.conn.within(allowance),
                es_index,
                actions,
                total=len(actions),
                max_docs=cx.opts.bulk_docs,
                max_bytes=cx.opts.bulk_bytes,
                timeout=lambda: cx.server_timeout(allowance),
                progress=False,
            )
            cx.conn.within(allowance).indices.refresh(index=es_index)
        except Exception:
            return False
        return not result.failed


def refused_items(
    cx: Context,
    index: str,
    es_index: str,
    batch: Sequence[Passage],
    result: bulk.BulkResult,
    undo: Undo,
    deadline: Deadline,
) -> AddOutcome:
    """Some documents were refused: undo the ones written, name the ones refused."""
    rolled = undo.run(cx, es_index, deadline)
    order: dict[str, int] = {}
    for n, p in enumerate(batch):
        order.setdefault(p.id if p.key is None else key_doc_id(p.key), n)
    failed = sorted(result.failed.items(), key=lambda kv: order.get(kv[0], 0))
    shown = "; ".join(
        f"{pid[:12]}…: {error_reason(err)[:300]}" for pid, (_, err) in failed[:REPORTED_FAILURES]
    )
    more = len(failed) - REPORTED_FAILURES
    written = len(result.done)
    again = (
        f"the {written} written were rolled back"
        if rolled
        else f"rolling back the {written} written failed; adding again settles it"
    )
    what = "passage(s)" if all(p.key is None for p in batch) else "passage(s) or key(s)"
    reason = (
        f"{len(failed)} of {len(order)} {what} were refused by Elasticsearch and {again}: {shown}"
        + (f"; and {more} more" if more > 0 else "")
    )
    statuses = {status for status, _ in result.failed.values()}
    if statuses <= {429, 503}:  # every refusal says "not now", not "never"
        return IndexUnavailable(index=index, backend=cx.name, reason=reason)
    return cx.failed(index, reason, "BulkItemFailed")


def rollback(cx: Context, es_index: str, ids: Sequence[str], deadline: Deadline) -> bool:
    """Delete documents by id, even past the op's deadline (a few seconds at most)."""
    if not ids:
        return True
    allowance = Deadline.after(max(deadline.remaining(), 5.0))
    try:
        bulk.delete_ids(
            cx.conn.within(allowance),
            es_index,
            ids,
            timeout=cx.server_timeout(allowance),
            refresh=True,
        )
    except Exception:
        return False
    return True


def remove(
    cx: Context, index: str, es_index: str, ids: Sequence[str], deadline: Deadline
) -> RemoveOutcome:
    """Remove passages by id: a passage without a key is its document, deleted; a key's
    document loses the passages named, written again without them (deleted when none is
    left), on the sequence number it was read at, so a concurrent replacement of the key is
    never undone (its document is read and written again)."""
    from indexplug_elastic import reads

    wanted = list(dict.fromkeys(ids))
    removed: list[str] = []
    left = list(wanted)
    for _ in range(KEY_ROUNDS):
        if not left:
            break
        client = cx.conn.within(deadline)
        client.indices.refresh(index=es_index)
        body = reads.get_body(left, [], cx.ms(deadline))
        hits = client.search(index=es_index, seq_no_primary_term=True, **body)["hits"]["hits"]
        actions: list[bulk.Action] = []
        gone: dict[str, list[str]] = {}
        keys: dict[str, list[Passage]] = {}
        heads: dict[str, dict[str, Any]] = {}
        asked = set(left)
        keyed = {str(h["_source"][KEY]) for h in hits if (h.get("_source") or {}).get(KEY)}
        every: dict[str, tuple[dict[str, Any], list[Stored]]] = {}
        meta = cx.cached_meta(es_index)
        # the passages a key keeps are written again with the vectors they are stored with
        # (a caller's own ones stay; nothing is embedded again)
        with_vectors = meta is not None and meta.embedder is not None
        kept: dict[str, tuple[float, ...]] = {}
        if keyed:
            body = reads.get_body([], list(keyed), 30_000, vectors=with_vectors)
            found = client.search(index=es_index, seq_no_primary_term=True, **body)
            for h in found["hits"]["hits"]:
                every[str(h["_id"])] = (h, inner_hits(h))
        for h in hits:
            doc_id = str(h["_id"])
            matched = [s.pid for s in inner_hits(h) if s.pid in asked]
            key = (h.get("_source") or {}).get(KEY)
            version = h
            rest: list[Stored] = []
            if key is not None and doc_id in every:
                version, stored = every[doc_id]
                rest = [s for s in stored if s.pid not in asked]
            target = {
                "_index": es_index,
                "_id": doc_id,
                "if_seq_no": version["_seq_no"],
                "if_primary_term": version["_primary_term"],
            }
            gone[doc_id] = matched
            if rest:
                assert key is not None
                keys[str(key)] = [record_of(s) for s in rest]
                heads[str(key)] = {"index": target}
                for s in rest:
                    vec = vector_of(s)
                    if vec is not None:
                        kept[s.pid] = vec
            else:
                actions.append((doc_id, {"delete": target}, None))
        failed: dict[str, tuple[int, Any]] = {}
        if keys and meta is not None:
            actions += list(documents(cx, es_index, meta, [], keys, heads, failed, kept))
        result = bulk.send_all(
            lambda: cx.conn.within(deadline),
            es_index,
            actions,
            total=len(actions),
            max_docs=cx.opts.bulk_docs,
            max_bytes=cx.opts.bulk_bytes,
            timeout=lambda: cx.server_timeout(deadline),
            progress=False,
        )
        result.failed.update(failed)
        cx.conn.within(deadline).indices.refresh(index=es_index)
        for doc_id in result.done:
            removed += gone.get(doc_id, [])
        if result.failed:
            doc_id, (status, err) = next(iter(result.failed.items()))
            out = classify(
                status, err, index=index, backend=cx.name, deadline=deadline, doing="removing"
            )
            note = (
                f" ({len(result.failed)} document(s) not changed, the first {doc_id[:12]}…; "
                f"{len(removed)} passage(s) removed)"
            )
            return out.model_copy(update={"reason": out.reason + note})
        # a 404 or 409: removed or changed meanwhile, looked up again
        again = {i for doc_id in result.conflict for i in gone.get(doc_id, [])}
        left = [i for i in left if i in again]
    else:
        if left:
            return IndexUnavailable(
                index=index,
                backend=cx.name,
                reason=f"other writers kept replacing the passages' keys ({KEY_ROUNDS} tries); "
                f"{len(removed)} passage(s) were removed: remove again",
            )
    return Removed.of_batch(index=index, backend=cx.name, ids=wanted, removed_ids=removed)
