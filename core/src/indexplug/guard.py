"""The guard: the only way the core calls a backend.

Whatever a plugin does, the caller gets exactly one allowed outcome:

* a request that is wrong (a name that is a path, ``top_k`` of 0, an oversize batch) is refused
  with a typed :class:`~indexplug.errors.InvalidRequest` before the plugin is involved;
* a plugin that is not ready is not called: ``IndexUnavailable`` with its reason;
* a plugin that raises becomes ``IndexFailed`` naming the plugin and the error;
* a plugin that returns anything but an allowed outcome of the exact type (a bare list,
  ``None``, a subclass, an empty ``Searched``, fields of the wrong type) becomes
  ``IndexFailed`` with a contract-violation reason;
* every op runs on a worker thread, and the caller is released at its deadline: an answer
  that comes back after the deadline is ``IndexTimeout``, whatever it says;
* a backend's optional ``prepare()`` (loading a query model) runs once, before the deadline of
  the first search starts (bounded by :data:`PREPARE_S`), so a search's deadline is spent
  searching, not loading;
* every hit of every answer is checked (ranks 1..n, finite scores in order, the declared
  scale, at most ``top_k``, each passage matching its content-addressed id and its digest),
  and the caller gets copies the guard built from the checked values, so nothing the plugin
  keeps or changes afterwards can reach the caller.

The guard keeps one memory: the passages it has checked (:data:`CHECKED_PASSAGES`, by
digest).  A hit whose passage has exactly the fields of one it remembers gets that checked
passage without hashing again.  Only the guard fills it, from its own copies.
"""

from __future__ import annotations

import inspect
import math
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from pydantic import BaseModel, ValidationError

from indexplug.construct import construct
from indexplug.deadlines import Deadline
from indexplug.errors import InvalidQuery, InvalidRequest, NotSupported
from indexplug.filters import (
    And,
    Condition,
    Filter,
    Not,
    Or,
    equality_map,
    matches,
    operators,
    parse_filter,
    to_json,
)
from indexplug.home import folder_problem
from indexplug.names import validate_index_name
from indexplug.outcomes import (
    ALLOWED,
    AddOutcome,
    BadRequest,
    Explained,
    GetOutcome,
    Got,
    Hit,
    Indexed,
    IndexesOutcome,
    IndexFailed,
    IndexList,
    IndexStatus,
    IndexTimeout,
    IndexUnavailable,
    Neighbours,
    NoMatch,
    Removed,
    RemoveOutcome,
    Scanned,
    ScanOutcome,
    ScoreScale,
    Searched,
    SearchOutcome,
    StatusOutcome,
    VectorAddOutcome,
    VectorSearchOutcome,
    _Outcome,
)
from indexplug.passagecheck import _metadata_copy, _passage_fields, _same, _source_copy
from indexplug.passages import (
    Passage,
    passage_digest,
    passage_id,
)
from indexplug.pools import LazyPool, discard
from indexplug.protocols import EXTENSION_OPS, Embedder, IndexBackend, Readiness
from indexplug.vectorcheck import (
    checked_vector,
    checked_vectors,
    hit_vector,
    space_problem,
    stated_embedder,
)

MAX_TOP_K = 10_000
MAX_BATCH = 10_000
MAX_QUERY_CHARS = 100_000
MAX_REMOVE_IDS = 100_000
MAX_SCAN = 10_000
"""Largest page of a scan."""
MAX_WRITE = 1_000_000
"""Most passages in one ``add`` (sent to the plugin in batches of :data:`WRITE_BATCH`)."""
WRITE_BATCH = 256
"""Passages per plugin call of a large write: the unit of progress and of what a failed
write keeps."""
WRITE_DEADLINE_S = 86_400.0
"""The deadline of a write given none: a day, a backstop for a call that never returns, not a
limit any real write meets (writes in Python have no deadline by default)."""
_WRITES = frozenset({"drop", "optimize", "rebuild", "migrate"})
SETTLE_S = 0.02
"""How long past the deadline the caller waits for the guard's own checks of an answer the
plugin gave *before* the deadline (an answer given after it is ``IndexTimeout`` anyway)."""
CHECKED_PASSAGES = 16_384
"""How many checked passages the guard remembers (then it forgets the oldest)."""
READY_TTL_S = 1.0
PREPARE_S = 120.0
"""Longest the guard waits for a backend's ``prepare()`` before the first search; past it the
search starts anyway, under its own deadline (and the load goes on in its pool thread)."""
"""A *ready* answer is trusted this long; a not-ready one is asked again on every call."""

POOL_WORKERS = 32
"""Threads of each backend's pool."""
_POOLS: dict[str, LazyPool] = {}
_POOLS_LOCK = threading.Lock()


def _pool(plugin: str) -> LazyPool:
    """Where every call of backend ``plugin`` runs (abandoned at its deadline): one pool per
    backend, so a backend whose calls never return fills only its own threads, and another
    backend's callers never wait behind them for a thread and time out for it."""
    with _POOLS_LOCK:
        pool = _POOLS.get(plugin)
        if pool is None:
            pool = _POOLS[plugin] = LazyPool(POOL_WORKERS, f"indexplug-{plugin}")
        return pool


FILTER_TYPES = (Condition, And, Or, Not)


class _Refused(Exception):
    """A hit the guard will not serve; ``outcome`` says why."""

    def __init__(self, outcome: IndexFailed) -> None:
        self.outcome = outcome


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = text[:300]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class Guard:
    """Wraps one backend instance and enforces the contract on every call.

    Use it exactly like the backend: ``guard.search("docs", "query", top_k=5)``.  Deadlines are
    given in seconds (``deadline_s``); the guard turns them into an absolute
    :class:`~indexplug.deadlines.Deadline` the plugin can plan with.
    """

    def __init__(self, backend: IndexBackend, *, plugin: str | None = None) -> None:
        self.backend = backend
        self.plugin = plugin or getattr(backend, "name", type(backend).__name__)
        self._pool = _pool(str(self.plugin))
        self._ready_until = 0.0
        self._ready_lock = threading.Lock()
        self._checked: dict[str, Passage] = {}
        """Passages this guard checked and built, by digest (see :meth:`_passage`)."""
        self._checked_lock = threading.Lock()
        self.embedder: Embedder | None = None
        """The embedder object the caller gave when opening the backend
        (``open_backend(..., embedder=...)``), else None (the backend builds its own, if any,
        from its settings)."""
        self._prepared = False
        self._prepare_lock = threading.Lock()

    # -- what the backend declares -------------------------------------------------------
    @property
    def name(self) -> str:
        return str(getattr(self.backend, "name", self.plugin))

    @property
    def score_scale(self) -> Any:
        return self.backend.score_scale

    @property
    def capabilities(self) -> Any:
        return self.backend.capabilities

    def readiness(self) -> Readiness:
        """The plugin's own readiness, with a raising or lying plugin reported as not ready."""
        try:
            r = self.backend.readiness()
        except Exception as exc:
            return Readiness.no(f"readiness check raised {_describe(exc)}")
        if not isinstance(r, Readiness):
            return Readiness.no(f"readiness() returned {type(r).__name__}, not Readiness")
        if not r.ready and not r.reason:
            return Readiness.no("not ready (the backend gave no reason)")
        home = getattr(self.backend, "home", None)
        if r.ready and isinstance(home, Path):
            problem = folder_problem(home)
            if problem is not None:
                return Readiness.no(problem)
        return r

    def prepare(self) -> None:
        """Run the backend's optional ``prepare()`` (e.g. load the model that embeds queries),
        once per guard, outside any op's deadline.

        Why: loading a model takes from a fraction of a second to many seconds on a loaded
        machine, and charging it to the first search's deadline turned plain first searches
        into ``INDEX_TIMEOUT``.  The backend says on a terminal that it is loading.  The wait is
        bounded by :data:`PREPARE_S`; an error is left for the op, which reports it.
        """
        if self._prepared:
            return
        with self._prepare_lock:
            if self._prepared:
                return
            self._prepared = True
            fn = getattr(self.backend, "prepare", None)
            if not callable(fn):
                return
            future: Future[Any] = self._pool.get().submit(fn)
            try:
                future.result(timeout=PREPARE_S)
            except TimeoutError:
                future.add_done_callback(discard)
            except Exception:
                pass  # the op that needs what failed to load says why

    def close(self) -> None:
        closer = getattr(self.backend, "close", None)
        if callable(closer):
            try:
                closer()
            except Exception:
                pass

    # -- ops -----------------------------------------------------------------------------
    # Each op is planned once (its arguments checked, the plugin call and the check of its
    # answer bound) and run either blocking (``search``) or as a coroutine (``asearch``):
    # the two forms answer the same outcomes under the same deadline.

    def add(
        self,
        index: str,
        passages: Sequence[Passage],
        *,
        max_bytes: int | None = None,
        deadline_s: float | None = None,
        progress: Progress | None = None,
    ) -> AddOutcome:
        """Store ``passages`` (a passage already stored is *known*, never duplicated).

        Writes have no deadline unless one is given (:data:`WRITE_DEADLINE_S` is only a
        backstop for a call that never returns): embedding thousands of passages on a CPU
        takes minutes.  Large writes go to the plugin in batches of :data:`WRITE_BATCH`
        (never splitting one caller key's passages); ``progress(done, total)`` is called after
        each.  A write that fails or hits its deadline keeps the batches that were stored and
        says how many (``committed``); repeating the same call completes the rest.
        """
        plan = self._plan_add(index, passages, max_bytes, deadline_s, progress)
        done: list[Any] = []
        for chunk in plan.chunks:
            out = self._run(self._add_call(index, chunk, max_bytes, plan.deadline))
            done.append(out)
            if not isinstance(out, Indexed):
                break
            if progress is not None:
                progress(sum(len(c) for c in plan.chunks[: len(done)]), plan.total)
        return cast(AddOutcome, self._merged_add(index, plan, done))

    async def aadd(
        self,
        index: str,
        passages: Sequence[Passage],
        *,
        max_bytes: int | None = None,
        deadline_s: float | None = None,
        progress: Progress | None = None,
    ) -> AddOutcome:
        """:meth:`add` as a coroutine (the write is checked and batched on a worker thread:
        up to :data:`MAX_WRITE` passages are work the event loop must not wait on)."""
        import asyncio  # here, not at the top: the CLI's start-up never needs it

        plan = await asyncio.to_thread(
            self._plan_add, index, passages, max_bytes, deadline_s, progress
        )
        done: list[Any] = []
        for chunk in plan.chunks:
            out = await self._arun(self._add_call(index, chunk, max_bytes, plan.deadline))
            done.append(out)
            if not isinstance(out, Indexed):
                break
            if progress is not None:
                progress(sum(len(c) for c in plan.chunks[: len(done)]), plan.total)
        return cast(AddOutcome, self._merged_add(index, plan, done))

    def search(
        self,
        index: str,
        query: str,
        *,
        top_k: int = 10,
        deadline_s: float | None = None,
        filters: Mapping[str, Any] | Filter | None = None,
    ) -> SearchOutcome:
        """The ``top_k`` best passages for ``query`` (``filters``: :mod:`indexplug.filters`).

        The first search of a guard first lets the backend :meth:`prepare`; its deadline
        starts after that."""
        self.prepare()
        return cast(
            SearchOutcome, self._run(self._plan_search(index, query, top_k, deadline_s, filters))
        )

    async def asearch(
        self,
        index: str,
        query: str,
        *,
        top_k: int = 10,
        deadline_s: float | None = None,
        filters: Mapping[str, Any] | Filter | None = None,
    ) -> SearchOutcome:
        """:meth:`search` as a coroutine."""
        if not self._prepared:
            import asyncio

            await asyncio.to_thread(self.prepare)
        plan = self._plan_search(index, query, top_k, deadline_s, filters)
        return cast(SearchOutcome, await self._arun(plan))

    def remove(
        self,
        index: str,
        ids: Sequence[str] = (),
        *,
        keys: Sequence[str] = (),
        filters: Mapping[str, Any] | Filter | None = None,
        deadline_s: float | None = None,
    ) -> RemoveOutcome:
        """Remove passages by id, by caller key (every passage of each key) or by filter
        (every passage that passes it; needs ``scan``).  Keys and filters are resolved to ids
        first, under the same deadline; ``missing_keys`` lists keys no passage had."""
        deadline = Deadline.after(_write_deadline(deadline_s))
        targets, missing_keys = self._remove_targets(index, ids, keys, filters, deadline)
        if isinstance(targets, _Outcome):
            return cast(RemoveOutcome, targets)
        out = self._run(self._remove_call(index, targets, deadline))
        return cast(RemoveOutcome, _with_missing_keys(out, missing_keys))

    async def aremove(
        self,
        index: str,
        ids: Sequence[str] = (),
        *,
        keys: Sequence[str] = (),
        filters: Mapping[str, Any] | Filter | None = None,
        deadline_s: float | None = None,
    ) -> RemoveOutcome:
        """:meth:`remove` as a coroutine."""
        deadline = Deadline.after(_write_deadline(deadline_s))
        import asyncio  # here, not at the top: the CLI's start-up never needs it

        targets = await asyncio.to_thread(self._remove_targets, index, ids, keys, filters, deadline)
        found, missing_keys = targets
        if isinstance(found, _Outcome):
            return cast(RemoveOutcome, found)
        out = await self._arun(self._remove_call(index, found, deadline))
        return cast(RemoveOutcome, _with_missing_keys(out, missing_keys))

    def status(self, index: str, *, deadline_s: float | None = None) -> StatusOutcome:
        return cast(StatusOutcome, self._run(self._plan_status(index, deadline_s)))

    async def astatus(self, index: str, *, deadline_s: float | None = None) -> StatusOutcome:
        """:meth:`status` as a coroutine."""
        return cast(StatusOutcome, await self._arun(self._plan_status(index, deadline_s)))

    def get(
        self,
        index: str,
        ids: Sequence[str] = (),
        *,
        keys: Sequence[str] = (),
        deadline_s: float | None = None,
    ) -> GetOutcome:
        """The stored passages with these ids, and every passage of these caller keys (needs
        ``Capabilities.get``, and ``keys`` for keys); what is not there is listed as missing."""
        return cast(GetOutcome, self._run(self._plan_get(index, ids, keys, deadline_s)))

    async def aget(
        self,
        index: str,
        ids: Sequence[str] = (),
        *,
        keys: Sequence[str] = (),
        deadline_s: float | None = None,
    ) -> GetOutcome:
        """:meth:`get` as a coroutine."""
        return cast(GetOutcome, await self._arun(self._plan_get(index, ids, keys, deadline_s)))

    def scan(
        self,
        index: str,
        *,
        filters: Mapping[str, Any] | Filter | None = None,
        after: str | None = None,
        limit: int = 100,
        deadline_s: float | None = None,
    ) -> ScanOutcome:
        """One page (at most ``limit``) of the index's passages in id order, after the cursor
        ``after`` (``Scanned.next_after`` of the previous page); needs ``Capabilities.scan``.
        :meth:`scan_all` walks every page."""
        return cast(
            ScanOutcome, self._run(self._plan_scan(index, filters, after, limit, deadline_s))
        )

    async def ascan(
        self,
        index: str,
        *,
        filters: Mapping[str, Any] | Filter | None = None,
        after: str | None = None,
        limit: int = 100,
        deadline_s: float | None = None,
    ) -> ScanOutcome:
        """:meth:`scan` as a coroutine."""
        plan = self._plan_scan(index, filters, after, limit, deadline_s)
        return cast(ScanOutcome, await self._arun(plan))

    def scan_all(
        self,
        index: str,
        *,
        filters: Mapping[str, Any] | Filter | None = None,
        after: str | None = None,
        page: int = 500,
        deadline_s: float | None = None,
    ) -> Iterator[Scanned | IndexFailed | IndexTimeout | IndexUnavailable]:
        """Every page of :meth:`scan`, in order; a failure is yielded as the last item (so a
        caller always learns whether it saw everything).  ``deadline_s`` is per page."""
        cursor = after
        while True:
            out = self.scan(index, filters=filters, after=cursor, limit=page, deadline_s=deadline_s)
            yield out
            if not isinstance(out, Scanned) or out.next_after is None:
                return
            cursor = out.next_after

    async def ascan_all(
        self,
        index: str,
        *,
        filters: Mapping[str, Any] | Filter | None = None,
        after: str | None = None,
        page: int = 500,
        deadline_s: float | None = None,
    ) -> AsyncIterator[Scanned | IndexFailed | IndexTimeout | IndexUnavailable]:
        """:meth:`scan_all` as an async iterator: every page of :meth:`ascan`, in order, a
        failure yielded as the last item."""
        cursor = after
        while True:
            out = await self.ascan(
                index, filters=filters, after=cursor, limit=page, deadline_s=deadline_s
            )
            yield out
            if not isinstance(out, Scanned) or out.next_after is None:
                return
            cursor = out.next_after

    def indexes(self, *, deadline_s: float | None = None) -> IndexesOutcome:
        """The named indexes the backend holds, by name, with their passage counts (needs
        ``Capabilities.indexes``)."""
        return cast(IndexesOutcome, self._run(self._plan_indexes(deadline_s)))

    async def aindexes(self, *, deadline_s: float | None = None) -> IndexesOutcome:
        """:meth:`indexes` as a coroutine."""
        return cast(IndexesOutcome, await self._arun(self._plan_indexes(deadline_s)))

    def drop(self, index: str, *, deadline_s: float | None = None) -> StatusOutcome:
        """Delete a whole index (the backend's ``op_drop``; sensitive: the CLI, invoke and MCP
        gate it as they gate remove).  Answers ``IndexStatus`` with ``exists=False``."""
        return cast(StatusOutcome, self._run(self._plan_extra("drop", index, deadline_s, {})))

    async def adrop(self, index: str, *, deadline_s: float | None = None) -> StatusOutcome:
        """:meth:`drop` as a coroutine."""
        plan = self._plan_extra("drop", index, deadline_s, {})
        return cast(StatusOutcome, await self._arun(plan))

    # -- the vector interface (Capabilities.vectors) -------------------------------------------
    def add_vectors(
        self,
        index: str,
        passages: Sequence[Passage],
        vectors: Sequence[Any],
        *,
        embedder: str | Embedder | None = None,
        max_bytes: int | None = None,
        deadline_s: float | None = None,
        progress: Progress | None = None,
    ) -> VectorAddOutcome:
        """Store ``passages`` with ``vectors[i]`` as passage ``i``'s vector (needs
        ``Capabilities.vectors``): the caller's own embeddings, used as they are (normalised),
        not embedded again.  ``embedder``: the name of the model they are of (or the embedder
        itself); left out, the index's own is assumed.  A vector that is ragged, empty, all
        zeros, NaN or infinite is refused (:class:`InvalidRequest`); one of another length or
        another embedder than the index's is ``BAD_REQUEST`` (:class:`BadRequest`).  Batched,
        deduplicated and answered as :meth:`add` (the first of two equal passages keeps its
        vector)."""
        plan, by_id, stated = self._plan_add_vectors(
            index, passages, vectors, embedder, max_bytes, deadline_s, progress
        )
        done: list[Any] = []
        for chunk in plan.chunks:
            call = self._add_vectors_call(index, chunk, by_id, stated, max_bytes, plan.deadline)
            out = self._run(call)
            done.append(out)
            if not isinstance(out, Indexed):
                break
            if progress is not None:
                progress(sum(len(c) for c in plan.chunks[: len(done)]), plan.total)
        return cast(VectorAddOutcome, self._merged_vector_add(index, plan, done, by_id, stated))

    async def aadd_vectors(
        self,
        index: str,
        passages: Sequence[Passage],
        vectors: Sequence[Any],
        *,
        embedder: str | Embedder | None = None,
        max_bytes: int | None = None,
        deadline_s: float | None = None,
        progress: Progress | None = None,
    ) -> VectorAddOutcome:
        """:meth:`add_vectors` as a coroutine."""
        import asyncio

        plan, by_id, stated = await asyncio.to_thread(
            self._plan_add_vectors,
            index,
            passages,
            vectors,
            embedder,
            max_bytes,
            deadline_s,
            progress,
        )
        done: list[Any] = []
        for chunk in plan.chunks:
            call = self._add_vectors_call(index, chunk, by_id, stated, max_bytes, plan.deadline)
            out = await self._arun(call)
            done.append(out)
            if not isinstance(out, Indexed):
                break
            if progress is not None:
                progress(sum(len(c) for c in plan.chunks[: len(done)]), plan.total)
        if not done:  # an empty write: asked of the plugin, for its own answer
            empty = self._add_vectors_call(index, [], by_id, stated, None, plan.deadline)
            return cast(VectorAddOutcome, await self._arun(empty))
        return cast(VectorAddOutcome, self._merged_add(index, plan, done))

    def search_vector(
        self,
        index: str,
        vector: Sequence[float] | Any,
        *,
        top_k: int = 10,
        embedder: str | Embedder | None = None,
        with_vectors: bool = False,
        deadline_s: float | None = None,
        filters: Mapping[str, Any] | Filter | None = None,
    ) -> VectorSearchOutcome:
        """The ``top_k`` passages nearest ``vector`` (needs ``Capabilities.vectors``), on the
        backend's score scale; ``embedder`` as for :meth:`add_vectors`.  With
        ``with_vectors``, each hit carries its stored vector (:attr:`Hit.vector`, checked: the
        index's dimension, finite), e.g. for maximal marginal relevance."""
        self.prepare()
        plan = self._plan_search_vector(
            index, vector, top_k, embedder, with_vectors, deadline_s, filters
        )
        return cast(VectorSearchOutcome, self._run(plan))

    async def asearch_vector(
        self,
        index: str,
        vector: Sequence[float] | Any,
        *,
        top_k: int = 10,
        embedder: str | Embedder | None = None,
        with_vectors: bool = False,
        deadline_s: float | None = None,
        filters: Mapping[str, Any] | Filter | None = None,
    ) -> VectorSearchOutcome:
        """:meth:`search_vector` as a coroutine."""
        if not self._prepared:
            import asyncio

            await asyncio.to_thread(self.prepare)
        plan = self._plan_search_vector(
            index, vector, top_k, embedder, with_vectors, deadline_s, filters
        )
        return cast(VectorSearchOutcome, await self._arun(plan))

    def query_vector(self, text: str) -> Any:
        """The query vector the backend would search ``text`` by (needs
        ``Capabilities.vectors``), checked and copied: the start of a search by vector that
        the caller reranks, e.g. by maximal marginal relevance.  An embedder that fails
        raises its error, one that answers no usable vector :class:`InvalidRequest`."""
        self._claim_vectors("embed a query")
        if not isinstance(text, str) or not text.strip() or "\x00" in text:
            raise InvalidQuery("a query must be non-empty text without NUL")
        if len(text) > MAX_QUERY_CHARS:
            raise InvalidQuery(f"the query is longer than {MAX_QUERY_CHARS} characters")
        raw = self.backend.query_vector(text)  # type: ignore[attr-defined]
        try:
            return checked_vector(raw, "query")
        except InvalidRequest as exc:
            raise InvalidQuery(
                f"the backend's embedder gave no usable query vector: {exc}"
            ) from None

    def vector_space(self) -> tuple[str, int]:
        """The name and dimension of the embedder whose vectors the backend stores (needs
        ``Capabilities.vectors``): what a caller's vectors must be of."""
        self._claim_vectors("report its vector space")
        try:
            space = self.backend.vector_space()  # type: ignore[attr-defined]
            space_problem(space, None, None)
        except Exception as exc:
            raise InvalidRequest(
                f"backend '{self.name}' cannot say its vector space: {_describe(exc)}",
                field="op",
            ) from None
        return str(space[0]), int(space[1])

    def call_extra(
        self, op: str, index: str, deadline_s: float | None = None, **kwargs: Any
    ) -> Any:
        """Run an extension op (``drop``, ``optimize``, ``rebuild``, ``rerank``, ``explain``,
        ``neighbours``: :data:`indexplug.protocols.EXTENSION_OPS`) under the same readiness,
        exception and deadline rules as any op.  Its arguments are checked before the plugin
        is called, and its answer like any other: one of the outcomes
        :data:`~indexplug.outcomes.ALLOWED` for it, every passage in it checked and copied
        (and a rerank's hits only passages the caller gave)."""
        return self._run(self._plan_extra(op, index, deadline_s, kwargs))

    async def acall_extra(
        self, op: str, index: str, deadline_s: float | None = None, **kwargs: Any
    ) -> Any:
        """:meth:`call_extra` as a coroutine."""
        return await self._arun(self._plan_extra(op, index, deadline_s, kwargs))

    # -- plans: each op's arguments checked, its plugin call and answer check bound ----------

    def _native(self, op: str) -> Callable[..., Any] | None:
        """The backend's own coroutine form of ``op`` (``a<op>``), if it has one."""
        fn = getattr(self.backend, f"a{op}", None)
        return fn if fn is not None and inspect.iscoroutinefunction(fn) else None

    def _plan_add(
        self,
        index: str,
        passages: Sequence[Passage],
        max_bytes: int | None,
        deadline_s: float | None,
        progress: Progress | None = None,
    ) -> _AddPlan:
        validate_index_name(index)
        if progress is not None and not callable(progress):
            # refused now: found out after the first batch, the write would stop half done
            raise InvalidRequest(
                "progress must be a callable progress(done, total)", field="progress"
            )
        if isinstance(passages, (str, bytes)) or not isinstance(passages, Sequence):
            raise InvalidRequest("passages must be a list of Passage", field="passages")
        if len(passages) > MAX_WRITE:
            raise InvalidRequest(
                f"a write of {len(passages)} passages is over the limit of {MAX_WRITE}; "
                "split it into smaller writes",
                field="passages",
            )
        if max_bytes is not None and (
            isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0
        ):
            raise InvalidRequest("max_bytes must be a positive integer", field="max_bytes")
        unique: dict[str, Passage] = {}
        keyed = False
        for p in passages:
            if type(p) is not Passage:
                raise InvalidRequest(
                    f"passages must be Passage objects, got {type(p).__name__}", field="passages"
                )
            keyed = keyed or p.key is not None
            unique.setdefault(p.id, p)
        if keyed and not getattr(self.backend.capabilities, "keys", False):
            raise InvalidRequest(
                f"backend '{self.name}' does not support caller keys (passages with a key)",
                field="passages",
            )
        batch = list(unique.values())
        deadline = Deadline.after(_write_deadline(deadline_s))
        return _AddPlan(
            deadline=deadline,
            chunks=_chunks(batch, WRITE_BATCH),
            total=len(batch),
            dupes=len(passages) - len(batch),
        )

    def _add_call(
        self, index: str, chunk: list[Passage], max_bytes: int | None, deadline: Deadline
    ) -> _Plan:
        def check(out: Any) -> Any:
            if isinstance(out, Indexed) and out.added + out.known != len(chunk):
                return self._violation(
                    index,
                    f"reported {out.added} added + {out.known} known for "
                    f"{len(chunk)} distinct passages",
                )
            return out

        native = self._native("add")
        return _Plan(
            "add",
            index,
            deadline,
            lambda: self.backend.add(index, chunk, max_bytes=max_bytes, deadline=deadline),
            check,
            (lambda: native(index, chunk, max_bytes=max_bytes, deadline=deadline))
            if native
            else None,
        )

    def _merged_add(self, index: str, plan: _AddPlan, outs: list[Any]) -> Any:
        """One answer for a write sent in batches: the batches' ``Indexed`` summed, or the
        first failure with how many passages the batches before it stored."""
        if not outs:  # an empty write: asked of the plugin as before, for its own answer
            return self._run(self._add_call(index, [], None, plan.deadline))
        good = [o for o in outs if isinstance(o, Indexed)]
        last = outs[-1]
        if not isinstance(last, Indexed):
            if len(plan.chunks) == 1 or not hasattr(last, "committed"):
                return last  # one batch: the backend's own answer, as it gave it
            stored = sum(o.added + o.known for o in good)
            # what the failing batch itself says it stored, when that is a count of it
            own = last.committed
            if type(own) is int and 0 <= own <= len(plan.chunks[len(outs) - 1]):
                stored += own
            return last.model_copy(update={"committed": stored})
        if len(good) == 1:
            merged = good[0]
        else:
            merged = good[-1].model_copy(
                update={
                    "added": sum(o.added for o in good),
                    "known": sum(o.known for o in good),
                    "added_ids": [i for o in good for i in o.added_ids],
                    "known_ids": [i for o in good for i in o.known_ids],
                    "replaced": sum(o.replaced for o in good),
                }
            )
        if plan.dupes:
            merged = merged.model_copy(update={"known": merged.known + plan.dupes})
        return merged

    def _plan_search(
        self,
        index: str,
        query: str,
        top_k: int,
        deadline_s: float | None,
        filters: Mapping[str, Any] | Filter | None,
    ) -> _Plan:
        validate_index_name(index)
        if not isinstance(query, str):
            raise InvalidQuery(f"a query must be text, not {type(query).__name__}")
        if not query.strip():
            raise InvalidQuery("the query is empty")
        if "\x00" in query:
            raise InvalidQuery("the query contains a NUL character")
        if len(query) > MAX_QUERY_CHARS:
            raise InvalidQuery(f"the query is longer than {MAX_QUERY_CHARS} characters")
        if not any(ch.isalnum() for ch in query):  # "?!", "--": nothing any backend can search
            raise InvalidQuery("the query has no word to search (no letter or digit)")
        _check_count("top_k", top_k, 1, MAX_TOP_K)
        parsed, given = self._filters(filters)
        deadline = Deadline.after(deadline_s)
        started = time.perf_counter()

        def check(out: Any) -> Any:
            elapsed = round((time.perf_counter() - started) * 1000, 3)
            if type(out) is Searched:
                answer = self._checked_search(out, top_k, deadline.seconds, elapsed)
                if parsed is not None and type(answer) is Searched:
                    for hit in answer.hits:
                        if not matches(parsed, hit.passage.metadata):
                            return self._violation(
                                index,
                                f"hit {hit.rank} does not pass the filter it was asked for",
                            )
                return answer
            if type(out) is NoMatch:
                return _stamped(out, deadline_s=deadline.seconds, elapsed_ms=elapsed)
            return out

        native = self._native("search")
        return _Plan(
            "search",
            index,
            deadline,
            lambda: self.backend.search(
                index, query, top_k=top_k, deadline=deadline, filters=given
            ),
            check,
            (lambda: native(index, query, top_k=top_k, deadline=deadline, filters=given))
            if native
            else None,
        )

    def _filters(self, filters: Mapping[str, Any] | Filter | None) -> tuple[Filter | None, Any]:
        """``filters`` parsed, and what the plugin is given: the :data:`Filter` for a backend
        that claims the operators it uses, a ``{key: value}`` map of equalities for one that
        claims only ``filters``; anything it cannot serve is refused (BAD_REQUEST), never
        ignored."""
        if filters is not None and not isinstance(filters, (Mapping, *FILTER_TYPES)):
            raise InvalidRequest("filters must be a JSON object", field="filters")
        parsed = parse_filter(filters)
        if parsed is None:
            return None, None
        caps = self.backend.capabilities
        served = frozenset(getattr(caps, "filter_operators", frozenset()) or ())
        used = operators(parsed)
        if served:
            missing = used - served
            if missing:
                raise InvalidRequest(
                    f"backend '{self.name}' cannot serve the filter operator(s) "
                    f"{', '.join(sorted(missing))}",
                    field="filters",
                )
            # the plugin gets its own copy: the one the guard checks answers against is never
            # in a plugin's hands (frozen, but object.__setattr__ gets past that)
            return parsed, parse_filter(to_json(parsed))
        if not getattr(caps, "filters", False):
            raise InvalidRequest(
                f"backend '{self.name}' does not support metadata filters", field="filters"
            )
        equal = equality_map(parsed)
        if equal is None:
            raise InvalidRequest(
                f"backend '{self.name}' serves equality filters only (no operators, lists or null)",
                field="filters",
            )
        return parsed, equal

    def _remove_targets(
        self,
        index: str,
        ids: Sequence[str],
        keys: Sequence[str],
        filters: Mapping[str, Any] | Filter | None,
        deadline: Deadline,
    ) -> tuple[Any, list[str]]:
        """The distinct ids a remove is for (those given, those of ``keys``, those passing
        ``filters``) and the keys no passage had; or the failure that stopped resolving them."""
        validate_index_name(index)
        wanted = _strings("ids", ids, MAX_REMOVE_IDS)
        keys = _strings("keys", keys, MAX_REMOVE_IDS)
        missing_keys: list[str] = []
        if keys:
            if not getattr(self.backend.capabilities, "keys", False):
                raise InvalidRequest(
                    f"backend '{self.name}' does not support caller keys", field="keys"
                )
            got = self._run(self._plan_get(index, (), keys, None, deadline))
            if not isinstance(got, Got):
                return got, []
            wanted += [p.id for p in got.passages]
            missing_keys = list(got.missing_keys)
            _check_remove_count(len(wanted), "keys")
        if filters is not None:
            parsed = parse_filter(filters)
            if parsed is not None:
                cursor: str | None = None
                while True:
                    page = self._run(
                        self._plan_scan(index, parsed, cursor, MAX_SCAN, None, deadline)
                    )
                    if not isinstance(page, Scanned):
                        return page, []
                    wanted += [p.id for p in page.passages]
                    _check_remove_count(len(wanted), "filters")
                    if page.next_after is None:
                        break
                    cursor = page.next_after
        return list(dict.fromkeys(wanted)), missing_keys

    def _remove_call(self, index: str, distinct: list[str], deadline: Deadline) -> _Plan:
        def check(out: Any) -> Any:
            if isinstance(out, Removed) and out.removed + len(out.missing_ids) != len(distinct):
                return self._violation(
                    index,
                    f"reported {out.removed} removed + {len(out.missing_ids)} missing "
                    f"for {len(distinct)} ids",
                )
            return out

        native = self._native("remove")
        return _Plan(
            "remove",
            index,
            deadline,
            lambda: self.backend.remove(index, distinct, deadline=deadline),
            check,
            (lambda: native(index, distinct, deadline=deadline)) if native else None,
        )

    def _claim_vectors(self, op: str) -> None:
        if not getattr(self.backend.capabilities, "vectors", False) or not all(
            callable(getattr(self.backend, m, None))
            for m in ("vector_space", "query_vector", "add_vectors", "search_vector")
        ):
            raise NotSupported(self.name, "vectors", op)

    def _plan_add_vectors(
        self,
        index: str,
        passages: Sequence[Passage],
        vectors: Sequence[Any],
        embedder: str | Embedder | None,
        max_bytes: int | None,
        deadline_s: float | None,
        progress: Progress | None,
    ) -> tuple[_AddPlan, dict[str, Any], str | None]:
        validate_index_name(index)
        self._claim_vectors("add passages with vectors")
        stated = stated_embedder(embedder)
        plan = self._plan_add(index, passages, max_bytes, deadline_s, progress)
        checked = checked_vectors(vectors, len(passages))
        by_id: dict[str, Any] = {}
        for p, v in zip(passages, checked, strict=True):
            by_id.setdefault(p.id, v)
        return plan, by_id, stated

    def _vector_plan(
        self,
        op: str,
        index: str,
        deadline: Deadline,
        dim: int | None,
        stated: str | None,
        call: Callable[[str], Any],
        check: Callable[[Any], Any],
    ) -> _Plan:
        """A vector op's plan: on the worker thread, under the deadline, the backend's vector
        space is read and the vectors' length and stated embedder checked against it (a
        ``BadRequest`` when they differ), then ``call(embedder_name)`` asks the backend."""

        def fn() -> Any:
            field, said = space_problem(self.backend.vector_space(), dim, stated)  # type: ignore[attr-defined]
            if field is not None:
                return BadRequest(index=index, backend=self.plugin, field=field, reason=said)
            return call(said)

        return _Plan(op, index, deadline, fn, check)

    def _add_vectors_call(
        self,
        index: str,
        chunk: list[Passage],
        by_id: dict[str, Any],
        stated: str | None,
        max_bytes: int | None,
        deadline: Deadline,
    ) -> _Plan:
        check = self._add_call(index, chunk, max_bytes, deadline).check
        # the backend gets copies: nothing it does to an array reaches the next batch's
        vecs = [by_id[p.id].copy() for p in chunk]
        dim = int(vecs[0].shape[0]) if vecs else None
        return self._vector_plan(
            "add_vectors",
            index,
            deadline,
            dim,
            stated,
            lambda name: self.backend.add_vectors(  # type: ignore[attr-defined]
                index, chunk, vecs, embedder=name, max_bytes=max_bytes, deadline=deadline
            ),
            check,
        )

    def _merged_vector_add(
        self,
        index: str,
        plan: _AddPlan,
        outs: list[Any],
        by_id: dict[str, Any],
        stated: str | None,
    ) -> Any:
        if not outs:  # an empty write: asked of the plugin, for its own answer
            call = self._add_vectors_call(index, [], by_id, stated, None, plan.deadline)
            return self._run(call)
        return self._merged_add(index, plan, outs)

    def _plan_search_vector(
        self,
        index: str,
        vector: Any,
        top_k: int,
        embedder: str | Embedder | None,
        with_vectors: bool,
        deadline_s: float | None,
        filters: Mapping[str, Any] | Filter | None,
    ) -> _Plan:
        validate_index_name(index)
        self._claim_vectors("search by vector")
        if type(with_vectors) is not bool:
            raise InvalidRequest("with_vectors must be true or false", field="with_vectors")
        stated = stated_embedder(embedder)
        query = checked_vector(vector, "vector")
        dim = int(query.shape[0])
        _check_count("top_k", top_k, 1, MAX_TOP_K)
        parsed, given = self._filters(filters)
        deadline = Deadline.after(deadline_s)
        started = time.perf_counter()

        def check(out: Any) -> Any:
            elapsed = round((time.perf_counter() - started) * 1000, 3)
            if type(out) is Searched:
                answer = self._checked_search(
                    out, top_k, deadline.seconds, elapsed, dim if with_vectors else None
                )
                if parsed is not None and type(answer) is Searched:
                    for hit in answer.hits:
                        if not matches(parsed, hit.passage.metadata):
                            return self._violation(
                                index,
                                f"hit {hit.rank} does not pass the filter it was asked for",
                            )
                return answer
            if type(out) is NoMatch:
                return _stamped(out, deadline_s=deadline.seconds, elapsed_ms=elapsed)
            return out

        return self._vector_plan(
            "search_vector",
            index,
            deadline,
            dim,
            stated,
            lambda name: self.backend.search_vector(  # type: ignore[attr-defined]
                index,
                query.copy(),
                top_k=top_k,
                embedder=name,
                with_vectors=with_vectors,
                deadline=deadline,
                filters=given,
            ),
            check,
        )

    def _plan_status(self, index: str, deadline_s: float | None) -> _Plan:
        validate_index_name(index)
        deadline = Deadline.after(deadline_s)
        native = self._native("status")
        return _Plan(
            "status",
            index,
            deadline,
            lambda: self.backend.status(index, deadline=deadline),
            lambda out: out,
            (lambda: native(index, deadline=deadline)) if native else None,
        )

    def _claim(self, capability: str, op: str) -> None:
        if not getattr(self.backend.capabilities, capability, False) or not callable(
            getattr(self.backend, op, None)
        ):
            raise InvalidRequest(f"backend '{self.name}' does not offer '{op}'", field="op")

    def _plan_get(
        self,
        index: str,
        ids: Sequence[str],
        keys: Sequence[str],
        deadline_s: float | None,
        deadline: Deadline | None = None,
    ) -> _Plan:
        validate_index_name(index)
        self._claim("get", "get")
        wanted = list(dict.fromkeys(_strings("ids", ids, MAX_REMOVE_IDS)))
        by_key = list(dict.fromkeys(_strings("keys", keys, MAX_REMOVE_IDS)))
        if by_key and not getattr(self.backend.capabilities, "keys", False):
            raise InvalidRequest(
                f"backend '{self.name}' does not support caller keys", field="keys"
            )
        if deadline is None:
            deadline = Deadline.after(deadline_s)

        def check(out: Any) -> Any:
            if type(out) is not Got:
                return out
            fields = out.__dict__
            got, missing = fields.get("passages"), fields.get("missing_ids")
            missing_keys = fields.get("missing_keys")
            if (
                type(got) is not list
                or type(missing) is not list
                or type(missing_keys) is not list
                or type(fields.get("backend")) is not str
            ):
                return self._violation(index, "answered GOT with fields of the wrong type")
            try:
                copies = [self._passage(index, i, p) for i, p in enumerate(got, 1)]
            except _Refused as refused:
                return refused.outcome
            asked, asked_keys = set(wanted), set(by_key)
            seen_ids = {p.id for p in copies}
            seen_keys = {p.key for p in copies if p.key in asked_keys}
            stray = [p.id for p in copies if p.id not in asked and p.key not in asked_keys]
            if stray:
                return self._violation(index, f"get answered {len(stray)} passage(s) not asked for")
            if set(missing) != asked - seen_ids or set(missing_keys) != asked_keys - seen_keys:
                return self._violation(
                    index, "get's missing ids or keys do not match the passages it answered"
                )
            # in the order asked: the ids asked for, then each key's passages (by id)
            order = {pid: n for n, pid in enumerate(wanted)}
            key_order = {k: n for n, k in enumerate(by_key)}
            copies.sort(
                key=lambda p: (order.get(p.id, len(order)), key_order.get(p.key or "", 0), p.id)
            )
            unique = list({p.id: p for p in copies}.values())
            return construct(
                Got,
                {
                    "index": index,
                    "backend": out.backend or self.plugin,
                    "code": "GOT",
                    "passages": unique,
                    "missing_ids": [i for i in wanted if i not in seen_ids],
                    "missing_keys": [k for k in by_key if k not in seen_keys],
                },
            )

        native = self._native("get")
        return _Plan(
            "get",
            index,
            deadline,
            lambda: self.backend.get(index, wanted, keys=by_key, deadline=deadline),  # type: ignore[attr-defined]
            check,
            (lambda: native(index, wanted, keys=by_key, deadline=deadline)) if native else None,
        )

    def _plan_scan(
        self,
        index: str,
        filters: Mapping[str, Any] | Filter | None,
        after: str | None,
        limit: int,
        deadline_s: float | None,
        deadline: Deadline | None = None,
    ) -> _Plan:
        validate_index_name(index)
        self._claim("scan", "scan")
        if after is not None and (
            type(after) is not str or not after or "\x00" in after or not _is_unicode(after)
        ):
            raise InvalidRequest(
                "after must be a cursor from a previous page (Unicode text)", field="after"
            )
        _check_count("limit", limit, 1, MAX_SCAN)
        parsed, given = self._filters(filters)
        if deadline is None:
            deadline = Deadline.after(deadline_s)

        def check(out: Any) -> Any:
            if type(out) is not Scanned:
                return out
            fields = out.__dict__
            page, cursor = fields.get("passages"), fields.get("next_after")
            if (
                type(page) is not list
                or (cursor is not None and type(cursor) is not str)
                or type(fields.get("backend")) is not str
            ):
                return self._violation(index, "answered SCANNED with fields of the wrong type")
            if len(page) > limit:
                return self._violation(
                    index, f"scan answered {len(page)} passages for limit {limit}"
                )
            try:
                copies = [self._passage(index, i, p) for i, p in enumerate(page, 1)]
            except _Refused as refused:
                return refused.outcome
            last = after
            for p in copies:
                if last is not None and not p.id > last:
                    return self._violation(index, "scan answered passages out of id order")
                if parsed is not None and not matches(parsed, p.metadata):
                    return self._violation(
                        index, f"scan answered passage {p.id[:12]}... that fails the filter"
                    )
                last = p.id
            if cursor is not None and (not copies or cursor != copies[-1].id):
                return self._violation(index, "scan's cursor is not the last id of its page")
            return construct(
                Scanned,
                {
                    "index": index,
                    "backend": out.backend or self.plugin,
                    "code": "SCANNED",
                    "passages": copies,
                    "next_after": cursor,
                },
            )

        native = self._native("scan")
        return _Plan(
            "scan",
            index,
            deadline,
            lambda: self.backend.scan(  # type: ignore[attr-defined]
                index, filters=given, after=after, limit=limit, deadline=deadline
            ),
            check,
            (lambda: native(index, filters=given, after=after, limit=limit, deadline=deadline))
            if native
            else None,
        )

    def _plan_indexes(self, deadline_s: float | None) -> _Plan:
        self._claim("indexes", "indexes")
        deadline = Deadline.after(deadline_s)

        def check(out: Any) -> Any:
            if type(out) is not IndexList:
                return out
            names = [i.name for i in out.indexes]
            if len(set(names)) != len(names):
                return self._violation("", "indexes answered a name twice")
            for name in names:
                try:
                    validate_index_name(name)
                except InvalidRequest:
                    return self._violation("", "indexes answered a name that is not valid")
            return out.model_copy(update={"indexes": sorted(out.indexes, key=lambda i: i.name)})

        native = self._native("indexes")
        return _Plan(
            "indexes",
            "",
            deadline,
            lambda: self.backend.indexes(deadline=deadline),  # type: ignore[attr-defined]
            check,
            (lambda: native(deadline=deadline)) if native else None,
        )

    def _plan_extra(
        self, op: str, index: str, deadline_s: float | None, kwargs: dict[str, Any]
    ) -> _Plan:
        validate_index_name(index)
        if op not in EXTENSION_OPS:
            known = ", ".join(sorted(EXTENSION_OPS))
            raise InvalidRequest(f"'{op}' is not an extension op (those are: {known})", field="op")
        fn = getattr(self.backend, f"op_{op}", None)
        if not callable(fn):
            raise InvalidRequest(f"backend '{self.name}' has no op '{op}'", field="op")
        check = self._extra_check(op, kwargs)
        deadline = Deadline.after(_write_deadline(deadline_s) if op in _WRITES else deadline_s)
        return _Plan(op, index, deadline, lambda: fn(index, deadline=deadline, **kwargs), check)

    def _extra_check(self, op: str, kwargs: dict[str, Any]) -> Callable[[Any], Any]:
        """Refuse malformed arguments of extension op ``op``; the check of its answer."""
        expected = {
            "drop": set(),
            "optimize": set(),
            "rebuild": set(),
            "migrate": set(),
            "rerank": {"query", "passages"},
            "explain": {"query", "passage_id"},
            "neighbours": {"passage_id", "before", "after"},
            "stats": set(),
        }[op]
        if set(kwargs) != expected:
            names = ", ".join(sorted(expected)) or "none"
            raise InvalidRequest(f"'{op}' takes these arguments: {names}", field="op")
        if "query" in kwargs and not isinstance(kwargs["query"], str):
            raise InvalidQuery("a query must be text")
        if "passage_id" in kwargs and not isinstance(kwargs["passage_id"], str):
            raise InvalidRequest("passage_id must be a string", field="passage_id")
        for side in ("before", "after"):
            n = kwargs.get(side, 0)
            if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_TOP_K:
                raise InvalidRequest(f"{side} must be an integer from 0 to {MAX_TOP_K}", field=side)
        given: dict[str, Passage] = {}
        if op == "rerank":
            ps = kwargs["passages"]
            if isinstance(ps, (str, bytes)) or not isinstance(ps, Sequence) or len(ps) > MAX_BATCH:
                raise InvalidRequest(
                    f"passages must be a list of at most {MAX_BATCH} Passage", field="passages"
                )
            if not all(isinstance(p, Passage) for p in ps):
                raise InvalidRequest("passages must be Passage objects", field="passages")
            given = {p.id: p for p in ps}

        def check(out: Any) -> Any:
            if op == "drop" and type(out) is IndexStatus and (out.exists or out.passages):
                return self._violation(
                    out.index,
                    "answered drop with an index that still exists (exists=True)"
                    if out.exists
                    else f"answered drop with {out.passages} passage(s) left",
                )
            if type(out) is Searched:
                answer = self._checked_search(out, max(len(given), 1), 0.0, 0.0)
                if isinstance(answer, Searched):
                    foreign = [h.passage.id for h in answer.hits if h.passage.id not in given]
                    if foreign:
                        return self._violation(
                            out.index, f"rerank answered {len(foreign)} passage(s) it was not given"
                        )
                    return _stamped(answer, deadline_s=None, elapsed_ms=None)
                return answer
            if type(out) in (Explained, Neighbours):
                return self._checked_passages(out)
            return out

        return check

    def _checked_passages(self, out: Any) -> Any:
        """An ``Explained`` or ``Neighbours`` answer rebuilt around the guard's checked copies
        of its passages (validated from its fields), or why not."""
        fields = dict(out.__dict__)
        index = fields.get("index")
        if type(index) is not str:
            return self._violation(str(index), "answered for an index that is not text")
        try:
            if type(out) is Explained:
                fields["passage"] = self._passage(index, 1, fields.get("passage"))
                scale = fields.get("scale")
                if scale != self.backend.score_scale:
                    return self._violation(index, "explained a score on another scale")
                score = fields.get("score")
                if not isinstance(score, (int, float)) or type(score) not in (int, float):
                    return self._violation(index, "explained a score that is not a number")
                if not math.isfinite(score):
                    return self._violation(index, "explained a score that is not a finite number")
            else:
                for side in ("before", "after"):
                    items = fields.get(side)
                    if type(items) is not list:
                        return self._violation(index, f"answered neighbours {side} not as a list")
                    fields[side] = [self._passage(index, i, p) for i, p in enumerate(items, 1)]
        except _Refused as refused:
            return refused.outcome
        passages = fields.pop("passage", None)
        before, after = fields.pop("before", None), fields.pop("after", None)
        rebuilt = type(out).model_validate(fields | _present(passages, before, after))
        return rebuilt

    # -- machinery -----------------------------------------------------------------------
    def _ready(self) -> Readiness:
        now = time.monotonic()
        if now < self._ready_until:
            return Readiness.yes()
        r = self.readiness()
        if r.ready:
            with self._ready_lock:
                self._ready_until = time.monotonic() + READY_TTL_S
        return r

    def forget_readiness(self) -> None:
        """Ask the plugin again on the next call (after an op reported it unavailable)."""
        self._ready_until = 0.0

    def _violation(self, index: str, reason: str) -> IndexFailed:
        return IndexFailed(
            index=index,
            backend=self.plugin,
            reason=f"contract violation by plugin '{self.plugin}': {reason}",
            error_type="ContractViolation",
        )

    def _run(self, plan: _Plan) -> Any:
        """Run ``plan``'s plugin call on a worker thread and answer by its deadline.

        Every op of every backend runs there, whatever the backend claims about its own
        deadlines: only a thread the caller does not wait on can be abandoned, and the caller
        gets ``IndexTimeout`` at the deadline (plus :data:`SETTLE_S` at most, for the guard's
        own checks of an answer that came in time) even from a plugin that never returns.
        """
        ready = self._ready()
        if not ready.ready:
            return self._not_ready(plan, ready)
        future: Future[Any] = self._pool.get().submit(self._answer, plan)
        try:
            out = future.result(timeout=plan.deadline.remaining() + SETTLE_S)
        except TimeoutError:
            future.add_done_callback(discard)
            return self._late(
                plan.op, plan.index, plan.deadline, "did not answer within its deadline"
            )
        if isinstance(out, IndexUnavailable):
            self.forget_readiness()
        return out

    async def _arun(self, plan: _Plan) -> Any:
        """:meth:`_run` for a coroutine: the event loop is never blocked.  A backend's own
        coroutine (``a<op>``) runs on the loop; any other call on the worker threads, and so
        do the checks of every answer (hashing a page of thousands of passages takes long
        enough to hold up every other coroutine)."""
        import asyncio  # here, not at the top: the CLI's start-up never needs it

        if time.monotonic() < self._ready_until:
            ready = Readiness.yes()
        else:
            ready = await asyncio.to_thread(self._ready)
        if not ready.ready:
            return self._not_ready(plan, ready)
        future: Future[Any]
        if plan.native is not None:
            try:
                raw = await asyncio.wait_for(
                    plan.native(), timeout=plan.deadline.remaining() + SETTLE_S
                )
            except TimeoutError:
                return self._late(
                    plan.op, plan.index, plan.deadline, "did not answer within its deadline"
                )
            except Exception as exc:
                return self._raised(plan, exc)
            future = self._pool.get().submit(self._finish, plan, raw)
        else:
            future = self._pool.get().submit(self._answer, plan)
        try:
            out = await asyncio.wait_for(
                asyncio.wrap_future(future), timeout=plan.deadline.remaining() + SETTLE_S
            )
        except TimeoutError:
            future.add_done_callback(discard)
            return self._late(
                plan.op, plan.index, plan.deadline, "did not answer within its deadline"
            )
        if isinstance(out, IndexUnavailable):
            self.forget_readiness()
        return out

    def _not_ready(self, plan: _Plan, ready: Readiness) -> IndexUnavailable:
        return IndexUnavailable(
            index=plan.index, backend=self.plugin, reason=ready.reason or "not ready"
        )

    def _answer(self, plan: _Plan) -> Any:
        """The plugin's answer to ``plan``, then its checks (on the worker thread)."""
        try:
            out = plan.fn()
        except Exception as exc:
            return self._raised(plan, exc)
        return self._finish(plan, out)

    def _raised(self, plan: _Plan, exc: Exception) -> Any:
        if isinstance(exc, TimeoutError):
            return self._late(
                plan.op, plan.index, plan.deadline, "reported that it ran out of time"
            )
        if time.monotonic() > plan.deadline.at:
            return self._late(plan.op, plan.index, plan.deadline, "answered after its deadline")
        return IndexFailed(
            index=plan.index,
            backend=self.plugin,
            reason=f"plugin '{self.plugin}' raised during {plan.op}: {_describe(exc)}",
            error_type=type(exc).__name__,
        )

    def _finish(self, plan: _Plan, out: Any) -> Any:
        if time.monotonic() > plan.deadline.at:
            return self._late(plan.op, plan.index, plan.deadline, "answered after its deadline")
        try:
            return self._settle(plan.op, plan.index, out, plan.check)
        except Exception as exc:
            # an answer built without validation whose parts are not what they claim
            return self._violation(
                plan.index, f"its answer to {plan.op} could not be checked: {_describe(exc)}"
            )

    def _late(self, op: str, index: str, deadline: Deadline, what: str) -> IndexTimeout:
        return IndexTimeout(
            index=index,
            backend=self.plugin,
            deadline_s=deadline.seconds,
            reason=f"plugin '{self.plugin}' {what} ({op})",
        )

    def _settle(self, op: str, index: str, out: Any, check: Callable[[Any], Any]) -> Any:
        """``out`` if it is an allowed outcome of ``op`` for ``index`` (``check`` applied),
        else the contract violation it is.

        Only the exact outcome types are allowed (a subclass could answer one thing to the
        check and another to the caller), and every answer but a search's (whose hits are
        checked and copied one by one) is validated again from its fields: the caller gets a
        model the guard built, of the declared types, never the plugin's object.
        """
        allowed = ALLOWED.get(op)
        if allowed is None:
            raise InvalidRequest(f"no outcomes are declared for op '{op}'", field="op")
        if type(out) not in allowed:
            names = ", ".join(t.__name__ for t in allowed)
            return self._violation(
                index, f"{op} returned {type(out).__name__}, which is not one of: {names}"
            )
        if type(out) not in (Searched, Explained, Neighbours, Got, Scanned):
            # (the passages of those are checked one by one and copied by ``check``: validating
            # them here would hash each twice, and fill in, on the plugin's own object, the
            # digest of a passage stored without one, which must be refused instead)
            try:
                out = type(out).model_validate(dict(out.__dict__))
            except ValidationError as exc:
                return self._violation(
                    index, f"{op} answered a malformed {type(out).__name__}: {_describe(exc)}"
                )
        if out.index != index:
            return self._violation(index, f"answered for index '{out.index}'")
        if not out.backend:
            out = _stamped(out, backend=self.plugin)
        return check(out)

    # -- hits ----------------------------------------------------------------------------
    def _checked_search(
        self,
        out: Searched,
        top_k: int,
        deadline_s: float,
        elapsed_ms: float,
        vector_dim: int | None = None,
    ) -> Searched | IndexFailed:
        """A new ``Searched`` holding the guard's own copies of ``out``'s hits, each checked,
        or the ``IndexFailed`` that the first bad hit makes of the answer."""
        fields = out.__dict__
        index, hits, searched = fields.get("index"), fields.get("hits"), fields.get("searched")
        scale, backend = fields.get("scale"), fields.get("backend")
        degraded = fields.get("degraded")
        if type(index) is not str:
            return self._violation(str(index), "answered SEARCHED for an index that is not text")
        if (
            type(hits) is not list
            or type(searched) is not int
            or type(scale) is not ScoreScale
            or type(backend) is not str
            or type(degraded) is not list
        ):
            return self._violation(
                index,
                "answered SEARCHED with hits, searched, scale or backend of the wrong type",
            )
        if not hits:
            return self._violation(
                index, "answered SEARCHED with no hits (an empty result must be NO_MATCH)"
            )
        if len(hits) > top_k:
            return self._violation(index, f"returned {len(hits)} hits for top_k={top_k}")
        declared = self.backend.score_scale
        if type(declared) is not ScoreScale:
            return self._violation(index, "declares a score scale that is not a ScoreScale")
        if scale != declared:
            return self._violation(
                index, f"outcome scale '{scale.name}' differs from declared '{declared.name}'"
            )
        if searched < len(hits):
            return self._violation(index, f"searched={searched} is fewer than the {len(hits)} hits")
        try:
            copies = self._checked_hits(index, list(hits), declared, vector_dim)
            notes = [_degradation(d) for d in degraded]
        except _Refused as refused:
            return refused.outcome
        return construct(
            Searched,
            {
                "index": index,
                "backend": backend or self.plugin,
                "code": "SEARCHED",
                "hits": copies,
                "searched": searched,
                "scale": declared,
                "deadline_s": deadline_s,
                "elapsed_ms": elapsed_ms,
                "degraded": notes,
            },
        )

    def _checked_hits(
        self, index: str, hits: list[Any], scale: ScoreScale, vector_dim: int | None = None
    ) -> list[Hit]:
        """The guard's copies of ``hits``, each checked; with ``vector_dim`` (a vector search
        that asked for vectors) each must carry its stored vector of that length, finite, and
        the copy carries the guard's own tuple of it (else no hit carries one)."""
        higher, name = scale.higher_is_better, scale.name
        prev = math.inf if higher else -math.inf
        out: list[Hit] = []
        for i, hit in enumerate(hits, start=1):
            if type(hit) is not Hit:
                raise _Refused(
                    self._violation(index, f"hit {i} is a {type(hit).__name__}, not a Hit")
                )
            h = hit.__dict__
            rank, score, hit_scale = h.get("rank"), h.get("score"), h.get("score_scale")
            if type(rank) is not int or rank != i:
                raise _Refused(
                    self._violation(index, f"hit {i} has rank {rank!r}; ranks must be 1..n")
                )
            if type(score) is not float and type(score) is not int:
                raise _Refused(
                    self._violation(index, f"hit {i} has a score of type {type(score).__name__}")
                )
            score = float(score)
            if not math.isfinite(score):
                raise _Refused(self._violation(index, f"hit {i} has a non-finite score {score}"))
            if type(hit_scale) is not str or hit_scale != name:
                raise _Refused(
                    self._violation(index, f"hit {i} is on scale {hit_scale!r}, not '{name}'")
                )
            if (higher and score > prev) or (not higher and score < prev):
                raise _Refused(self._violation(index, f"scores are out of order at rank {i}"))
            prev = score
            passage = self._passage(index, i, h.get("passage"))
            vector = None
            if vector_dim is not None:
                vector = hit_vector(h.get("vector"), vector_dim)
                if vector is None:
                    raise _Refused(
                        self._violation(
                            index,
                            f"hit {i} does not carry its stored vector of {vector_dim} finite "
                            "numbers, which the search asked for",
                        )
                    )
            out.append(
                construct(
                    Hit,
                    {
                        "rank": i,
                        "score": score,
                        "score_scale": name,
                        "passage": passage,
                        "untrusted": True,
                        "vector": vector,
                    },
                )
            )
        return out

    def _passage(self, index: str, i: int, p: Any) -> Passage:
        """The guard's own checked copy of hit ``i``'s passage ``p``.

        ``p``'s fields are read once, each must be of its exact type (no subclass can answer
        one value to the check and another to the caller), and the copy is made of those
        values.  A copy whose id or digest does not match its fields is refused
        (``IntegrityError``): altered text, metadata, licence, provenance or span.  A passage
        with exactly the fields of one checked before is answered with that checked copy,
        without hashing again.
        """
        if type(p) is not Passage:
            raise _Refused(
                self._violation(index, f"hit {i}'s passage is a {type(p).__name__}, not a Passage")
            )
        fields = _passage_fields(p.__dict__)
        if fields is None:
            raise _Refused(self._violation(index, f"hit {i}'s passage has fields of wrong types"))
        pid, text, source, doc_sha, start, end, metadata, digest, key = fields
        if digest is None:
            raise _Refused(
                self._integrity(
                    index,
                    f"stored passage {pid[:12]}... has no digest (stored by an older indexplug, "
                    "or its digest was removed); re-index it",
                )
            )
        known = self._checked.get(digest)
        if known is not None and _same(known, fields):
            return known
        src = _source_copy(source)
        if src is None:
            raise _Refused(self._violation(index, f"hit {i}'s source has fields of wrong types"))
        meta = _metadata_copy(metadata)
        if passage_id(text, src.uri, start, end, key) != pid:
            raise _Refused(
                self._integrity(
                    index,
                    f"stored passage {pid[:12]}... no longer matches its content-addressed id "
                    "(text, uri, span or key altered after indexing); not served",
                )
            )
        if passage_digest(pid, src, doc_sha, start, end, meta, key) != digest:
            raise _Refused(
                self._integrity(
                    index,
                    f"stored passage {pid[:12]}... no longer matches its digest (source, "
                    "provenance, licence, span or metadata altered after indexing); not served",
                )
            )
        copy = construct(
            Passage,
            {
                "id": pid,
                "text": text,
                "source": src,
                "document_sha256": doc_sha,
                "start": start,
                "end": end,
                "metadata": meta,
                "digest": digest,
                "key": key,
            },
        )
        with self._checked_lock:
            checked = self._checked
            while checked and len(checked) >= CHECKED_PASSAGES:
                del checked[next(iter(checked))]
            if CHECKED_PASSAGES > 0:
                checked[digest] = copy
        return copy

    def _integrity(self, index: str, reason: str) -> IndexFailed:
        return IndexFailed(
            index=index, backend=self.plugin, reason=reason, error_type="IntegrityError"
        )


def _degradation(d: Any) -> Any:
    from indexplug.outcomes import Degradation

    if type(d) is not Degradation:
        raise TypeError(f"a degradation note is a {type(d).__name__}")
    return Degradation.model_validate(dict(d.__dict__))


def _present(passage: Any, before: Any, after: Any) -> dict[str, Any]:
    """The checked passages of an answer, by field, for those it has."""
    out: dict[str, Any] = {}
    if passage is not None:
        out["passage"] = passage
    if before is not None:
        out["before"] = before
    if after is not None:
        out["after"] = after
    return out


def _stamped(out: BaseModel, **update: Any) -> Any:
    """A copy of the guard's own ``out`` with ``update`` applied (values of declared types)."""
    return out.model_copy(update=update)


Progress = Callable[[int, int], None]
"""``progress(done, total)``: passages written so far, of how many."""


@dataclass(frozen=True, slots=True)
class _Plan:
    """One plugin call, ready to run: what :meth:`Guard._run` and :meth:`Guard._arun` take."""

    op: str
    index: str
    deadline: Deadline
    fn: Callable[[], Any]
    check: Callable[[Any], Any]
    native: Callable[[], Awaitable[Any]] | None = None


@dataclass(frozen=True, slots=True)
class _AddPlan:
    deadline: Deadline
    chunks: list[list[Passage]]
    total: int
    dupes: int


def _write_deadline(deadline_s: float | None) -> float:
    return WRITE_DEADLINE_S if deadline_s is None else deadline_s


def _chunks(batch: list[Passage], size: int) -> list[list[Passage]]:
    """``batch`` in pieces of about ``size``, one caller key's passages never split (so that
    each key is replaced at once); an empty batch is one empty piece."""
    if len(batch) <= size:
        return [batch]
    groups: dict[Any, list[Passage]] = {}
    for p in batch:
        groups.setdefault(p.key if p.key is not None else ("", p.id), []).append(p)
    out: list[list[Passage]] = [[]]
    for group in groups.values():
        if out[-1] and len(out[-1]) + len(group) > size:
            out.append([])
        out[-1].extend(group)
    return out


def _strings(field: str, values: Sequence[str], limit: int) -> list[str]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise InvalidRequest(f"{field} must be a list of strings", field=field)
    if len(values) > limit:
        raise InvalidRequest(f"at most {limit} {field} per call", field=field)
    if not all(type(v) is str and v and "\x00" not in v for v in values):
        raise InvalidRequest(f"{field} must be non-empty strings without NUL", field=field)
    if not all(_is_unicode(v) for v in values):
        raise InvalidRequest(
            f"{field} must be Unicode text (one holds a lone surrogate)", field=field
        )
    return list(values)


def _is_unicode(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8 (a lone surrogate does not): no passage id, key or
    cursor can hold such text, and backends cannot encode it, so it is refused up front."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_remove_count(n: int, field: str) -> None:
    """Refuse a remove of more than :data:`MAX_REMOVE_IDS` passages (what its ``keys`` or
    ``filters`` came to), before anything is removed."""
    if n > MAX_REMOVE_IDS:
        raise InvalidRequest(
            f"more than {MAX_REMOVE_IDS} passages would be removed ({n} with the {field}); "
            "remove them in parts",
            field=field,
        )


def _check_count(field: str, n: Any, low: int, high: int) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or not low <= n <= high:
        raise InvalidRequest(
            f"{field} must be an integer from {low} to {high}, got {n!r}", field=field
        )


def _with_missing_keys(out: Any, missing_keys: list[str]) -> Any:
    if missing_keys and isinstance(out, Removed):
        return out.model_copy(update={"missing_keys": missing_keys})
    return out
