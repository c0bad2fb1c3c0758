"""Checks of add and remove: what each reports and what the index holds after."""

from __future__ import annotations

from indexplug.outcomes import (
    Indexed,
    Removed,
    Searched,
)
from indexplug.passages import passage_id
from indexplug.testing.checks.helpers import (
    _QUERIES,
    _add,
    _by_id,
    _check_hits,
    _compare,
    _count,
    _filled,
    _remove,
    _search,
    _short,
    _snapshot,
    corpus,
    kit_passage,
)
from indexplug.testing.checks.registry import _check
from indexplug.testing.checks.subject import Subject, fail


@_check("add.indexed", "Adding passages reports each one added, by id")
def _indexed(s: Subject) -> None:
    index = s.index("indexed")
    ps = corpus()
    out: Indexed = _add(s, index, ps, "add of new passages")
    want = {p.id for p in ps}
    if out.added != len(ps) or out.known != 0:
        fail(f"add of {len(ps)} new passages reported added={out.added}, known={out.known}")
    if set(out.added_ids) != want or len(out.added_ids) != len(ps):
        fail("add of new passages did not list exactly their ids in added_ids")
    if out.known_ids:
        fail("add of new passages listed known_ids")
    dup = kit_passage("A passage sent twice in the same batch.", 99, tag="dup")
    out = _add(s, index, [dup, dup], "add of a batch holding one passage twice")
    if out.added != 1 or out.known != 1:
        fail(
            f"add of one passage sent twice reported added={out.added}, known={out.known} "
            "(expected 1 added, 1 known)"
        )
    count = _count(s, index, "status after adding")
    if count != len(ps) + 1:
        fail(f"after adding {len(ps) + 1} distinct passages, status reports {count}")


@_check("add.idempotent", "Adding the same passages again reports them known and changes nothing")
def _idempotent(s: Subject) -> None:
    index, ps = _filled(s, "idem")
    before = _snapshot(s, index, _QUERIES, "before adding again")
    out: Indexed = _add(s, index, ps, "adding the same passages again")
    if out.added != 0 or out.known != len(ps):
        fail(
            f"adding the same {len(ps)} passages again reported added={out.added}, "
            f"known={out.known} (expected 0 added, {len(ps)} known)"
        )
    if set(out.known_ids) != {p.id for p in ps} or len(out.known_ids) != len(ps):
        fail("adding the same passages again did not list exactly their ids in known_ids")
    _compare(
        before,
        _snapshot(s, index, _QUERIES, "after adding again"),
        "adding the same passages again changed the index",
    )
    new = kit_passage("Kingfishers dive for small fish in clear streams.", 50)
    out = _add(s, index, [ps[0], new], "add of one known and one new passage")
    if out.added != 1 or out.known != 1 or out.added_ids != [new.id] or out.known_ids != [ps[0].id]:
        fail(
            f"add of one known and one new passage reported added={out.added} "
            f"{out.added_ids}, known={out.known} {out.known_ids}"
        )


@_check(
    "remove.reports",
    "Removing ids removes them and reports the ids that were not there",
    claim="deletion",
)
def _removes(s: Subject) -> None:
    index, ps = _filled(s, "remove")
    ghost = passage_id("never added", "kit://ghost", 0, 11)
    ids = [ps[0].id, ps[1].id, ghost, ps[0].id]
    out: Removed = _remove(s, index, ids, "remove of two stored ids and one unknown id")
    if out.removed != 2 or set(out.removed_ids) != {ps[0].id, ps[1].id}:
        fail(
            f"remove of two stored ids reported removed={out.removed} "
            f"(ids {[i[:8] for i in out.removed_ids]})"
        )
    if out.missing_ids != [ghost]:
        fail(
            f"remove did not report the unknown id as missing (missing_ids="
            f"{[i[:8] for i in out.missing_ids]})"
        )
    count = _count(s, index, "status after removing")
    if count != len(ps) - 2:
        fail(f"after removing 2 of {len(ps)} passages, status reports {count}")
    out = _remove(s, index, [ps[0].id], "remove of an id already removed")
    if out.removed != 0 or out.missing_ids != [ps[0].id]:
        fail(
            f"remove of an id already removed reported removed={out.removed}, "
            f"missing={len(out.missing_ids)}"
        )
    out = _remove(s, s.index("never"), [ghost], "remove from an index never written")
    if out.removed != 0 or out.missing_ids != [ghost]:
        fail("remove from an index never written did not report the id as missing")


@_check("remove.never_returned", "A removed passage is never returned again", claim="deletion")
def _gone(s: Subject) -> None:
    victim = kit_passage("The quokkaremoval fox is a passage that will be removed.", 60)
    index, ps = _filled(s, "gone", [victim])
    _remove(s, index, [victim.id], "remove of a stored passage")
    added = _by_id(ps)
    for q in ("quokkaremoval", "fox", victim.text):
        out = _search(
            s,
            index,
            q,
            f"search for {_short(q)!r} after removing its passage",
            ("SEARCHED", "NO_MATCH"),
            top_k=50,
        )
        if isinstance(out, Searched):
            ids = _check_hits(s, out, 50, added, f"search for {_short(q)!r} after removal")
            if victim.id in ids:
                fail(f"search for {_short(q)!r} returned a passage that was removed")
    count = _count(s, index, "status after removing")
    if count != len(ps) - 1:
        fail(f"after removing 1 of {len(ps)} passages, status reports {count}")
    out = _add(s, index, [victim], "adding a removed passage again")
    if out.added != 1:
        fail("adding a removed passage again reported it as already known: it was not removed")
