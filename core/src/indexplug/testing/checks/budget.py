"""Checks of the byte budget: over-budget writes refused, and a budget that holds."""

from __future__ import annotations

from indexplug.outcomes import (
    Indexed,
    IndexStatus,
    OverBudget,
)
from indexplug.passages import MAX_PASSAGE_CHARS
from indexplug.testing.checks.helpers import (
    _QUERIES,
    _add,
    _compare,
    _filled,
    _snapshot,
    _status,
    corpus,
    kit_passage,
)
from indexplug.testing.checks.registry import _check
from indexplug.testing.checks.subject import Subject, fail


@_check("budget.refused", "A write over max_bytes is refused with both numbers and changes nothing")
def _budget_refused(s: Subject) -> None:
    index, _ = _filled(s, "budget")
    before = _snapshot(s, index, _QUERIES, "before a refused write")
    more = [
        kit_passage(f"Budget passage number {i} about kestrels and fox.", 100 + i) for i in range(5)
    ]
    out: OverBudget = _add(s, index, more, "add with max_bytes=1", ("OVER_BUDGET",), max_bytes=1)
    if out.max_bytes != 1:
        fail(f"add with max_bytes=1 was refused, but reported max_bytes={out.max_bytes}")
    if not out.needed_bytes > out.max_bytes:
        fail(
            f"add with max_bytes=1 was refused without the size it needed "
            f"(needed_bytes={out.needed_bytes}, check={out.check})"
        )
    _compare(
        before,
        _snapshot(s, index, _QUERIES, "after a refused write"),
        "a write refused as over budget changed the index",
    )
    out2: Indexed = _add(s, index, more, "add without a budget after a refused write")
    if out2.added != len(more):
        fail(
            f"after a refused write, adding the same passages reported added={out2.added} "
            f"of {len(more)}: part of the refused write was kept"
        )


_BUDGETS = (64 * 1024, 256 * 1024, 1024 * 1024, 4 * 1024 * 1024)


@_check("budget.cannot_raise", "The first write's budget holds: a later call cannot raise it")
def _budget_held(s: Subject) -> None:
    first = corpus()[:3]
    index, budget = "", 0
    for mb in _BUDGETS:
        index = s.index("held")
        out = _add(
            s,
            index,
            first,
            f"first add of 3 small passages with max_bytes={mb}",
            ("INDEXED", "OVER_BUDGET"),
            max_bytes=mb,
        )
        if isinstance(out, Indexed):
            budget = mb
            break
    if not budget:
        fail(f"3 small passages did not fit a new index even with max_bytes={_BUDGETS[-1]}")
    st: IndexStatus = _status(s, index, "status of an index with a budget")
    if st.max_bytes is not None and st.max_bytes != budget:
        fail(f"the first write set max_bytes={budget}, but status reports {st.max_bytes}")
    queries = ["fox", "photosynthesis", "danube"]  # what its three passages are about
    before = _snapshot(s, index, queries, "before writes over the budget")
    words = "kestrel harrier osprey merlin hobby buzzard kite goshawk "
    chunk = max(1, min(MAX_PASSAGE_CHARS // 2, budget // 16))
    n = 2 * budget // chunk + 1
    big = [
        kit_passage((f"bulk{i} " + words * (chunk // len(words) + 1))[:chunk], 200 + i)
        for i in range(n)
    ]
    for asked in (budget * 1000, None):
        what = (
            f"add of {n * chunk} bytes of text with max_bytes={asked} to an index whose "
            f"first write set max_bytes={budget}"
        )
        out = _add(s, index, big, what, ("OVER_BUDGET",), max_bytes=asked)
        if out.max_bytes > budget:
            fail(f"{what} was refused, but against a raised budget of {out.max_bytes}")
    _compare(
        before,
        _snapshot(s, index, queries, "after refused writes"),
        "writes refused as over budget changed the index",
    )
