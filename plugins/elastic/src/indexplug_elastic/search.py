"""Search requests (BM25, kNN, hybrid) and reciprocal rank fusion.

Every search is one ``_msearch`` round trip: the ranked leg(s), plus a ``match_all`` count
when the process has none younger than ``count_ttl_s`` (``indexplug.counts``), so an answer
always says how many passages the index holds without a request of its own.  A search that
finds nothing counts afresh (``NO_MATCH`` versus ``INDEX_EMPTY`` is never decided by a kept
count).

Why client-side RRF: the server's ``rrf`` retriever lives in the ``rank-rrf`` x-pack module and
needs a paid licence in 8.x; the integ-test-zip has neither ("unknown retriever [rrf]"), and a
basic-licence production cluster refuses it.  Fusing ranks here works on every cluster and is
exactly the published formula, ``sum(1 / (k + rank))``.  Scores of the two legs are never added
(BM25 and cosine live on different scales); only ranks are.

Why ``match`` and nothing else: user text goes to a ``match`` query (or its analysed terms do),
which has no syntax, so quotes, ``AND``, ``*`` or ``field:value`` in a query are just words.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import orjson
from indexplug.outcomes import ScoreScale

from indexplug_elastic.documents import cosine_of
from indexplug_elastic.filtering import filter_query
from indexplug_elastic.mapping import VECTOR

MAX_QUERY_TERMS = 1024
"""Analysed query terms sent at most (the first ones).  Lucene refuses a query of more clauses
than a heap-dependent limit (a 10,000-word query fails on a 512 MB node); a longer query is
cut rather than refused, so it still gets an answer."""
SOURCE = True
"""Hits carry their whole stored ``_source``: it holds only ``text`` and ``prov`` (everything
else is excluded when indexing), and unfiltered it is copied as stored bytes, where a field
list would make the server parse and re-serialise every hit's source (measured: slower)."""

SCALES: dict[str, ScoreScale] = {
    "bm25": ScoreScale(
        name="es_bm25",
        higher_is_better=True,
        comparable_across_searches=False,
        meaning="Elasticsearch BM25 (k1=1.2, b=0.75) over the English-analysed passage text; "
        "comparable only within one search.",
    ),
    "knn": ScoreScale(
        name="cosine",
        higher_is_better=True,
        comparable_across_searches=True,
        meaning="Cosine similarity of the query and passage embeddings (-1..1), from "
        "Elasticsearch's approximate (HNSW) kNN; converted from its (1 + cosine) / 2.",
    ),
    "hybrid": ScoreScale(
        name="rrf",
        higher_is_better=True,
        comparable_across_searches=False,
        meaning="Reciprocal rank fusion of the BM25 and kNN rankings: sum of 1 / (k + rank) "
        "over the legs that returned the passage (k=60 by default).",
    ),
}


class Ranked(NamedTuple):
    """One passage as a leg (or the fusion) ranked it (a named tuple: a top-100 search makes a
    hundred, and a frozen dataclass costs several times as much to create)."""

    doc_id: str
    score: float
    source: Mapping[str, Any]


def filter_clauses(filters: Any) -> list[dict[str, Any]]:
    """The filter clauses of ``filters`` (a parsed filter or an equality map; see
    :mod:`indexplug_elastic.filtering`)."""
    query = filter_query(filters)
    return [] if query is None else [query]


def lexical_body(
    field: str,
    text: str,
    *,
    size: int,
    filters: Any,
    timeout_ms: int,
) -> dict[str, Any]:
    match: dict[str, Any] = {"match": {field: {"query": text}}}
    clauses = filter_clauses(filters)
    query = {"bool": {"must": [match], "filter": clauses}} if clauses else match
    return {
        "query": query,
        "size": size,
        "_source": SOURCE,
        "track_total_hits": False,
        "timeout": f"{timeout_ms}ms",
    }


def knn_body(
    vector: np.ndarray,
    *,
    k: int,
    filters: Any,
    timeout_ms: int,
) -> dict[str, Any]:
    knn: dict[str, Any] = {
        "field": VECTOR,
        "query_vector": [float(x) for x in vector],
        "k": k,
        "num_candidates": min(10_000, max(k, 2 * k, 100)),
    }
    clauses = filter_clauses(filters)
    if clauses:
        knn["filter"] = clauses
    return {
        "knn": knn,
        "size": k,
        "_source": SOURCE,
        "track_total_hits": False,
        "timeout": f"{timeout_ms}ms",
    }


def count_body(timeout_ms: int) -> dict[str, Any]:
    """How many passages the index holds (Lucene answers this from segment counts)."""
    return {
        "query": {"match_all": {}},
        "size": 0,
        "track_total_hits": True,
        "timeout": f"{timeout_ms}ms",
    }


def msearch_lines(es_index: str, bodies: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    # Partial results would be an answer from part of the index passed off as the whole:
    # a shard without a live copy must fail the search instead.
    head = {"index": es_index, "allow_partial_search_results": False}
    lines: list[dict[str, Any]] = []
    for body in bodies:
        lines += [head, body]
    return lines


def encoded(lines: Sequence[dict[str, Any]]) -> list[bytes]:
    """``lines`` as orjson bytes: the client sends byte lines of an NDJSON body as they are,
    where it would encode dicts with the standard library's ``json`` (several times slower; a
    search's request is a tenth of the client's CPU time per search)."""
    return [orjson.dumps(line, option=orjson.OPT_SERIALIZE_NUMPY) for line in lines]


def ranked(response: Mapping[str, Any], *, cosine: bool = False) -> list[Ranked]:
    """The hits of one search response; kNN scores turned back into cosines."""
    out = []
    for h in response["hits"]["hits"]:
        score = cosine_of(h["_score"]) if cosine else float(h["_score"])
        out.append(Ranked(str(h["_id"]), score, h["_source"]))
    return out


def rrf(legs: Sequence[Sequence[Ranked]], *, k: int, top_k: int) -> list[Ranked]:
    """Reciprocal rank fusion of ranked lists; ties keep the order of the earlier legs."""
    scores: dict[str, float] = {}
    first_seen: dict[str, tuple[int, int]] = {}
    sources: dict[str, Mapping[str, Any]] = {}
    for leg_no, leg in enumerate(legs):
        for rank, r in enumerate(leg, start=1):
            scores[r.doc_id] = scores.get(r.doc_id, 0.0) + 1.0 / (k + rank)
            first_seen.setdefault(r.doc_id, (rank, leg_no))
            sources.setdefault(r.doc_id, r.source)
    order = sorted(scores, key=lambda d: (-scores[d], first_seen[d], d))
    return [Ranked(d, scores[d], sources[d]) for d in order[:top_k]]
