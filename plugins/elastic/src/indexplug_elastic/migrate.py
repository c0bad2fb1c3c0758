"""Moving an index of the flat layout (earlier versions: one document per passage) to the
current one (one document per key, passages nested), behind an alias.

The steps, each safe to run again (a migration cut short is resumed by running it again):

1. create the new index ``<index>.nested`` (a name no indexplug index can have) with the old
   one's facts (analysis, embedder, budget), unless it exists from an earlier run;
2. copy every passage: page through the old index (sorted on ``_id``'s doc order with a point
   in time, so the pages are one snapshot), rebuild each passage from its record and
   ``create`` it in the new index (a passage copied by an earlier run answers 409 and is
   skipped); vectors are embedded again (they are not in ``_source``; the embedding cache
   makes a rerun cheap), so a dense index needs its embedder configured;
3. check the new index holds as many passages as the old one;
4. in one ``_aliases`` request, delete the old index and point the alias ``<index>`` at the
   new one: a reader sees the old index whole until that instant, and the new one whole after
   it, never half of either.

Until step 4 the old index is untouched: readers of this version are told to migrate it,
readers of earlier versions go on reading it.
"""

from __future__ import annotations

from typing import Any

from indexplug.deadlines import Deadline
from indexplug.embedcache import cache_for, embed_passages
from indexplug.passages import Passage, passage_from_provenance
from indexplug.protocols import Granularity

from indexplug_elastic import bulk
from indexplug_elastic.context import Context
from indexplug_elastic.documents import dumps, nested, parent
from indexplug_elastic.failures import error_reason
from indexplug_elastic.mapping import (
    LAYOUT,
    MIGRATED_SUFFIX,
    PROV,
    TEXT,
    IndexMeta,
    mappings,
    settings,
)

PAGE = 500
"""Passages read and written per request."""
KEEP_ALIVE = "5m"


class MigrationFailed(Exception):
    """The index could not be migrated (the reason says why; nothing readers see changed)."""


def migrate(cx: Context, index: str, es_index: str, deadline: Deadline) -> bool:
    """Migrate ``es_index`` if it has the flat layout; whether it did (False: it does not
    exist or has the current layout already)."""
    client = cx.conn.within(deadline)
    meta = cx.meta(client, es_index, deadline, fresh=True, flat_ok=True)
    if meta is None or not meta.flat:
        return False
    if meta.embedder is not None:
        emb = cx.embedder() if cx.opts.embedder else None
        if emb is None or emb.name != meta.embedder or emb.dim != meta.dim:
            raise MigrationFailed(
                f"index '{index}' has vectors of {meta.embedder} (dim {meta.dim}); migrating "
                f"embeds its passages again: configure embedder={meta.embedder}"
            )
    target = es_index + MIGRATED_SUFFIX
    new = IndexMeta(
        analysis=meta.analysis,
        analyzer=meta.analyzer,
        embedder=meta.embedder,
        dim=meta.dim,
        max_bytes=meta.max_bytes,
        layout=LAYOUT,
    )
    if not client.indices.exists(index=target):
        client.indices.create(
            index=target,
            mappings=mappings(new),
            settings=settings(shards=cx.opts.shards, replicas=cx.opts.replicas),
            timeout=cx.server_timeout(deadline),
            master_timeout=cx.server_timeout(deadline),
        )
    total = _copy(cx, es_index, target, new, deadline)
    client = cx.conn.within(deadline)
    client.indices.refresh(index=target)
    copied = cx.count(client, target)
    if copied != total:
        raise MigrationFailed(
            f"migrating index '{index}': the new index holds {copied} passages, the old one "
            f"{total} (was the old one written meanwhile by an earlier version?); run the "
            "migration again"
        )
    client.indices.update_aliases(
        actions=[
            {"remove_index": {"index": es_index}},
            {"add": {"index": target, "alias": es_index}},
        ],
        timeout=cx.server_timeout(deadline),
        master_timeout=cx.server_timeout(deadline),
    )
    cx.forget(es_index)
    return True


def _copy(cx: Context, es_index: str, target: str, meta: IndexMeta, deadline: Deadline) -> int:
    """Copy every passage of ``es_index`` into ``target``; how many the old index holds."""
    client = cx.conn.within(deadline)
    pit = client.open_point_in_time(index=es_index, keep_alive=KEEP_ALIVE)["id"]
    seen = 0
    after: list[Any] | None = None
    try:
        while True:
            body: dict[str, Any] = {
                "size": PAGE,
                "sort": ["_shard_doc"],
                "pit": {"id": pit, "keep_alive": KEEP_ALIVE},
                "_source": [TEXT, PROV],
                "track_total_hits": False,
            }
            if after is not None:
                body["search_after"] = after
            hits = cx.conn.within(deadline).search(**body)["hits"]["hits"]
            if not hits:
                return seen
            seen += len(hits)
            after = hits[-1]["sort"]
            _write_page(cx, target, [_passage(h) for h in hits], meta, deadline)
    finally:
        try:
            cx.conn.within(Deadline.after(5.0)).close_point_in_time(id=pit)
        except Exception:
            pass  # it expires by itself


def _passage(hit: dict[str, Any]) -> Passage:
    source = hit.get("_source") or {}
    try:
        return passage_from_provenance(str(hit["_id"]), source[TEXT], source[PROV])
    except KeyError:
        raise MigrationFailed(
            f"document {str(hit['_id'])[:12]}... of the old index holds no passage record; "
            "it cannot be migrated (rebuild the index from its sources)"
        ) from None


def _document(p: Passage, analysis: Any, vector: Any) -> bytes:
    return dumps(parent(None, [p], [nested(p, analysis=analysis, vector=vector)]))


def _write_page(
    cx: Context, target: str, passages: list[Passage], meta: IndexMeta, deadline: Deadline
) -> None:
    vectors: list[Any] = [None] * len(passages)
    if meta.embedder is not None:
        emb = cx.embedder()
        cache = cache_for(emb) if cx.opts.embed_cache else None
        vectors = embed_passages(emb, passages, Granularity.TEXT, cache=cache)
    analysis = cx.analysis if meta.analysis == "client" else None
    actions = [
        bulk.create(target, p.id, _document(p, analysis, v))
        for p, v in zip(passages, vectors, strict=True)
    ]
    result = bulk.send_all(
        lambda: cx.conn.within(deadline),
        target,
        actions,
        total=len(actions),
        max_docs=cx.opts.bulk_docs,
        max_bytes=cx.opts.bulk_bytes,
        timeout=lambda: cx.server_timeout(deadline),
        progress=False,
    )
    if result.failed:
        pid, (_, err) = next(iter(result.failed.items()))
        raise MigrationFailed(
            f"{len(result.failed)} passage(s) could not be copied, the first {pid[:12]}...: "
            f"{error_reason(err)}; run the migration again"
        )
