"""The check that what was stored survives reopening."""

from __future__ import annotations

from indexplug.outcomes import (
    Indexed,
    IndexStatus,
)
from indexplug.passages import Passage
from indexplug.testing.checks.helpers import (
    _QUERIES,
    _add,
    _by_id,
    _check_hits,
    _compare,
    _describe,
    _remove,
    _search,
    _snapshot,
    _status,
    corpus,
)
from indexplug.testing.checks.registry import _check
from indexplug.testing.checks.subject import Subject, fail


@_check(
    "persistence.reopen",
    "Everything survives closing the backend and opening it again",
    claim="persistence",
    needs=("reopen",),
)
def _persist(s: Subject) -> None:
    index = s.index("persist")
    ps = corpus()
    budget = 64 * 1024 * 1024
    _add(s, index, ps, f"add with max_bytes={budget}", max_bytes=budget)
    deleted: Passage | None = None
    if s.claims("deletion"):
        deleted = ps[3]  # not what any snapshot query looks for
        _remove(s, index, [deleted.id], "remove before reopening")
    kept = [p for p in ps if p is not deleted]
    before = _snapshot(s, index, _QUERIES, "before reopening")
    st_before: IndexStatus = _status(s, index, "status before reopening")
    try:
        s.do_reopen()
    except Exception as exc:
        fail(f"reopening the backend raised {_describe(exc)}")
    _compare(
        before,
        _snapshot(s, index, _QUERIES, "after reopening"),
        "closing and reopening changed the index",
    )
    st: IndexStatus = _status(s, index, "status after reopening")
    if st_before.max_bytes is not None and st.max_bytes != st_before.max_bytes:
        fail(f"the budget was {st_before.max_bytes} before reopening and {st.max_bytes} after")
    out = _search(s, index, "fox glaciers violin", "search after reopening", top_k=50)
    _check_hits(s, out, 50, _by_id(kept), "search after reopening", count=len(kept))
    again: Indexed = _add(s, index, kept, "adding the same passages after reopening")
    if again.added != 0:
        fail(f"after reopening, {again.added} stored passage(s) were not recognised as known")
