"""Checks of the basic contract: declarations, typed outcomes, status and search answers."""

from __future__ import annotations

from indexplug.outcomes import (
    IndexStatus,
    NoMatch,
    ScoreScale,
    Searched,
)
from indexplug.protocols import Capabilities, Readiness
from indexplug.testing.checks.helpers import (
    NO_MATCH_QUERY,
    _add,
    _by_id,
    _check_hits,
    _describe,
    _filled,
    _remove,
    _search,
    _status,
    corpus,
)
from indexplug.testing.checks.registry import _check
from indexplug.testing.checks.subject import Subject, fail


@_check("backend.declares", "The backend declares a name, a score scale and its capabilities")
def _declares(s: Subject) -> None:
    b = s.guard.backend
    name = getattr(b, "name", None)
    if not isinstance(name, str) or not name.strip():
        fail(f"backend.name must be a non-empty string, got {name!r}")
    if not isinstance(getattr(b, "description", None), str):
        fail("backend.description must be a string")
    if not isinstance(getattr(b, "score_scale", None), ScoreScale):
        fail(f"backend.score_scale must be a ScoreScale, got {type(b.score_scale).__name__}")
    caps = getattr(b, "capabilities", None)
    if not isinstance(caps, Capabilities):
        fail(f"backend.capabilities must be a Capabilities, got {type(caps).__name__}")
    try:
        r = b.readiness()
    except Exception as exc:
        fail(f"readiness() raised {_describe(exc)}")
    if not isinstance(r, Readiness):
        fail(f"readiness() returned {type(r).__name__}, not Readiness")


@_check("outcomes.typed", "Every op answers an outcome allowed for it, which survives JSON")
def _typed(s: Subject) -> None:
    index = s.index("typed")
    ps = corpus()
    out = _add(s, index, ps, "add to a new index")
    if not out.backend:
        fail("add answered with an empty backend name")
    _search(s, index, "fox", "search for a word the index holds")
    _status(s, index, "status of an index holding passages")
    if s.claims("deletion"):
        _remove(s, index, [ps[0].id], "remove of a stored passage")


@_check("status.reports", "status says whether an index exists and how many passages it holds")
def _status_reports(s: Subject) -> None:
    missing = s.index("status")
    out: IndexStatus = _status(s, missing, "status of an index never written")
    if out.exists or out.passages != 0:
        fail(
            f"status of an index never written said exists={out.exists}, "
            f"passages={out.passages} (expected exists=False, passages=0)"
        )
    index, ps = _filled(s, "status")
    out = _status(s, index, "status after adding the corpus")
    if not out.exists or out.passages != len(ps):
        fail(
            f"status after adding {len(ps)} passages said exists={out.exists}, "
            f"passages={out.passages}"
        )
    if out.bytes_used is not None and out.bytes_used < 0:
        fail(f"status reported a negative size ({out.bytes_used} bytes)")


@_check("search.empty_index", "Searching an index that holds nothing answers INDEX_EMPTY")
def _empty(s: Subject) -> None:
    _search(s, s.index("empty"), "fox", "search on an index never written", ("INDEX_EMPTY",))
    if s.claims("deletion"):
        index = s.index("emptied")
        ps = corpus()[:2]
        _add(s, index, ps, "add of two passages")
        _remove(s, index, [p.id for p in ps], "remove of both passages")
        _search(
            s, index, "fox", "search on an index whose passages were all removed", ("INDEX_EMPTY",)
        )


@_check(
    "search.no_match",
    "An index with passages but no matching word answers NO_MATCH with searched equal to its "
    "passage count (a dense backend, which ranks every passage: SEARCHED or NO_MATCH)",
)
def _no_match(s: Subject) -> None:
    index, ps = _filled(s, "nomatch")
    what = "search on an index with no match"
    if not s.claims("dense"):
        out: NoMatch | Searched = _search(s, index, NO_MATCH_QUERY, what, ("NO_MATCH",))
    else:
        # Nearest neighbours exist for any query vector, so hits are allowed; they must still
        # be real hits, and the answer must still say it searched the whole index.
        out = _search(s, index, NO_MATCH_QUERY, what, ("SEARCHED", "NO_MATCH"))
        if isinstance(out, Searched):
            _check_hits(s, out, 10, _by_id(ps), what, count=len(ps))
    if out.searched != len(ps):
        fail(
            f"search on an index with no match reported searched={out.searched}, but the "
            f"index holds {len(ps)} passage(s)"
        )


@_check(
    "search.hits",
    "Hits: ranks 1..n, at most top_k, finite ordered scores on the declared "
    "scale, each passage exactly as added with a content-addressed id",
)
def _hits(s: Subject) -> None:
    index, ps = _filled(s, "hits")
    added = _by_id(ps)
    fox = ps[0]
    out = _search(s, index, "fox", "search for 'fox'")
    ids = _check_hits(s, out, 10, added, "search for 'fox'", count=len(ps))
    if fox.id not in ids:
        fail("search for 'fox' did not return the one passage about foxes")
    many = "fox glaciers violin chess honeybees danube"
    for k in (1, 3, 50):
        out = _search(s, index, many, f"search for {many!r} with top_k={k}", top_k=k)
        _check_hits(s, out, k, added, f"search with top_k={k}", count=len(ps))
        if k == 1 and len(out.hits) != 1:
            fail(f"search with top_k=1 returned {len(out.hits)} hits")
    out = _search(s, index, fox.text, "search for a passage's exact text")
    ids = _check_hits(s, out, 10, added, "search for a passage's exact text", count=len(ps))
    if fox.id not in ids:
        fail("search for a passage's exact text did not return that passage")
