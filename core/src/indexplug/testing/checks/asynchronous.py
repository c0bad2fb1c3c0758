"""The check that each op's coroutine form answers as its blocking form does."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from indexplug.outcomes import (
    Got,
    Indexed,
    IndexList,
    IndexStatus,
    NoMatch,
    Removed,
    Scanned,
    Searched,
)
from indexplug.passages import passage_id
from indexplug.testing.checks.helpers import NO_MATCH_QUERY, _describe, _filled, _show, kit_passage
from indexplug.testing.checks.registry import _check
from indexplug.testing.checks.subject import CheckFailed, Subject, fail


def _shape(out: Any) -> Any:
    """What must agree between an op's blocking and coroutine forms: the code, and what was
    answered (ids as sets where a backend may order ties either way)."""
    code = getattr(out, "code", type(out).__name__)
    if isinstance(out, Searched):
        return code, sorted(h.passage.id for h in out.hits), out.searched
    if isinstance(out, NoMatch):
        return code, out.searched
    if isinstance(out, IndexStatus):
        return code, out.exists, out.passages
    if isinstance(out, Got):
        return code, [p.id for p in out.passages], out.missing_ids, out.missing_keys
    if isinstance(out, Scanned):
        return code, [p.id for p in out.passages], out.next_after
    if isinstance(out, IndexList):
        return code  # other indexes may come and go on a shared server: compared apart
    return code, getattr(out, "reason", None)


def _listed(out: Any, index: str) -> bool | None:
    """Whether an ``IndexList`` names ``index`` (``None`` for any other answer)."""
    if not isinstance(out, IndexList):
        return None
    return index in {i.name for i in out.indexes}


def _said(out: Any) -> str:
    shape = _shape(out)
    if isinstance(shape, tuple) and len(shape) > 1 and isinstance(shape[1], list):
        return f"{_show(out)} with {len(shape[1])} passage(s)"
    return _show(out)


def _in_loop(main: Callable[[], Any]) -> Any:
    """Run the coroutine ``main()`` on one event loop of its own, in a thread of its own (so
    that a caller's running loop is never in the way)."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(lambda: asyncio.run(main())).result()


@_check(
    "async.same",
    "Every op's coroutine form (asearch, astatus, aadd, aremove, aget, ascan, aindexes, adrop) "
    "answers what its blocking form answers, several at once on one event loop, the backend's "
    "own coroutine methods (a<op>) included",
)
def _async_same(s: Subject) -> None:
    index, ps = _filled(s, "async")
    g, d = s.guard, s.settings.op_deadline_s
    never = s.index("asyncnever")
    reads: list[tuple[str, Callable[[], Any], Callable[[], Any]]] = [
        (
            "search for 'fox glaciers violin'",
            partial(g.search, index, "fox glaciers violin", top_k=50, deadline_s=d),
            partial(g.asearch, index, "fox glaciers violin", top_k=50, deadline_s=d),
        ),
        (
            f"search for {NO_MATCH_QUERY!r}",
            partial(g.search, index, NO_MATCH_QUERY, top_k=50, deadline_s=d),
            partial(g.asearch, index, NO_MATCH_QUERY, top_k=50, deadline_s=d),
        ),
        (
            "search of an index never written",
            partial(g.search, never, "fox", deadline_s=d),
            partial(g.asearch, never, "fox", deadline_s=d),
        ),
        ("status", partial(g.status, index, deadline_s=d), partial(g.astatus, index, deadline_s=d)),
    ]
    if s.claims("filters") or s.claims("filter_operators"):
        flt = {"topic": "animals"}
        reads.append(
            (
                f"search with filters={flt}",
                partial(
                    g.search, index, "fox honeybees renard", top_k=50, deadline_s=d, filters=flt
                ),
                partial(
                    g.asearch, index, "fox honeybees renard", top_k=50, deadline_s=d, filters=flt
                ),
            )
        )
    if s.claims("get"):
        ids = [ps[3].id, passage_id("never added", "kit://ghost", 0, 11), ps[1].id]
        reads.append(
            (
                "get",
                partial(g.get, index, ids, deadline_s=d),
                partial(g.aget, index, ids, deadline_s=d),
            )
        )
    if s.claims("scan"):
        reads.append(
            (
                "scan",
                partial(g.scan, index, limit=5, deadline_s=d),
                partial(g.ascan, index, limit=5, deadline_s=d),
            )
        )
    if s.claims("indexes"):
        reads.append(
            ("indexes", partial(g.indexes, deadline_s=d), partial(g.aindexes, deadline_s=d))
        )
    extra = kit_passage("Puffins nest in burrows on asyncword cliffs.", 77, tag="async")

    async def agree(what: str, sync: Callable[[], Any], coro: Callable[[], Any]) -> list[str]:
        want = await asyncio.to_thread(sync)
        got = await coro()
        if _shape(got) != _shape(want):
            return [
                f"the coroutine form of {what} answered {_said(got)}; the blocking form "
                f"{_said(want)}"
            ]
        return []

    async def main() -> list[str]:
        problems: list[str] = []
        blocking = [await asyncio.to_thread(sync) for _, sync, _ in reads]
        awaited = await asyncio.gather(*(coro() for _, _, coro in reads), return_exceptions=True)
        for (what, _, _), want, got in zip(reads, blocking, awaited, strict=True):
            if isinstance(got, BaseException):
                problems.append(f"the coroutine form of {what} raised {_describe(got)}")
            elif _shape(got) != _shape(want):
                problems.append(
                    f"the coroutine form of {what} answered {_said(got)}; the blocking form "
                    f"{_said(want)}"
                )
            elif _listed(got, index) != _listed(want, index):
                problems.append(f"aindexes and indexes disagree on listing {index!r}")
        if problems:
            return problems
        status = partial(g.status, index, deadline_s=d)
        astatus = partial(g.astatus, index, deadline_s=d)
        before = await asyncio.to_thread(status)
        out = await g.aadd(index, [extra], deadline_s=d)
        if not isinstance(out, Indexed) or out.added_ids != [extra.id]:
            return [f"aadd of a new passage answered {_show(out)}, not INDEXED with it added"]
        after = await asyncio.to_thread(status)
        if (
            isinstance(before, IndexStatus)
            and isinstance(after, IndexStatus)
            and after.passages != before.passages + 1
        ):
            return [
                f"aadd answered INDEXED with 1 added, but status went from "
                f"{before.passages} to {after.passages} passages"
            ]
        problems += await agree("status after aadd", status, astatus)
        if s.claims("deletion"):
            rm = await g.aremove(index, [extra.id], deadline_s=d)
            if not isinstance(rm, Removed) or rm.removed_ids != [extra.id]:
                return [f"aremove of a stored passage answered {_show(rm)}, not REMOVED with it"]
            problems += await agree("status after aremove", status, astatus)
        if s.claims("drop"):
            gone = await g.adrop(index, deadline_s=d)
            if not isinstance(gone, IndexStatus) or gone.exists:
                return [f"adrop answered {_show(gone)}, not STATUS with exists=False"]
            problems += await agree("status after adrop", status, astatus)
        return problems

    try:
        problems = _in_loop(main)
    except CheckFailed:
        raise
    except Exception as exc:
        fail(f"running the coroutine forms raised {_describe(exc)}")
    if problems:
        fail(problems[0] + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
