"""Searching: one ``_msearch`` per query, then ranks (and fusion) into hits.

See :mod:`indexplug_elastic.search` for the request bodies and reciprocal rank fusion.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from indexplug.deadlines import Deadline
from indexplug.outcomes import IndexEmpty, IndexTimeout, NoMatch, Searched, SearchOutcome
from indexplug.passages import MetadataValue
from indexplug.protocols import Granularity

from indexplug_elastic import search as q
from indexplug_elastic.context import COUNTS, Context
from indexplug_elastic.documents import hits_from_response, hits_from_sources
from indexplug_elastic.failures import classify, is_index_missing


def search(
    cx: Context,
    index: str,
    es_index: str,
    query: str,
    top_k: int,
    filters: Mapping[str, MetadataValue] | None,
    deadline: Deadline,
) -> SearchOutcome:
    scale = q.SCALES[cx.mode]
    # Every request goes through ``bounded``: a try per node, each with what is left of the
    # deadline, so the search is over by its deadline (the backend claims it for BM25 mode).
    conn = cx.conn
    meta = cx.cached_meta(es_index) or conn.bounded(
        deadline, lambda c: cx.meta(c, es_index, deadline, fresh=False)
    )
    if meta is None:
        return IndexEmpty(index=index, backend=cx.name)
    problem = cx.embedder_problem(meta, writing=False)
    if problem:
        return cx.failed(index, problem, "EmbedderMismatch")
    window = top_k if cx.mode == "bm25" else max(top_k, cx.opts.rank_window)
    ms = cx.ms(deadline)
    bodies: list[dict[str, Any]] = []
    legs: list[str] = []
    if cx.mode in ("bm25", "hybrid"):
        text = query
        if meta.analysis == "client":
            text = " ".join(cx.analysis.terms(query)[: q.MAX_QUERY_TERMS])
        if text.strip():
            bodies.append(
                q.lexical_body(meta.search_field, text, size=window, filters=filters, timeout_ms=ms)
            )
            legs.append("bm25")
    if cx.mode in ("knn", "hybrid"):
        vector = cx.embedder().embed_query(query, Granularity.TEXT)
        if np.any(vector):
            bodies.append(q.knn_body(vector, k=window, filters=filters, timeout_ms=ms))
            legs.append("knn")
    # The passage count rides along as one more search of the same round trip, unless this
    # process counted less than ``count_ttl_s`` ago and has not written since.
    key = cx.count_key(es_index)
    kept, generation = COUNTS.fresh(key, cx.opts.count_ttl_s)
    counting = kept is None or not bodies
    if counting:
        bodies.append(q.count_body(ms))
    answers = _msearch(cx, index, es_index, bodies, deadline)
    if not isinstance(answers, list):
        return answers
    if counting:
        count = int(answers.pop()["hits"]["total"]["value"])
        COUNTS.keep(key, generation, count)
        if count == 0:
            return IndexEmpty(index=index, backend=cx.name)
    else:
        assert kept is not None
        count = kept
    fused: list[q.Ranked] = []
    one_leg: list[Mapping[str, Any]] = []
    if cx.mode == "hybrid":
        ranked_legs = [q.ranked(answers[i], cosine=(leg == "knn")) for i, leg in enumerate(legs)]
        fused = q.rrf(ranked_legs, k=cx.opts.rrf_k, top_k=top_k)
    elif legs:
        # one leg needs no fusion: its hits are read straight from the answer
        one_leg = answers[0]["hits"]["hits"][:top_k]
    if not (fused or one_leg):
        if not counting:
            # a kept count never decides an answer: empty or nothing matched, counted now
            COUNTS.forget(key)
            fresh = _msearch(cx, index, es_index, [q.count_body(cx.ms(deadline))], deadline)
            if not isinstance(fresh, list):
                return fresh
            count = int(fresh[0]["hits"]["total"]["value"])
            if count == 0:
                return IndexEmpty(index=index, backend=cx.name)
        return NoMatch(index=index, backend=cx.name, searched=count)
    if fused:
        hits = hits_from_sources(fused, scale.name)
    else:
        hits = hits_from_response(one_leg, scale.name, cosine=cx.mode == "knn")
    # The count is a separate search (of the same request, or kept from an earlier one): a
    # write landing between them could make it smaller than the hits; the index held at least
    # as many as it returned.
    return Searched.from_stored(
        index=index,
        backend=cx.name,
        hits=hits,
        searched=max(count, len(hits)),
        scale=scale,
    )


def _msearch(
    cx: Context, index: str, es_index: str, bodies: list[dict[str, Any]], deadline: Deadline
) -> list[Any] | SearchOutcome:
    """The answers of one ``_msearch`` of ``bodies``, or the outcome that ends the search (the
    index is missing or new, a failure, or a search past its deadline on the server)."""
    conn = cx.conn
    # Byte lines go into the NDJSON body as they are (see ``encoded``); the client's
    # annotations only name the dicts it would encode itself.
    lines: Any = q.encoded(q.msearch_lines(es_index, bodies))
    answers: list[Any] = []
    for attempt in range(2):
        resp = conn.bounded(deadline, lambda c: c.msearch(searches=lines))
        answers = resp["responses"]
        failed = next((a for a in answers if "error" in a), None)
        if failed is None:
            break
        if is_index_missing(failed):
            cx.forget(es_index)
            return IndexEmpty(index=index, backend=cx.name)
        if failed.get("status") == 503:
            # No shard copy answered.  A brand-new index's primary may not have started yet
            # (it holds nothing: empty); or it started between our search and this look (a
            # writer creating the index under our feet), and asking once more is honest.
            state = conn.bounded(deadline, lambda c: cx.primaries(c, es_index))
            if state == "new":
                return IndexEmpty(index=index, backend=cx.name)
            if state == "started" and attempt == 0:
                continue
        return classify(
            failed.get("status"),
            failed,
            index=index,
            backend=cx.name,
            deadline=deadline,
            doing="searching",
        )
    for answer in answers:
        if answer.get("timed_out"):
            return IndexTimeout(
                index=index,
                backend=cx.name,
                deadline_s=deadline.seconds,
                reason="the search ran past its deadline on the server (timed_out)",
            )
    return list(answers)
