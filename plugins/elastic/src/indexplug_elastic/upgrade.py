"""Upgrading an index of layout 1 (no ``pid``, no ``mv``) in place.

Indexes made before ``scan`` and operator filters existed have neither the sortable id nor the
typed filter terms.  ``put_mapping`` adds the two fields (adding fields is allowed on a live
index); the documents are then rewritten from their records, a page at a time, each with
``if_seq_no``/``if_primary_term`` so that a concurrent change or removal wins (a conflict is
skipped: the document was rewritten or removed by someone else).  A partial update cannot do
it: the analysed terms and the vector are left out of ``_source``, so every document is
rebuilt whole (its vector from the embedding cache or the embedder).  Only then is the layout
recorded in ``_meta``, so an upgrade cut short is simply resumed by the next op.

Every op that needs the new fields (add, scan, a filtered search) upgrades first; get,
status and unfiltered searches read a layout-1 index as it is.
"""

from __future__ import annotations

from typing import Any

from elasticsearch import Elasticsearch
from indexplug.deadlines import Deadline
from indexplug.embedcache import cache_for, embed_passages
from indexplug.protocols import Granularity

from indexplug_elastic.context import Context
from indexplug_elastic.documents import document, dumps, record_of
from indexplug_elastic.failures import error_reason
from indexplug_elastic.mapping import LAYOUT, NEW_FIELDS, PID, IndexMeta

PAGE = 250
"""Documents rewritten per request."""
_WITHOUT_PID: dict[str, Any] = {"bool": {"must_not": [{"exists": {"field": PID}}]}}


class UpgradeFailed(Exception):
    """An index of an older layout could not be upgraded (the reason says why)."""


def ensure_layout(cx: Context, es_index: str, meta: IndexMeta, deadline: Deadline) -> IndexMeta:
    """``meta`` if the index already has the current layout, else the index upgraded."""
    if meta.layout >= LAYOUT:
        return meta
    if meta.embedder is not None:
        emb = cx.embedder() if cx.opts.embedder else None
        if emb is None or emb.name != meta.embedder or emb.dim != meta.dim:
            raise UpgradeFailed(
                f"index '{es_index}' predates scan and operator filters and must be upgraded "
                f"(its documents rewritten, vectors included): configure "
                f"embedder={meta.embedder} for this backend"
            )
    client = cx.conn.within(deadline)
    client.indices.put_mapping(
        index=es_index, properties=NEW_FIELDS, master_timeout=cx.server_timeout(deadline)
    )
    total = int(client.count(index=es_index)["count"])
    for _ in range(total // PAGE + 3):  # each round rewrites a page; conflicts end early
        if not _rewrite_page(cx, cx.conn.within(deadline), es_index, meta, deadline):
            break
    left = int(cx.conn.within(deadline).count(index=es_index, query=_WITHOUT_PID)["count"])
    if left:  # written meanwhile by a plugin that predates the layout: not marked done
        raise UpgradeFailed(
            f"upgrading index '{es_index}': {left} document(s) still lack the new fields "
            "(written meanwhile by an older version of this plugin?); the next op tries again"
        )
    new = meta.upgraded()
    cx.conn.within(deadline).indices.put_mapping(
        index=es_index, meta=new.to_meta(), master_timeout=cx.server_timeout(deadline)
    )
    cx.remember(es_index, new)
    return new


def _rewrite_page(
    cx: Context, client: Elasticsearch, es_index: str, meta: IndexMeta, deadline: Deadline
) -> bool:
    """Rewrite one page of documents without ``pid``; False when none was left."""
    resp = client.search(
        index=es_index,
        query=_WITHOUT_PID,
        size=PAGE,
        seq_no_primary_term=True,
        track_total_hits=False,
    )
    hits = resp["hits"]["hits"]
    if not hits:
        return False
    passages = [record_of(h["_id"], h.get("_source")) for h in hits]
    vectors: list[Any] = [None] * len(passages)
    if meta.embedder is not None:
        emb = cx.embedder()
        cache = cache_for(emb) if cx.opts.embed_cache else None
        vectors = embed_passages(emb, passages, Granularity.TEXT, cache=cache)
    analysis = cx.analysis if meta.analysis == "client" else None
    lines: list[bytes] = []
    for h, p, vec in zip(hits, passages, vectors, strict=True):
        head = {
            "index": {
                "_index": es_index,
                "_id": h["_id"],
                "if_seq_no": h["_seq_no"],
                "if_primary_term": h["_primary_term"],
            }
        }
        lines += [dumps(head), b"\n", dumps(document(p, analysis=analysis, vector=vec)), b"\n"]
    answer = client.bulk(
        operations=b"".join(lines),  # type: ignore[arg-type]
        refresh=True,
        timeout=cx.server_timeout(deadline),
    )
    for item in answer["items"]:
        res = item["index"]
        status = int(res.get("status", 500))
        if status not in (200, 201, 409):  # 409: changed or removed meanwhile, theirs wins
            raise UpgradeFailed(
                f"upgrading index '{es_index}': document {str(res.get('_id'))[:12]}... was "
                f"refused: {error_reason(res.get('error'))}"
            )
    return True
