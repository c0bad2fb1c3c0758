"""Search requests (BM25, kNN, hybrid) and reciprocal rank fusion.

Every ranked leg is a ``nested`` query over the passages with ``score_mode: max`` and
``inner_hits`` of size k: a document scores its best passage, and the k best documents' inner
hits hold the exact global top k passages (a passage in the top k has at most k - 1 better
passages, so at most k - 1 documents score above its own, and at most k - 1 of its own
siblings rank above it).  :func:`ranked` merges the inner hits into that top k.  Inner hits
read each passage from stored fields and doc values, never the nested ``_source`` (which
Elasticsearch would parse out of the whole document for every inner hit).

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
from typing import Any

import numpy as np
import orjson
from indexplug.outcomes import ScoreScale

from indexplug_elastic.documents import (
    DOCVALUE_FIELDS,
    STORED_FIELDS,
    WITH_VECTORS,
    Stored,
    inner_hits,
    vector_of,
)
from indexplug_elastic.filtering import filter_query
from indexplug_elastic.mapping import COUNT, PASSAGES, VECTOR_PATH, path

MAX_QUERY_TERMS = 1024
"""Analysed query terms sent at most (the first ones).  Lucene refuses a query of more clauses
than a heap-dependent limit (a 10,000-word query fails on a 512 MB node); a longer query is
cut rather than refused, so it still gets an answer."""

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


def filter_clauses(filters: Any) -> list[dict[str, Any]]:
    """The filter clauses of ``filters`` (a parsed filter or an equality map; see
    :mod:`indexplug_elastic.filtering`)."""
    query = filter_query(filters)
    return [] if query is None else [query]


NOTHING_OF_THE_DOCUMENT: dict[str, Any] = {"_source": False, "stored_fields": "_none_"}
"""A ranked leg reads nothing of a document itself, not even its ``_id`` (everything comes
from its inner hits): measured on SciFact, a millisecond less per search at top 10, four at
top 100."""


def versioned(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` answering each document's ``_id`` and sequence number, for :func:`untorn`."""
    out = {k: v for k, v in body.items() if k != "stored_fields"}
    out.update(_source=False, seq_no_primary_term=True)
    return out


def untorn(
    answers: Sequence[Mapping[str, Any]], legs: Sequence[list[Stored]]
) -> list[list[Stored]]:
    """``legs`` (ranked from ``answers``, of :func:`versioned` bodies) with every passage of
    a document version older than one another leg saw left out.

    The legs of a hybrid search are searches of their own: a refresh between them (a key
    replaced meanwhile) can show one leg the old version of a key's document and the other
    the new one, and fusing them would answer passages of both versions.  Each key is then
    answered in its newest version seen, so no search sees two versions of a key."""
    owners: list[dict[str, tuple[str, int]]] = []
    newest: dict[str, int] = {}
    for answer in answers:
        owner: dict[str, tuple[str, int]] = {}
        for hit in answer["hits"]["hits"]:
            doc, seq = hit.get("_id"), hit.get("_seq_no")
            if doc is None or seq is None:
                continue
            newest[doc] = max(newest.get(doc, seq), seq)
            for s in inner_hits(hit):
                owner[s.pid] = (doc, seq)
        owners.append(owner)
    out: list[list[Stored]] = []
    for owner, leg in zip(owners, legs, strict=True):
        kept = []
        for s in leg:
            doc, seq = owner.get(s.pid, ("", 0))
            if seq >= newest.get(doc, seq):
                kept.append(s)
        out.append(kept)
    return out


def inner(size: int, *, sort: Any = None, vectors: bool = False) -> dict[str, Any]:
    """The ``inner_hits`` of a nested leg: ``size`` passages, read from stored fields and doc
    values (``_source`` off); with ``vectors``, their stored vectors too
    (:data:`~indexplug_elastic.documents.WITH_VECTORS` says why doc values)."""
    out: dict[str, Any] = {
        "size": size,
        "_source": False,
        "stored_fields": STORED_FIELDS,
        "docvalue_fields": WITH_VECTORS if vectors else DOCVALUE_FIELDS,
    }
    if sort is not None:
        out["sort"] = sort
    return out


def passages_query(
    query: dict[str, Any],
    *,
    size: int,
    score_mode: str = "max",
    sort: Any = None,
    vectors: bool = False,
) -> dict[str, Any]:
    """``query`` (over the nested passages) as a query on the documents, with the passages
    that matched as inner hits (with their vectors if ``vectors``)."""
    return {
        "nested": {
            "path": PASSAGES,
            "score_mode": score_mode,
            "query": query,
            "inner_hits": inner(size, sort=sort, vectors=vectors),
        }
    }


def lexical_body(
    field: str,
    text: str,
    *,
    size: int,
    filters: Any,
    timeout_ms: int,
) -> dict[str, Any]:
    match: dict[str, Any] = {"match": {path(field): {"query": text}}}
    clauses = filter_clauses(filters)
    query = {"bool": {"must": [match], "filter": clauses}} if clauses else match
    return {
        "query": passages_query(query, size=size),
        "size": size,
        **NOTHING_OF_THE_DOCUMENT,
        "track_total_hits": False,
        "timeout": f"{timeout_ms}ms",
    }


def knn_body(
    vector: np.ndarray,
    *,
    k: int,
    filters: Any,
    timeout_ms: int,
    vectors: bool = False,
) -> dict[str, Any]:
    """A ``knn`` query on the passages' vectors inside the nested query; the candidates per
    shard bound what it can find.  With ``vectors``, each inner hit reads its stored vector
    as well.

    A filter is a *post*-filter on the passages the ``knn`` found (a ``bool`` around it), with
    four times the candidates: Elasticsearch 8 applies a nested ``knn``'s own ``filter`` to
    the parent documents only (a filter on a passage's metadata matches nothing there), and
    its nested ``knn`` keeps each document's nearest passage, so a passage whose nearer
    sibling fails the filter is not found this way.  :func:`filtered_count_body` and
    :func:`exact_body` make filtered searches exact whenever at most :data:`EXACT_MAX`
    passages pass the filter; this body answers the rest."""
    clauses = filter_clauses(filters)
    wanted = min(MAX_KNN, max(4 * k, 100)) if clauses else k
    knn: dict[str, Any] = {
        "field": VECTOR_PATH,
        "query_vector": [float(x) for x in vector],
        "k": wanted,
        "num_candidates": min(MAX_KNN, max(wanted, 2 * wanted, 100)),
    }
    query: dict[str, Any] = {"knn": knn}
    if clauses:
        query = {"bool": {"must": [query], "filter": clauses}}
    return {
        "query": passages_query(query, size=k, vectors=vectors),
        "size": k,
        **NOTHING_OF_THE_DOCUMENT,
        "track_total_hits": False,
        "timeout": f"{timeout_ms}ms",
    }


MAX_KNN = 10_000
"""Elasticsearch's largest ``k`` and ``num_candidates``."""

EXACT_MAX = 1_000
"""A filtered kNN leg is scored exactly, on the client, when at most this many passages pass
the filter: their vectors and records come back in one search (a few megabytes at most)."""

FILTERED = "filtered"


def filtered_count_body(filters: Any, timeout_ms: int) -> dict[str, Any]:
    """How many passages pass ``filters`` (a ``nested`` aggregation of the passages with a
    ``filter`` one inside): whether :func:`exact_body` can score them all."""
    clauses = filter_clauses(filters)
    return {
        "size": 0,
        "track_total_hits": False,
        "aggs": {
            FILTERED: {
                "nested": {"path": PASSAGES},
                "aggs": {FILTERED: {"filter": {"bool": {"filter": clauses}}}},
            }
        },
        "timeout": f"{timeout_ms}ms",
    }


def filtered_count_of(answer: Mapping[str, Any]) -> int:
    """The passage count of a :func:`filtered_count_body` answer."""
    aggs = (answer.get("aggregations") or {}).get(FILTERED) or {}
    return int((aggs.get(FILTERED) or {}).get("doc_count") or 0)


def exact_body(filters: Any, *, size: int, timeout_ms: int) -> dict[str, Any]:
    """Every passage passing ``filters`` (``size`` of them: their count), each with its
    record and its stored vector, for :func:`nearest` to score exactly."""
    clauses = filter_clauses(filters)
    return {
        "query": passages_query(
            {"bool": {"filter": clauses}}, size=size, score_mode="none", vectors=True
        ),
        "size": size,
        **NOTHING_OF_THE_DOCUMENT,
        "track_total_hits": False,
        "timeout": f"{timeout_ms}ms",
    }


def nearest(response: Mapping[str, Any], vector: np.ndarray, k: int) -> list[Stored]:
    """The ``k`` passages of an :func:`exact_body` answer nearest ``vector`` by cosine, scored
    as Elasticsearch scores a kNN hit, ``(1 + cosine) / 2`` (a passage stored without a vector
    is not among them, as in the HNSW graph)."""
    query = np.asarray(vector, dtype=np.float64)
    query = query / (float(np.linalg.norm(query)) or 1.0)
    scored: list[tuple[float, str, Stored]] = []
    for hit in response["hits"]["hits"]:
        for s in inner_hits(hit):
            stored = vector_of(s)
            if stored is None:
                continue
            v = np.asarray(stored, dtype=np.float64)
            norm = float(np.linalg.norm(v))
            if norm == 0.0:
                continue
            cosine = float(np.dot(v, query)) / norm
            scored.append((-(1.0 + cosine) / 2.0, s.pid, s))
    scored.sort(key=lambda t: t[:2])
    return [Stored(s.pid, -neg, s.fields) for neg, _, s in scored[:k]]


def count_body(timeout_ms: int) -> dict[str, Any]:
    """How many passages the index holds: the sum of each document's ``n``."""
    return {
        "size": 0,
        "track_total_hits": False,
        "aggs": {COUNT: {"sum": {"field": COUNT}}},
        "timeout": f"{timeout_ms}ms",
    }


def count_of(answer: Mapping[str, Any]) -> int:
    """The passage count of a :func:`count_body` answer."""
    return int((answer.get("aggregations") or {}).get(COUNT, {}).get("value") or 0)


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


def ranked(response: Mapping[str, Any], top_k: int) -> list[Stored]:
    """The global top ``top_k`` passages of one nested leg's answer: every inner hit of its
    documents, best first (ties in the order the server ranked documents, then passages)."""
    found: list[tuple[float, int, int, Stored]] = []
    for d, hit in enumerate(response["hits"]["hits"]):
        for n, s in enumerate(inner_hits(hit)):
            found.append((-s.score, d, n, s))
    found.sort(key=lambda t: t[:3])
    return [t[3] for t in found[:top_k]]


def rrf(legs: Sequence[Sequence[Stored]], *, k: int, top_k: int) -> list[Stored]:
    """Reciprocal rank fusion of ranked lists; ties keep the order of the earlier legs."""
    scores: dict[str, float] = {}
    first_seen: dict[str, tuple[int, int]] = {}
    fields: dict[str, Mapping[str, Any]] = {}
    for leg_no, leg in enumerate(legs):
        for rank, r in enumerate(leg, start=1):
            scores[r.pid] = scores.get(r.pid, 0.0) + 1.0 / (k + rank)
            first_seen.setdefault(r.pid, (rank, leg_no))
            fields.setdefault(r.pid, r.fields)
    order = sorted(scores, key=lambda d: (-scores[d], first_seen[d], d))
    return [Stored(d, scores[d], fields[d]) for d in order[:top_k]]
