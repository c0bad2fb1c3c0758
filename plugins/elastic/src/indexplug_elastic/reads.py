"""Reading: search, get, scan and the index list, each written once for both clients.

Each read is a *plan*: a generator that yields the requests it needs (:class:`Call`, a client
method and its arguments) and blocking work (:class:`Offload`: embedding a query, upgrading an
index of an older layout), is sent each answer back (or has the client's exception thrown into
it), and returns the outcome.  :func:`drive` runs a plan with the blocking client (every request
through :meth:`~indexplug_elastic.connection.Connection.bounded`), :func:`adrive` with the
official ``AsyncElasticsearch`` client on the running event loop, blocking work on a thread.
So ``search`` and ``asearch`` are the same code, request for request.

See :mod:`indexplug_elastic.search` for the request bodies and reciprocal rank fusion.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

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
)
from indexplug.protocols import Granularity

from indexplug_elastic import search as q
from indexplug_elastic.context import COUNTS, SHARD_ROWS, Context
from indexplug_elastic.documents import hits_from_response, hits_from_sources, record_of
from indexplug_elastic.failures import Failure, classify, is_index_missing
from indexplug_elastic.mapping import LAYOUT, PID, ForeignIndex, IndexMeta
from indexplug_elastic.upgrade import ensure_layout

T = TypeVar("T")

MGET_IDS = 1000
"""Ids per ``_mget`` request."""
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
    if cached is not None:
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
    return cx.read_meta(es_index, resp.body)


def layout_plan(cx: Context, es_index: str, meta: IndexMeta, deadline: Deadline) -> Plan[IndexMeta]:
    """``meta`` once the index has the current layout (upgraded on a thread if it has not)."""
    if meta.layout >= LAYOUT:
        return meta
    upgraded: IndexMeta = yield Offload(lambda: ensure_layout(cx, es_index, meta, deadline))
    return upgraded


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


def search_plan(
    cx: Context,
    index: str,
    es_index: str,
    query: str,
    top_k: int,
    filters: Any,
    deadline: Deadline,
) -> Plan[SearchOutcome]:
    scale = q.SCALES[cx.mode]
    meta = yield from meta_plan(cx, es_index, deadline)
    if meta is None:
        return IndexEmpty(index=index, backend=cx.name)
    if cx.opts.embedder:  # may load the model: blocking work, on a thread under asyncio
        known = meta
        problem = yield Offload(lambda: cx.embedder_problem(known, writing=False))
    else:
        problem = cx.embedder_problem(meta, writing=False)
    if problem:
        return cx.failed(index, problem, "EmbedderMismatch")
    if filters:
        meta = yield from layout_plan(cx, es_index, meta, deadline)
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
        vector = yield Offload(lambda: cx.embedder().embed_query(query, Granularity.TEXT))
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
    answers = yield Sub(
        lambda: _msearch(cx, index, es_index, bodies, deadline),
        lambda: msearch_plan(cx, index, es_index, bodies, deadline),
    )
    if not isinstance(answers, list):
        return answers  # type: ignore[no-any-return]
    if counting:
        count = int(answers.pop()["hits"]["total"]["value"])
        COUNTS.keep(key, generation, count)
        if count == 0:
            return IndexEmpty(index=index, backend=cx.name)
    else:
        assert kept is not None
        count = kept
    fused: list[q.Ranked] = []
    one_leg: list[Any] = []
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
            counts = [q.count_body(cx.ms(deadline))]
            fresh = yield Sub(
                lambda: _msearch(cx, index, es_index, counts, deadline),
                lambda: msearch_plan(cx, index, es_index, counts, deadline),
            )
            if not isinstance(fresh, list):
                return fresh  # type: ignore[no-any-return]
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
    """The stored passages with ``ids`` (``_mget``, in the order asked); every key is missing
    (this backend stores no caller keys)."""
    wanted = list(dict.fromkeys(ids))
    none = Got(index=index, backend=cx.name, missing_ids=wanted, missing_keys=list(keys))
    meta = yield from meta_plan(cx, es_index, deadline)
    if meta is None or not wanted:
        return none
    found: dict[str, Any] = {}
    for start in range(0, len(wanted), MGET_IDS):
        part = wanted[start : start + MGET_IDS]
        try:
            resp = yield Call("mget", {"index": es_index, "ids": part})
        except ApiError as exc:
            if is_index_missing(exc):
                cx.forget(es_index)
                return none
            raise
        for doc in resp["docs"]:
            if "error" in doc:
                if is_index_missing(doc["error"]):
                    cx.forget(es_index)
                    return none
                return classify(
                    int(doc.get("status") or 500),
                    doc["error"],
                    index=index,
                    backend=cx.name,
                    deadline=deadline,
                    doing="reading passages",
                )
            if doc.get("found"):
                found[doc["_id"]] = record_of(doc["_id"], doc.get("_source"))
    return Got(
        index=index,
        backend=cx.name,
        passages=[found[i] for i in wanted if i in found],
        missing_ids=[i for i in wanted if i not in found],
        missing_keys=list(keys),
    )


def scan_plan(
    cx: Context,
    index: str,
    es_index: str,
    filters: Any,
    after: str | None,
    limit: int,
    deadline: Deadline,
) -> Plan[Scanned | IndexTimeout | Failure]:
    """One page in id order: a search sorted on ``pid`` after the cursor (``search_after``),
    the filter as a bool filter; one document more than the page, to know whether more
    follow."""
    empty = Scanned(index=index, backend=cx.name, passages=[], next_after=None)
    meta = yield from meta_plan(cx, es_index, deadline)
    if meta is None:
        return empty
    meta = yield from layout_plan(cx, es_index, meta, deadline)
    size = min(limit + 1, MAX_WINDOW)
    clauses = q.filter_clauses(filters)
    body: dict[str, Any] = {
        "query": {"bool": {"filter": clauses}} if clauses else {"match_all": {}},
        "sort": [{PID: "asc"}],
        "size": size,
        "_source": q.SOURCE,
        "track_total_hits": False,
        "timeout": f"{cx.ms(deadline)}ms",
    }
    if after is not None:
        body["search_after"] = [after]
    answers = yield from msearch_plan(cx, index, es_index, [body], deadline)
    if isinstance(answers, IndexEmpty):
        return empty
    if not isinstance(answers, list):
        return answers
    hits = answers[0]["hits"]["hits"]
    page = [record_of(h["_id"], h.get("_source")) for h in hits[:limit]]
    more = len(hits) > limit if size > limit else len(hits) == limit
    return Scanned(
        index=index,
        backend=cx.name,
        passages=page,
        next_after=page[-1].id if more and page else None,
    )


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
    for es_name, entry in sorted(resp.body.items()):
        if not es_name.startswith(prefix):
            continue
        name = es_name[len(prefix) :]
        try:
            validate_index_name(name)
            IndexMeta.from_mapping(es_name, entry)
        except (ValueError, ForeignIndex):
            continue
        names[es_name] = name
    if not names:
        return IndexList(index="", backend=cx.name, indexes=[])
    ms = cx.ms(deadline)
    resp = yield Call(
        "msearch",
        {"searches": q.encoded([line for n in names for line in ({"index": n}, q.count_body(ms))])},
    )
    out: list[IndexInfo] = []
    for name, answer in zip(names.values(), resp["responses"], strict=True):
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
        out.append(IndexInfo(name=name, passages=int(answer["hits"]["total"]["value"])))
    return IndexList(index="", backend=cx.name, indexes=out)
