"""Reading: search, get, scan and the index list, each written once for both clients.

Each read is a *plan*: a generator that yields the requests it needs (:class:`Call`, a client
method and its arguments) and blocking work (:class:`Offload`: embedding a query), is sent each
answer back (or has the client's exception thrown into it), and returns the outcome.
:func:`drive` runs a plan with the blocking client (every request through
:meth:`~indexplug_elastic.connection.Connection.bounded`), :func:`adrive` with the official
``AsyncElasticsearch`` client on the running event loop, blocking work on a thread. So
``search`` and ``asearch`` are the same code, request for request.

See :mod:`indexplug_elastic.search` for the request bodies and reciprocal rank fusion.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import numpy as np
from elasticsearch import ApiError
from indexplug.deadlines import Deadline
from indexplug.names import validate_index_name
from indexplug.outcomes import (
    Got,
    IndexEmpty,
    IndexInfo,
    IndexList,
    IndexTimeout,
    NoMatch,
    Scanned,
    Searched,
    SearchOutcome,
    VectorSearchOutcome,
)
from indexplug.protocols import Granularity

from indexplug_elastic import search as q
from indexplug_elastic.context import COUNTS, SHARD_ROWS, Context
from indexplug_elastic.documents import Stored, hits_of, inner_hits, key_doc_id, record_of
from indexplug_elastic.failures import Failure, classify, is_index_missing
from indexplug_elastic.mapping import KEY, MIGRATED_SUFFIX, PID_PATH, ForeignIndex, IndexMeta

T = TypeVar("T")

GET_IDS = 1000
"""Ids (or keys) per ``get`` search."""
MAX_WINDOW = 10_000
"""Elasticsearch's default ``index.max_result_window``: the largest page one search returns."""


@dataclass(frozen=True)
class Call:
    """One request: the client method at ``path`` (``"msearch"``, ``"indices.get_mapping"``)
    with ``kwargs``."""

    path: str
    kwargs: dict[str, Any]


@dataclass(frozen=True)
class Offload:
    """Blocking work (CPU or a sync upgrade): run as it is, or on a thread under asyncio."""

    fn: Callable[[], Any]


@dataclass(frozen=True)
class Sub:
    """A nested plan: :func:`drive` calls ``blocking`` (a module-level function, looked up
    when called, so the benchmarks' hooks on ``_msearch`` see every search's round trip),
    :func:`adrive` runs ``plan()``."""

    blocking: Callable[[], Any]
    plan: Callable[[], Generator[Any, Any, Any]]


Plan = Generator[Call | Offload | Sub, Any, T]


def _method(client: Any, path: str) -> Any:
    return functools.reduce(getattr, path.split("."), client)


def _request(call: Call, client: Any) -> Any:
    return _method(client, call.path)(**call.kwargs)


def drive(cx: Context, deadline: Deadline, plan: Plan[T]) -> T:
    """Run ``plan`` with the blocking client."""
    answer: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = plan.throw(error) if error is not None else plan.send(answer)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        answer, error = None, None
        try:
            if isinstance(step, Call):
                answer = cx.conn.bounded(deadline, functools.partial(_request, step))
            elif isinstance(step, Sub):
                answer = step.blocking()
            else:
                answer = step.fn()
        except Exception as exc:
            error = exc


async def adrive(cx: Context, deadline: Deadline, plan: Plan[T]) -> T:
    """Run ``plan`` with ``AsyncElasticsearch`` on the running loop (blocking steps on a
    thread), every request bounded by what is left of ``deadline``."""
    answer: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = plan.throw(error) if error is not None else plan.send(answer)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        answer, error = None, None
        try:
            if isinstance(step, Call):
                client = cx.conn.awithin(deadline)
                answer = await _method(client, step.path)(**step.kwargs)
            elif isinstance(step, Sub):
                answer = await adrive(cx, deadline, step.plan())
            else:
                answer = await asyncio.to_thread(step.fn)
        except Exception as exc:
            error = exc


# -- shared steps ---------------------------------------------------------------------------


def meta_plan(cx: Context, es_index: str, deadline: Deadline) -> Plan[IndexMeta | None]:
    """The facts of ``es_index``, cached after the first read (None if it does not exist;
    ForeignIndex if it is not ours)."""
    cached = cx.cached_meta(es_index)
    if cached is not None and not cached.flat:  # a flat index may be migrated meanwhile
        return cached
    try:
        resp = yield Call(
            "indices.get_mapping",
            {"index": es_index, "master_timeout": cx.server_timeout(deadline)},
        )
    except ApiError as exc:
        if is_index_missing(exc):
            cx.drop_meta(es_index)
            return None
        raise
    return cx.current(es_index, cx.read_meta(es_index, resp.body))


def primaries_plan(es_index: str) -> Plan[str]:
    """:meth:`Context.primaries` as a plan."""
    try:
        rows = yield Call("cat.shards", {"index": es_index, **SHARD_ROWS})
    except Exception:
        return "missing"
    return Context.primaries_of(rows)


def msearch_plan(
    cx: Context, index: str, es_index: str, bodies: list[dict[str, Any]], deadline: Deadline
) -> Plan[list[Any] | IndexEmpty | IndexTimeout | Failure]:
    """The answers of one ``_msearch`` of ``bodies``, or the outcome that ends the read (the
    index is missing or new, a failure, or a search past its deadline on the server)."""
    # Byte lines go into the NDJSON body as they are (see ``encoded``); the client's
    # annotations only name the dicts it would encode itself.
    lines: Any = q.encoded(q.msearch_lines(es_index, bodies))
    answers: list[Any] = []
    for attempt in range(2):
        resp = yield Call("msearch", {"searches": lines})
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
            state = yield from primaries_plan(es_index)
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


def _msearch(
    cx: Context, index: str, es_index: str, bodies: list[dict[str, Any]], deadline: Deadline
) -> list[Any] | IndexEmpty | IndexTimeout | Failure:
    """:func:`msearch_plan` with the blocking client: a search's round trip."""
    return drive(cx, deadline, msearch_plan(cx, index, es_index, bodies, deadline))


# -- search ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ByVector:
    """A search by the caller's vector (``search_vector``) instead of a text: ``vector`` of
    embedder ``embedder``, the hits with their stored vectors if ``with_vectors``."""

    vector: np.ndarray
    embedder: str
    with_vectors: bool


def search_plan(
    cx: Context,
    index: str,
    es_index: str,
    query: str | ByVector,
    top_k: int,
    filters: Any,
    deadline: Deadline,
) -> Plan[VectorSearchOutcome]:
    """A search by ``query``: a text, through the legs of the backend's mode, or a vector
    (:class:`ByVector`), through the kNN leg alone (a vector has no text for BM25: in hybrid
    mode its hits are that one leg's reciprocal ranks, on the ``rrf`` scale)."""
    scale = q.SCALES[cx.mode]
    meta = yield from meta_plan(cx, es_index, deadline)
    if meta is None:
        return IndexEmpty(index=index, backend=cx.name)
    by_vector = query if isinstance(query, ByVector) else None
    if by_vector is not None:
        bad = cx.vector_problem(index, meta, by_vector.embedder, int(by_vector.vector.shape[0]))
        if bad is not None:
            return bad
        problem = None
    elif cx.opts.embedder:  # may load the model: blocking work, on a thread under asyncio
        known = meta
        problem = yield Offload(lambda: cx.embedder_problem(known, writing=False))
    else:
        problem = cx.embedder_problem(meta, writing=False)
    if problem:
        return cx.failed(index, problem, "EmbedderMismatch")
    window = top_k if cx.mode == "bm25" else max(top_k, cx.opts.rank_window)
    ms = cx.ms(deadline)
    bodies: list[dict[str, Any]] = []
    legs: list[str] = []
    knn_vector: np.ndarray | None = None
    if isinstance(query, str) and cx.mode in ("bm25", "hybrid"):
        text = query
        if meta.analysis == "client":
            text = " ".join(cx.analysis.terms(query)[: q.MAX_QUERY_TERMS])
        if text.strip():
            bodies.append(
                q.lexical_body(meta.search_field, text, size=window, filters=filters, timeout_ms=ms)
            )
            legs.append("bm25")
    if by_vector is not None:
        knn_vector = by_vector.vector
    elif cx.mode in ("knn", "hybrid"):
        said = str(query)
        vector = yield Offload(lambda: cx.embedder().embed_query(said, Granularity.TEXT))
        if np.any(vector):
            knn_vector = vector
    with_vectors = by_vector is not None and by_vector.with_vectors
    if knn_vector is not None:
        bodies.append(
            q.knn_body(knn_vector, k=window, filters=filters, timeout_ms=ms, vectors=with_vectors)
        )
        legs.append("knn")
    # Legs fused from two searches answer their documents' versions (see ``search.untorn``).
    torn = len(legs) > 1
    if torn:
        bodies = [q.versioned(b) for b in bodies]
    # A filtered kNN leg: how many passages pass the filter, in the same round trip (few
    # enough, and they are scored exactly; see ``search.knn_body``).
    exact = knn_vector is not None and bool(q.filter_clauses(filters))
    if exact:
        bodies.append(q.filtered_count_body(filters, ms))
    # The passage count rides along as one more search of the same round trip, unless this
    # process counted less than ``count_ttl_s`` ago and has not written since.
    key = cx.count_key(es_index)
    kept, generation = COUNTS.fresh(key, cx.opts.count_ttl_s)
    counting = kept is None or not bodies
    if counting:
        bodies.append(q.count_body(ms))
    answers = yield Sub(
        lambda: _msearch(cx, index, es_index, bodies, deadline),
        lambda: msearch_plan(cx, index, es_index, bodies, deadline),
    )
    if not isinstance(answers, list):
        return answers  # type: ignore[no-any-return]
    if counting:
        count = q.count_of(answers.pop())
        COUNTS.keep(key, generation, count)
        if count == 0:
            return IndexEmpty(index=index, backend=cx.name)
    else:
        assert kept is not None
        count = kept
    leg_answers = answers[: len(legs)]
    ranked_legs = [q.ranked(answers[i], window) for i in range(len(legs))]
    if exact:
        passing = q.filtered_count_of(answers.pop())
        if passing <= q.EXACT_MAX:
            scored: list[Stored] = []
            if passing:
                body = [q.exact_body(filters, size=passing, timeout_ms=cx.ms(deadline))]
                if torn:
                    body = [q.versioned(body[0])]
                every = yield Sub(
                    lambda: _msearch(cx, index, es_index, body, deadline),
                    lambda: msearch_plan(cx, index, es_index, body, deadline),
                )
                if not isinstance(every, list):
                    return every  # type: ignore[no-any-return]
                assert knn_vector is not None
                scored = q.nearest(every[0], knn_vector, window)
                leg_answers[legs.index("knn")] = every[0]
            ranked_legs[legs.index("knn")] = scored
    if torn:
        ranked_legs = q.untorn(leg_answers, ranked_legs)
    found: list[Stored] = []
    if cx.mode == "hybrid":
        found = q.rrf(ranked_legs, k=cx.opts.rrf_k, top_k=top_k)
    elif legs:
        found = ranked_legs[0][:top_k]
    if not found:
        if not counting:
            # a kept count never decides an answer: empty or nothing matched, counted now
            COUNTS.forget(key)
            counts = [q.count_body(cx.ms(deadline))]
            fresh = yield Sub(
                lambda: _msearch(cx, index, es_index, counts, deadline),
                lambda: msearch_plan(cx, index, es_index, counts, deadline),
            )
            if not isinstance(fresh, list):
                return fresh  # type: ignore[no-any-return]
            count = q.count_of(fresh[0])
            if count == 0:
                return IndexEmpty(index=index, backend=cx.name)
        return NoMatch(index=index, backend=cx.name, searched=count)
    hits = hits_of(found, scale.name, cosine=cx.mode == "knn", vectors=with_vectors)
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


def search(
    cx: Context,
    index: str,
    es_index: str,
    query: str,
    top_k: int,
    filters: Any,
    deadline: Deadline,
) -> SearchOutcome:
    """A search with the blocking client (every request bounded by the deadline, so it stops
    by itself there: the backend claims it for BM25 mode)."""
    plan = search_plan(cx, index, es_index, query, top_k, filters, deadline)
    return cast(SearchOutcome, drive(cx, deadline, plan))  # a text: never BAD_REQUEST


def search_vector(
    cx: Context,
    index: str,
    es_index: str,
    query: ByVector,
    top_k: int,
    filters: Any,
    deadline: Deadline,
) -> VectorSearchOutcome:
    """A search by vector (:class:`ByVector`) with the blocking client."""
    return drive(cx, deadline, search_plan(cx, index, es_index, query, top_k, filters, deadline))


# -- get, scan, indexes ------------------------------------------------------------------------


def get_plan(
    cx: Context,
    index: str,
    es_index: str,
    ids: Sequence[str],
    keys: Sequence[str],
    deadline: Deadline,
) -> Plan[Got | Failure]:
    """The stored passages with ``ids`` (in the order asked) and every passage of ``keys``:
    one search per thousand, for documents holding a passage with one of the ids (any
    passages of them that match, as inner hits) or being one of the keys' documents (all its
    passages).  A search reads each document as one version, so a key being replaced comes
    back whole, old or new."""
    wanted = list(dict.fromkeys(ids))
    by_key = list(dict.fromkeys(keys))
    none = Got(index=index, backend=cx.name, missing_ids=wanted, missing_keys=by_key)
    meta = yield from meta_plan(cx, es_index, deadline)
    if meta is None or not (wanted or by_key):
        return none
    found: dict[str, Any] = {}
    key_of: dict[str, str] = {}
    parts: list[tuple[list[str], list[str]]] = [
        (wanted[i : i + GET_IDS], []) for i in range(0, len(wanted), GET_IDS)
    ]
    parts += [([], by_key[i : i + GET_IDS]) for i in range(0, len(by_key), GET_IDS)]
    for part_ids, part_keys in parts:
        body = get_body(part_ids, part_keys, cx.ms(deadline))
        answers = yield from msearch_plan(cx, index, es_index, [body], deadline)
        if isinstance(answers, IndexEmpty):
            return none
        if not isinstance(answers, list):
            return answers
        for hit in answers[0]["hits"]["hits"]:
            for stored in inner_hits(hit):
                p = record_of(stored)
                found[p.id] = p
                if p.key is not None:
                    key_of[p.id] = p.key
    asked = set(wanted)
    keyed = set(by_key)
    passages = [found[i] for i in wanted if i in found]
    passages += sorted(
        (p for p in found.values() if p.id not in asked and p.key in keyed),
        key=lambda p: (p.key or "", p.id),
    )
    seen_keys = {p.key for p in passages}
    return Got(
        index=index,
        backend=cx.name,
        passages=passages,
        missing_ids=[i for i in wanted if i not in found],
        missing_keys=[k for k in by_key if k not in seen_keys],
    )


def get_body(
    ids: Sequence[str], keys: Sequence[str], timeout_ms: int, *, vectors: bool = False
) -> dict[str, Any]:
    """The search of :func:`get_plan`: passages with ``ids`` (inner hits of a nested ``terms``
    on ``pid``), or every passage of the documents of ``keys``; with ``vectors``, each with
    its stored vector."""
    if ids:
        query = q.passages_query(
            {"terms": {PID_PATH: list(ids)}}, size=len(ids) + 1, vectors=vectors
        )
        size = len(ids)
    else:
        query = {
            "bool": {
                "filter": [
                    {"ids": {"values": [key_doc_id(k) for k in keys]}},
                    {"terms": {KEY: list(keys)}},
                    q.passages_query(
                        {"match_all": {}}, size=MAX_INNER, score_mode="none", vectors=vectors
                    ),
                ]
            }
        }
        size = len(keys)
    return {
        "query": query,
        "size": size,
        "_source": [KEY],
        "track_total_hits": False,
        "timeout": f"{timeout_ms}ms",
    }


MAX_INNER = MAX_WINDOW
"""Passages of one document a read asks for at most (a key's passages)."""


def scan_plan(
    cx: Context,
    index: str,
    es_index: str,
    filters: Any,
    after: str | None,
    limit: int,
    deadline: Deadline,
) -> Plan[Scanned | IndexTimeout | Failure]:
    """One page of passages in id order, after the cursor (a passage id): the documents
    holding the first passages above it (sorted on their smallest such ``pid``), with those
    passages as inner hits sorted on ``pid``; the first ``limit`` of them all are the page.
    One passage more than the page is asked for, to know whether more follow."""
    empty = Scanned(index=index, backend=cx.name, passages=[], next_after=None)
    meta = yield from meta_plan(cx, es_index, deadline)
    if meta is None:
        return empty
    size = min(limit + 1, MAX_WINDOW)
    clauses = q.filter_clauses(filters)
    if after is not None:
        clauses.append({"range": {PID_PATH: {"gt": after}}})
    nested_query: dict[str, Any] = {"bool": {"filter": clauses}} if clauses else {"match_all": {}}
    body: dict[str, Any] = {
        "query": q.passages_query(
            nested_query, size=size, score_mode="none", sort=[{PID_PATH: "asc"}]
        ),
        "sort": [
            {
                PID_PATH: {
                    "order": "asc",
                    "mode": "min",
                    "nested": {"path": "passages", "filter": nested_query},
                }
            }
        ],
        "size": size,
        "_source": False,
        "track_total_hits": False,
        "timeout": f"{cx.ms(deadline)}ms",
    }
    answers = yield from msearch_plan(cx, index, es_index, [body], deadline)
    if isinstance(answers, IndexEmpty):
        return empty
    if not isinstance(answers, list):
        return answers
    stored = sorted(
        (s for hit in answers[0]["hits"]["hits"] for s in inner_hits(hit)), key=lambda s: s.pid
    )
    # A document's inner hits are cut at ``size``: its passages past the cut sort after every
    # one returned, so the first ``size`` passages of all of them are exact.
    page = [record_of(s) for s in stored[:limit]]
    more = len(stored) > limit if size > limit else len(stored) == limit
    return Scanned(
        index=index,
        backend=cx.name,
        passages=page,
        next_after=page[-1].id if more and page else None,
    )


FLAT_COUNT: dict[str, Any] = {"size": 0, "track_total_hits": True}


def indexes_plan(cx: Context, deadline: Deadline) -> Plan[IndexList | IndexTimeout | Failure]:
    """The indexplug indexes under this backend's prefix (marked mappings only; another
    program's indices and names that are not index names are left out), with their counts."""
    prefix = cx.opts.prefix
    resp = yield Call(
        "indices.get_mapping",
        {
            "index": f"{prefix}*",
            "expand_wildcards": "open",
            "master_timeout": cx.server_timeout(deadline),
        },
    )
    names: dict[str, str] = {}
    flat: set[str] = set()
    for es_name, entry in sorted(resp.body.items()):
        if not es_name.startswith(prefix):
            continue
        name = es_name[len(prefix) :]
        if name.endswith(MIGRATED_SUFFIX):  # behind the alias ``name``
            name = name[: -len(MIGRATED_SUFFIX)]
            if prefix + name in resp.body:
                continue  # mid-migration: readers still read the old index
        try:
            validate_index_name(name)
            if IndexMeta.from_mapping(es_name, entry).flat:
                flat.add(es_name)
        except (ValueError, ForeignIndex):
            continue
        names[es_name] = name
    if not names:
        return IndexList(index="", backend=cx.name, indexes=[])
    ms = cx.ms(deadline)
    # a flat index (earlier versions) holds one document per passage: its hits are its count
    lines = [
        line
        for n in names
        for line in ({"index": n}, FLAT_COUNT if n in flat else q.count_body(ms))
    ]
    resp = yield Call("msearch", {"searches": q.encoded(lines)})
    out: list[IndexInfo] = []
    for (es_name, name), answer in zip(names.items(), resp["responses"], strict=True):
        if "error" in answer:
            if is_index_missing(answer):
                continue  # dropped since it was listed
            return classify(
                answer.get("status"),
                answer,
                index="",
                backend=cx.name,
                deadline=deadline,
                doing="counting passages",
            )
        count = answer["hits"]["total"]["value"] if es_name in flat else q.count_of(answer)
        out.append(IndexInfo(name=name, passages=int(count)))
    return IndexList(index="", backend=cx.name, indexes=out)
