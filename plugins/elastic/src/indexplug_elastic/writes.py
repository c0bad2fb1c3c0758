"""Adding passages: budget checks, embedding, bulk creation, rollback.

The order of an add, and why:

1. read the index's facts fresh (create the index if it is missing): the budget and the
   embedder recorded with the index govern the write, whatever this process was configured
   with;
2. with a budget or an embedder, ask which passages are already stored (``mget``): the
   projection needs the new ones only, and embedding stored passages would be wasted;
3. project the size (average stored bytes per passage times the new passages) and refuse
   before writing anything if it is over;
4. embed, serialise and bulk-create (``op_type=create``: a known id answers 409 and is
   reported as known);
5. any passage refused by the server: roll back what this call wrote and name each refused
   passage; otherwise refresh and measure the store size, and if it is over the budget roll
   back too.  Rolling back deletes by id the documents this call created, so a refused write
   leaves the index as it was (Lucene reclaims the space at its next merge).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from indexplug.budget import effective_max_bytes, over_budget
from indexplug.deadlines import Deadline
from indexplug.embedcache import cache_for, embed_passages
from indexplug.outcomes import AddOutcome, Indexed, IndexUnavailable
from indexplug.passages import Passage
from indexplug.protocols import Granularity

from indexplug_elastic import bulk
from indexplug_elastic.context import Context
from indexplug_elastic.documents import document, dumps
from indexplug_elastic.failures import error_reason
from indexplug_elastic.mapping import IndexMeta
from indexplug_elastic.upgrade import ensure_layout

FIRST_WRITE_FACTOR = 1.5
"""Projected bytes on disk per byte of passage JSON while an index holds nothing to average
over (compressed source, postings, norms; measured on SciFact: about 1.1)."""
VECTOR_BYTES_PER_DIM = 5
"""Float vector values plus HNSW graph, per dimension, for the same first-write projection."""
REPORTED_FAILURES = 10
"""Failed passages named one by one in a reason (the count says how many more)."""


def add(
    cx: Context,
    index: str,
    es_index: str,
    passages: Sequence[Passage],
    requested: int | None,
    deadline: Deadline,
) -> AddOutcome:
    client = cx.conn.within(deadline)
    meta = cx.meta(client, es_index, deadline, fresh=True)
    created = False
    if meta is None:
        meta, created = cx.create(client, es_index, requested, deadline)
    problem = cx.embedder_problem(meta, writing=True)
    if problem:
        return cx.failed(index, problem, "EmbedderMismatch")
    # new documents carry ``pid`` and ``mv``: an index of an older layout gets them first
    meta = ensure_layout(cx, es_index, meta, deadline)
    budget = effective_max_bytes(meta.max_bytes, requested)
    ids = [p.id for p in passages]
    known: set[str] = set()
    if ids and (budget is not None or meta.embedder is not None):
        # Worth a read first: the projection needs the new passages only, and embedding
        # passages the index already holds would be wasted work.
        got = cx.conn.within(deadline).mget(index=es_index, ids=ids, source=False)
        known = {d["_id"] for d in got["docs"] if d.get("found")}
    new = [p for p in passages if p.id not in known]

    size_before = None
    if budget is not None and new:
        size_before, count = cx.measure(cx.conn.within(deadline), es_index)
        if count:
            per = size_before / count
            needed = size_before + int(per * len(new))
        else:
            needed = size_before + sum(estimate(p, meta) for p in new)
        refused = over_budget(index, cx.name, needed=needed, max_bytes=budget, check="projected")
        if refused:
            if created:
                cx.drop_new(es_index, deadline)
            return refused

    result = bulk.BulkResult()
    if new:
        result = write(cx, es_index, new, meta, deadline)
    if result.failed:
        return refused_items(cx, index, es_index, new, result, deadline)
    client = cx.conn.within(deadline)
    bytes_used = None
    if budget is not None:
        bytes_used, _ = cx.measure(client, es_index)
        refused = over_budget(index, cx.name, needed=bytes_used, max_bytes=budget, check="measured")
        if refused:
            rollback(cx, es_index, result.done, deadline)
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
    done = set(result.done)
    return Indexed.of_batch(
        index=index,
        backend=cx.name,
        ids=ids,
        added_ids=[i for i in ids if i in done],
        bytes_used=bytes_used,
        max_bytes=budget,
    )


def estimate(p: Passage, meta: IndexMeta) -> int:
    raw = len(p.text.encode("utf-8")) * (2 if meta.analysis == "client" else 1) + 400
    vec = (meta.dim or 0) * VECTOR_BYTES_PER_DIM
    return int(raw * FIRST_WRITE_FACTOR) + vec


def write(
    cx: Context, es_index: str, new: Sequence[Passage], meta: IndexMeta, deadline: Deadline
) -> bulk.BulkResult:
    """Embed (if the index has vectors), serialise and bulk-create ``new``."""
    vectors: list[Any] = [None] * len(new)
    if meta.embedder is not None:
        emb = cx.embedder()
        cache = cache_for(emb) if cx.opts.embed_cache else None
        vectors = embed_passages(emb, new, Granularity.TEXT, cache=cache)
    analysis = cx.analysis if meta.analysis == "client" else None
    unserialisable: dict[str, tuple[int, Any]] = {}

    def docs() -> Iterator[tuple[str, bytes]]:
        for p, vec in zip(new, vectors, strict=True):
            try:
                body = dumps(document(p, analysis=analysis, vector=vec))
            except Exception as exc:  # e.g. text with a lone surrogate: not UTF-8
                unserialisable[p.id] = (
                    400,
                    {"type": "serialization_error", "reason": f"{type(exc).__name__}: {exc}"},
                )
                continue
            yield p.id, body

    result = bulk.create_all(
        lambda: cx.conn.within(deadline),
        es_index,
        docs(),
        total=len(new),
        max_docs=cx.opts.bulk_docs,
        max_bytes=cx.opts.bulk_bytes,
        timeout=lambda: cx.server_timeout(deadline),
        progress=cx.opts.progress,
    )
    result.failed.update(unserialisable)
    return result


def refused_items(
    cx: Context,
    index: str,
    es_index: str,
    new: Sequence[Passage],
    result: bulk.BulkResult,
    deadline: Deadline,
) -> AddOutcome:
    """Some passages were refused: undo the ones written, name the ones refused."""
    rolled = rollback(cx, es_index, result.done, deadline)
    order = {p.id: n for n, p in enumerate(new)}
    failed = sorted(result.failed.items(), key=lambda kv: order.get(kv[0], 0))
    shown = "; ".join(
        f"{pid[:12]}…: {error_reason(err)[:200]}" for pid, (_, err) in failed[:REPORTED_FAILURES]
    )
    more = len(failed) - REPORTED_FAILURES
    undo = (
        f"the {len(result.done)} written were rolled back"
        if rolled
        else f"rolling back the {len(result.done)} written failed; adding again settles it"
    )
    reason = (
        f"{len(failed)} of {len(new)} passage(s) were refused by Elasticsearch and {undo}: "
        f"{shown}" + (f"; and {more} more" if more > 0 else "")
    )
    statuses = {status for status, _ in result.failed.values()}
    if statuses <= {429, 503}:  # every refusal says "not now", not "never"
        return IndexUnavailable(index=index, backend=cx.name, reason=reason)
    return cx.failed(index, reason, "BulkItemFailed")


def rollback(cx: Context, es_index: str, ids: Sequence[str], deadline: Deadline) -> bool:
    """Delete what this call wrote.  It runs even past the op's deadline (a few seconds at
    most): leaving half of a refused write in place would be worse than answering late."""
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
