"""Checks of reading stored passages back: get by id, scan in pages, listing indexes."""

from __future__ import annotations

from indexplug.filters import (
    matches,
    parse_filter,
)
from indexplug.outcomes import (
    Got,
    Scanned,
)
from indexplug.passages import passage_id
from indexplug.testing.checks.filters import _judge_selection
from indexplug.testing.checks.helpers import (
    _add,
    _by_id,
    _filled,
    _get,
    _indexes,
    _raw,
    _remove,
    _same_passage,
    _scan,
    _scan_all,
    _search,
    _tiny,
)
from indexplug.testing.checks.registry import _check
from indexplug.testing.checks.subject import Subject, fail


@_check(
    "get.by_id",
    "get answers stored passages by id exactly as added, in the order asked, and lists the "
    "ids that are not there (every one, for an index never written)",
    claim="get",
)
def _get_by_id(s: Subject) -> None:
    index, ps = _filled(s, "get")
    added = _by_id(ps)
    ghost = passage_id("never added", "kit://ghost", 0, 11)
    stored = [ps[5].id, ps[0].id, ps[9].id]
    what = "get of three stored ids and one never added"
    out: Got = _get(s, index, [stored[0], ghost, stored[1], stored[2]], what)
    ids = [p.id for p in out.passages]
    if set(ids) != set(stored):
        fail(
            f"{what} answered {len(set(ids) & set(stored))} of the 3 stored passages"
            + (
                f" and {len(set(ids) - set(stored))} not asked for"
                if set(ids) - set(stored)
                else ""
            )
        )
    if ids != stored:
        fail(f"{what} answered the passages in another order than asked")
    for p in out.passages:
        _same_passage(p, added, what)
    if out.missing_ids != [ghost]:
        fail(f"{what} reported missing_ids={[i[:8] for i in out.missing_ids]} (expected the one)")
    what = "get of every stored id"
    out = _get(s, index, [p.id for p in ps], what)
    if [p.id for p in out.passages] != [p.id for p in ps] or out.missing_ids:
        fail(f"{what} answered {len(out.passages)} of {len(ps)} passages")
    tiny = s.settings.tiny_deadline_s
    _tiny(
        s,
        "get",
        f"get with deadline_s={tiny}",
        index,
        lambda: s.guard.get(index, [ps[0].id], deadline_s=tiny),
        lambda d: _raw(s).get(index, [ps[0].id], keys=[], deadline=d),
    )
    what = "get from an index never written"
    out = _get(s, s.index("getnever"), [ps[0].id, ghost], what)
    if out.passages or out.missing_ids != [ps[0].id, ghost]:
        fail(
            f"{what} answered {len(out.passages)} passage(s) and missing_ids="
            f"{[i[:8] for i in out.missing_ids]} (expected none, and both ids missing)"
        )
    if s.claims("deletion"):
        _remove(s, index, [ps[1].id], "remove of a stored passage")
        what = "get of a removed passage's id"
        out = _get(s, index, [ps[1].id, ps[2].id], what)
        if [p.id for p in out.passages] != [ps[2].id] or out.missing_ids != [ps[1].id]:
            fail(f"{what} still answered it (or lost another)")


@_check(
    "scan.pages",
    "scan pages through every passage once, in ascending id order, following its cursor; "
    "a filtered scan returns exactly the passages that pass; an index never written is one "
    "empty page",
    claim="scan",
)
def _scan_pages(s: Subject) -> None:
    index, ps = _filled(s, "scan")
    added = _by_id(ps)
    want = sorted(added)
    limit = s.settings.scan_page
    what = f"scan of {len(ps)} passages in pages of {limit}"
    seen = _scan_all(s, index, what, len(ps), limit=limit)
    ids = [p.id for p in seen]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        fail(f"{what} returned {len(twice)} passage(s) twice (e.g. {twice[0][:12]}…)")
    if set(ids) != set(want):
        lost = len(set(want) - set(ids))
        fail(
            f"{what} returned {len(set(ids) & set(want))} of the {len(want)} passages "
            f"({lost} never came)"
        )
    if ids != want:
        fail(f"{what} returned the passages out of ascending id order")
    for p in seen:
        _same_passage(p, added, what)
    mid = want[len(want) // 2]
    what = "scan after a cursor in the middle of the index"
    out: Scanned = _scan(s, index, what, after=mid, limit=len(ps))
    if [p.id for p in out.passages] != [i for i in want if i > mid] or out.next_after is not None:
        fail(
            f"{what} answered {len(out.passages)} passage(s) (next_after={out.next_after!r}); "
            f"expected the {len([i for i in want if i > mid])} with a greater id and no cursor"
        )
    if s.claims("filters") or s.claims("filter_operators"):
        flt = {"topic": "animals"}
        chosen = [
            p.id for p in sorted(ps, key=lambda p: p.id) if matches(parse_filter(flt), p.metadata)
        ]
        what = f"scan with filters={flt} in pages of 2"
        got = _scan_all(s, index, what, len(chosen), filters=flt, limit=2)
        _judge_selection(what, [p.id for p in got], chosen, added)
        if [p.id for p in got] != chosen:
            fail(f"{what} returned the passages out of ascending id order")
    tiny = s.settings.tiny_deadline_s
    _tiny(
        s,
        "scan",
        f"scan with deadline_s={tiny}",
        index,
        lambda: s.guard.scan(index, limit=limit, deadline_s=tiny),
        lambda d: _raw(s).scan(index, filters=None, after=None, limit=limit, deadline=d),
    )
    what = "scan of an index never written"
    out = _scan(s, s.index("scannever"), what, limit=limit)
    if out.passages or out.next_after is not None:
        fail(f"{what} answered {len(out.passages)} passage(s), next_after={out.next_after!r}")
    if s.claims("deletion"):
        _remove(s, index, [want[0]], "remove of a stored passage")
        what = "scan after removing a passage"
        rest = _scan_all(s, index, what, len(ps), limit=limit)
        if [p.id for p in rest] != want[1:]:
            fail(f"{what} answered {len(rest)} passages, expected the other {len(want) - 1}")


@_check(
    "indexes.lists",
    "indexes lists the indexes written, by name, with their passage counts, and not one never "
    "written",
    claim="indexes",
)
def _indexes_lists(s: Subject) -> None:
    first, ps = _filled(s, "lista")
    second = s.index("listb")
    _add(s, second, ps[:3], "add of 3 passages to a second index")
    never = s.index("listnever")
    _search(s, never, "fox", "search of an index never written", ("INDEX_EMPTY", "NO_MATCH"))
    what = "indexes after writing two indexes"
    listed = {i.name: i.passages for i in _indexes(s, what).indexes}
    for name, n in ((first, len(ps)), (second, 3)):
        if name not in listed:
            fail(f"{what} did not list {name!r} ({n} passages; {len(listed)} index(es) listed)")
        if listed[name] != n:
            fail(f"{what} listed {name!r} with {listed[name]} passages; it holds {n}")
    if never in listed:
        fail(f"{what} listed {never!r}, an index that was only searched, never written")
    tiny = s.settings.tiny_deadline_s
    _tiny(
        s,
        "indexes",
        f"indexes with deadline_s={tiny}",
        "",
        lambda: s.guard.indexes(deadline_s=tiny),
        lambda d: _raw(s).indexes(deadline=d),
    )
    if s.claims("deletion"):
        _remove(s, second, [ps[0].id], "remove of a passage from the second index")
        what = "indexes after removing a passage"
        listed = {i.name: i.passages for i in _indexes(s, what).indexes}
        if listed.get(second) != 2:
            fail(f"{what} listed {second!r} with {listed.get(second)} passages; it holds 2")
