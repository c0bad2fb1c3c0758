"""The invoker's search ops: ``search``, ``batch_search`` and ``pack``, blocking and async."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from indexplug.errors import (
    InvalidRequest,
)
from indexplug.fusion import FUSION_BACKEND
from indexplug.invoke_render import (
    _batch_item,
    _failure,
    _refused_item,
)
from indexplug.neighbours import chunkings, expand
from indexplug.ops import (
    BATCH_ANSWERED,
    OPS,
    UNTRUSTED_NOTICE,
    Answer,
    BatchData,
    BatchEvidence,
    BatchItem,
    BatchSearchArgs,
    HitOut,
    PackArgs,
    SearchArgs,
    SearchData,
    SearchEvidence,
    _SearchCommon,
    batch_code,
)
from indexplug.outcomes import (
    IndexTimeout,
    NoMatch,
    Searched,
)
from indexplug.packing import pack
from indexplug.targets import Target

if TYPE_CHECKING:
    pass
from indexplug.invocation.base import (
    BATCH_WORKERS,
    BLOCKING,
    InvokerBase,
)


class Searching(InvokerBase):
    """The search ops: search, batch_search and pack."""

    # -- ops -----------------------------------------------------------------------------

    def _run_search(self, t: Target, a: _SearchCommon, query: str, op: str) -> Answer[Any, Any]:
        deadline_s = self.deadline_for(t.index, a.deadline_s)
        mode = self.config.history_mode(t.index)
        if mode == "off":
            out = t.guard.search(
                t.index, query, top_k=a.top_k, deadline_s=deadline_s, filters=a.filters
            )
            return self._search_answer(t, a, out, op)
        started = time.perf_counter()
        out = t.guard.search(
            t.index, query, top_k=a.top_k, deadline_s=deadline_s, filters=a.filters
        )
        self._record_search(t, a, query, out, mode, started)
        return self._search_answer(t, a, out, op)

    async def _arun_search(
        self, t: Target, a: _SearchCommon, query: str, op: str
    ) -> Answer[Any, Any]:
        deadline_s = self.deadline_for(t.index, a.deadline_s)
        mode = self.config.history_mode(t.index)
        started = time.perf_counter()
        out = await t.guard.asearch(
            t.index, query, top_k=a.top_k, deadline_s=deadline_s, filters=a.filters
        )
        if mode != "off":
            self._record_search(t, a, query, out, mode, started)
        if not a.context:
            return self._search_answer(t, a, out, op)
        import asyncio

        # context expansion reads the index (and may read files): on a thread, not the loop
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(BLOCKING.get(), self._search_answer, t, a, out, op)

    def _search_answer(self, t: Target, a: _SearchCommon, out: Any, op: str) -> Answer[Any, Any]:
        deadline_s = self.deadline_for(t.index, a.deadline_s)
        legs = list(t.options.get("members", [])) if t.backend_name == FUSION_BACKEND else []
        ev = SearchEvidence(index=t.index, backend=t.backend_name, legs=legs)
        if isinstance(out, Searched | NoMatch):
            ev = ev.model_copy(
                update={
                    "searched": out.searched,
                    "deadline_s": out.deadline_s,
                    "elapsed_ms": out.elapsed_ms,
                    "degraded": out.degraded,
                    "scale": out.scale if isinstance(out, Searched) else None,
                }
            )
        elif isinstance(out, IndexTimeout):
            ev = ev.model_copy(update={"deadline_s": out.deadline_s})
        if not out.ok:
            return _failure(op, out, ev)
        hits: list[HitOut] = []
        if isinstance(out, Searched):
            known = chunkings(t.guard.name, t.index) if a.context else []
            for h in out.hits:
                ctx = None
                if a.context:
                    ctx = expand(
                        t.guard,
                        t.index,
                        h.passage,
                        a.context,
                        deadline_s=deadline_s,
                        chunking=known,
                    )
                hits.append(
                    HitOut(
                        rank=h.rank,
                        score=h.score,
                        scale=h.score_scale,
                        passage=h.passage,
                        context=ctx,
                    )
                )
        return Answer[Any, Any](
            op=op,
            code=out.code,
            ok=True,
            message=out.message,
            data=SearchData(hits=hits),
            evidence=ev,
            untrusted=bool(hits),
            notice=UNTRUSTED_NOTICE if hits else None,
        )

    def _search(self, a: SearchArgs) -> Answer[Any, Any]:
        t = self._search_target(a)
        got = self._run_search(t, a, a.query, "search")
        return OPS["search"].result.model_validate(got.model_dump())  # type: ignore[return-value]

    async def _asearch(self, a: SearchArgs) -> Answer[Any, Any]:
        t = await self._asearch_target(a)
        got = await self._arun_search(t, a, a.query, "search")
        return OPS["search"].result.model_validate(got.model_dump())  # type: ignore[return-value]

    async def _asearch_target(self, a: _SearchCommon) -> Target:
        if a.index is not None and a.indexes is None:
            return await self._atarget(a.index)
        import asyncio

        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(BLOCKING.get(), self._search_target, a)

    def _batch_search(self, a: BatchSearchArgs) -> Answer[Any, Any]:
        t = self._search_target(a)
        self._check_queries(a)

        def one(q: str) -> BatchItem:
            try:
                return _batch_item(q, self._run_search(t, a, q, "search"))
            except InvalidRequest as exc:
                return _refused_item(t, q, exc)

        with ThreadPoolExecutor(max_workers=min(BATCH_WORKERS, len(a.queries))) as pool:
            items = list(pool.map(one, a.queries))
        return self._batch_answer(t, items)

    async def _abatch_search(self, a: BatchSearchArgs) -> Answer[Any, Any]:
        import asyncio

        t = await self._asearch_target(a)
        self._check_queries(a)
        gate = asyncio.Semaphore(BATCH_WORKERS)

        async def one(q: str) -> BatchItem:
            async with gate:
                try:
                    return _batch_item(q, await self._arun_search(t, a, q, "search"))
                except InvalidRequest as exc:
                    return _refused_item(t, q, exc)

        items = list(await asyncio.gather(*(one(q) for q in a.queries)))
        return self._batch_answer(t, items)

    @staticmethod
    def _check_queries(a: BatchSearchArgs) -> None:
        for i, q in enumerate(a.queries):
            if not q.strip():
                raise InvalidRequest("the query is empty", field=f"queries.{i}")

    def _batch_answer(self, t: Target, items: list[BatchItem]) -> Answer[Any, Any]:
        counts: dict[str, int] = {}
        for it in items:
            counts[it.code] = counts.get(it.code, 0) + 1
        overall = batch_code(counts)
        ok = overall in BATCH_ANSWERED
        failed = len(items) - sum(1 for it in items if it.ok)
        legs = list(t.options.get("members", [])) if t.backend_name == FUSION_BACKEND else []
        return OPS["batch_search"].result(
            op="batch_search",
            code="BATCH",
            ok=ok,
            message=f"{len(items)} quer(y/ies) on '{t.index}': "
            + ", ".join(f"{c} {k}" for k, c in sorted(counts.items()))
            + (f"; {failed} did not get an answer from the index." if failed else "."),
            data=BatchData(results=items),
            evidence=BatchEvidence(
                index=t.index,
                backend=t.backend_name,
                queries=len(items),
                counts=counts,
                overall=overall,
                legs=legs,
            ),
            untrusted=any(it.untrusted for it in items),
            notice=UNTRUSTED_NOTICE if any(it.untrusted for it in items) else None,
        )  # type: ignore[return-value]

    def _pack(self, a: PackArgs) -> Answer[Any, Any]:
        t = self._search_target(a)
        return self._pack_answer(a, self._run_search(t, a, a.query, "pack"))

    async def _apack(self, a: PackArgs) -> Answer[Any, Any]:
        t = await self._asearch_target(a)
        return self._pack_answer(a, await self._arun_search(t, a, a.query, "pack"))

    def _pack_answer(self, a: PackArgs, got: Answer[Any, Any]) -> Answer[Any, Any]:
        data = None
        message = got.message
        if got.ok:
            hits = got.data.hits if got.data is not None else []
            data = pack(hits, a.max_tokens)
            if hits:
                message += (
                    f" Packed {data.included} of {len(hits)} into about {data.tokens} tokens "
                    f"(budget {a.max_tokens})" + (", the last one cut." if data.truncated else ".")
                )
        return OPS["pack"].result(
            **{
                **dict(got),
                "message": message,
                "data": data,
                "untrusted": bool(data and data.citations),
            }
        )  # type: ignore[return-value]
