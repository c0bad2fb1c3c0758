"""Checks of deadlines: an op that cannot meet one answers INDEX_TIMEOUT honestly."""

from __future__ import annotations

from functools import partial
from typing import Any

from indexplug.deadlines import Deadline
from indexplug.outcomes import (
    Indexed,
)
from indexplug.passages import passage_id
from indexplug.testing.checks.helpers import (
    NO_MATCH_QUERY,
    _add,
    _by_id,
    _check_hits,
    _count,
    _filled,
    _search,
    _tiny,
    kit_passage,
)
from indexplug.testing.checks.registry import _check
from indexplug.testing.checks.subject import Subject, fail


def _search_directly(s: Subject, index: str, query: str, deadline: Deadline) -> Any:
    return s.guard.backend.search(index, query, top_k=10, deadline=deadline, filters=None)


@_check(
    "deadline.search",
    "A search whose deadline cannot be met answers INDEX_TIMEOUT, never "
    "NO_MATCH, and the backend works afterwards",
)
def _deadline_search(s: Subject) -> None:
    index, ps = _filled(s, "dlsearch")
    tiny = s.settings.tiny_deadline_s
    for q in (NO_MATCH_QUERY, "fox", "fox glaciers violin chess"):
        _tiny(
            s,
            "search",
            f"search for {q!r} with deadline_s={tiny}",
            index,
            partial(s.guard.search, index, q, top_k=10, deadline_s=tiny),
            partial(_search_directly, s, index, q),
        )
    out = _search(s, index, "fox", "search with a normal deadline after timeouts")
    _check_hits(s, out, 10, _by_id(ps), "search after timeouts", count=len(ps))


@_check(
    "deadline.write",
    "add, remove and status whose deadline cannot be met answer "
    "INDEX_TIMEOUT, and the backend works afterwards",
)
def _deadline_write(s: Subject) -> None:
    index, ps = _filled(s, "dlwrite")
    tiny = s.settings.tiny_deadline_s
    late = [kit_passage("A passage written with no time to write it: ptarmigan.", 80)]
    _tiny(
        s,
        "add",
        f"add with deadline_s={tiny}",
        index,
        lambda: s.guard.add(index, late, deadline_s=tiny),
        lambda d: s.guard.backend.add(index, late, max_bytes=None, deadline=d),
    )
    if s.claims("deletion"):
        ghost = passage_id("never added", "kit://ghost", 0, 11)
        _tiny(
            s,
            "remove",
            f"remove with deadline_s={tiny}",
            index,
            lambda: s.guard.remove(index, [ghost], deadline_s=tiny),
            lambda d: s.guard.backend.remove(index, [ghost], deadline=d),
        )
    _tiny(
        s,
        "status",
        f"status with deadline_s={tiny}",
        index,
        lambda: s.guard.status(index, deadline_s=tiny),
        lambda d: s.guard.backend.status(index, deadline=d),
    )
    # Whether the timed-out add was applied is unknown to its caller; adding again settles it.
    out: Indexed = _add(s, index, ps + late, "adding again after timeouts")
    if out.added + out.known != len(ps) + 1 or out.known < len(ps):
        fail(
            f"adding again after timeouts reported added={out.added}, known={out.known}: "
            "passages were lost"
        )
    count = _count(s, index, "status after timeouts")
    if count != len(ps) + 1:
        fail(f"after timeouts the index holds {count} passages, expected {len(ps) + 1}")
