"""Checks of metadata filters: equality, refusals, and the generated operator property."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from indexplug.filters import (
    ALL_OPS,
    EQUALITY_OPS,
    FIELD_OPS,
    LOGICAL_OPS,
    matches,
    parse_filter,
    to_json,
)
from indexplug.outcomes import (
    Removed,
    Searched,
)
from indexplug.passages import Passage
from indexplug.testing.checks.helpers import (
    _add,
    _by_id,
    _check_hits,
    _count,
    _describe,
    _filled,
    _op,
    _refused,
    _scan_all,
    _search,
    kit_passage,
)
from indexplug.testing.checks.registry import _check
from indexplug.testing.checks.subject import CheckFailed, Subject, fail


@_check(
    "filters.equality", "Metadata equality filters return only passages that match", claim="filters"
)
def _filters(s: Subject) -> None:
    index, ps = _filled(s, "filters")
    added = _by_id(ps)
    query = "fox renard mammals omnivorous honeybees glaciers volcanoes sourdough chess"
    cases: list[dict[str, str | int | float | bool]] = [
        {"topic": "animals"},
        {"lang": "fr"},
        {"year": 2001},
        {"reviewed": True},
        {"weight": 0.5},
        {"topic": "animals", "lang": "en"},
    ]
    for flt in cases:
        what = f"search with filters={flt}"
        out = _search(s, index, query, what, ("SEARCHED",), top_k=50, filters=flt)
        ids = _check_hits(s, out, 50, added, what)
        for pid in ids:
            meta = added[pid].metadata
            if any(meta.get(k) != v or type(meta.get(k)) is not type(v) for k, v in flt.items()):
                fail(f"{what} returned a passage whose metadata is {meta}")
        if flt == {"lang": "fr"} and ids != [ps[8].id]:
            fail(f"{what} did not return the one French passage")
    _search(
        s,
        index,
        query,
        "search with a filter no passage matches",
        ("NO_MATCH",),
        filters={"topic": "astronomy"},
    )


@_check(
    "filters.refused",
    "A filter the backend does not claim to serve is refused (InvalidRequest, BAD_REQUEST) by "
    "search and scan, never ignored; the operators it claims are ones indexplug.filters defines",
)
def _filters_refused(s: Subject) -> None:
    caps = s.capabilities
    assert caps is not None  # backend.declares fails a backend without Capabilities
    claimed_ops = frozenset(caps.filter_operators)
    unknown = sorted(claimed_ops - ALL_OPS)
    if unknown:
        fail(
            f"the backend claims filter operator(s) {', '.join(unknown)}, which "
            f"indexplug.filters does not define (operators: {', '.join(sorted(ALL_OPS))})"
        )
    served = claimed_ops or (EQUALITY_OPS if caps.filters is True else frozenset())
    index, _ = _filled(s, "refused")
    for op in sorted(ALL_OPS - served):
        flt = _FILTER_USING[op]
        shown = json.dumps(flt)
        why = (
            f"the backend does not claim {op}"
            if claimed_ops or caps.filters is True
            else "the backend claims no filters"
        )
        _refused(
            f"search with filters={shown} ({why})",
            partial(
                s.guard.search,
                index,
                "fox",
                top_k=10,
                deadline_s=s.settings.op_deadline_s,
                filters=flt,
            ),
        )
        if s.claims("scan"):
            _refused(
                f"scan with filters={shown} ({why})",
                partial(
                    s.guard.scan,
                    index,
                    filters=flt,
                    limit=10,
                    deadline_s=s.settings.op_deadline_s,
                ),
            )


_FILTER_USING: dict[str, dict[str, Any]] = {
    "$eq": {"topic": {"$eq": "animals"}},
    "$ne": {"topic": {"$ne": "animals"}},
    "$in": {"topic": {"$in": ["animals", "music"]}},
    "$nin": {"topic": {"$nin": ["animals", "music"]}},
    "$gt": {"year": {"$gt": 2004}},
    "$gte": {"year": {"$gte": 2004}},
    "$lt": {"year": {"$lt": 2004}},
    "$lte": {"year": {"$lte": 2004}},
    "$exists": {"topic": {"$exists": True}},
    "$and": {"$and": [{"topic": "animals"}, {"lang": "en"}]},
    "$or": {"$or": [{"topic": "animals"}, {"lang": "fr"}]},
    "$not": {"$not": {"topic": "animals"}},
}
"""A filter over the kit's corpus using each operator (and otherwise only ``$eq``)."""


def _meta_of(p: Passage) -> str:
    return json.dumps(dict(p.metadata), ensure_ascii=False, default=list)


def _judge_selection(
    what: str, got: Sequence[str], want: Sequence[str], by_id: Mapping[str, Passage]
) -> None:
    """``got`` (ids a backend answered) must be exactly ``want`` (ids
    :func:`indexplug.filters.matches` selects): name one passage of each disagreement."""
    extra = [i for i in got if i not in set(want)]
    lost = [i for i in want if i not in set(got)]
    if not extra and not lost:
        return
    parts = []
    if extra:
        parts.append(
            f"{len(extra)} passage(s) that indexplug.filters.matches rejects were returned "
            f"(e.g. one with metadata {_meta_of(by_id[extra[0]])})"
        )
    if lost:
        parts.append(
            f"{len(lost)} passage(s) that indexplug.filters.matches selects were not returned "
            "(e.g. one with metadata "
            f"{_meta_of(by_id[lost[0]])})"
        )
    fail(f"{what}: {'; '.join(parts)}")


_PROP_FIELDS = ("a", "b", "c")
_PROP_ABSENT = "d"
"""A field no generated passage has: filters on it test what null/missing means."""
_PROP_STRINGS = ("x", "y", "Z", "é", "", "1", "x y")
_PROP_NUMBERS = (0, 1, 2, -3, 1.0, 0.5, 2.5, 1e3)
_PROP_BOOLS = (True, False)


def _property_strategies(ops: frozenset[str]) -> tuple[Any, Any]:
    """Hypothesis strategies of a passage's metadata and of a filter using only ``ops``."""
    from hypothesis import strategies as st

    scalar = st.sampled_from((*_PROP_STRINGS, *_PROP_NUMBERS, *_PROP_BOOLS))
    # a list holds values of one kind (strings, numbers or booleans); fields take every kind
    lists = st.one_of(
        st.lists(st.sampled_from(_PROP_STRINGS), max_size=3),
        st.lists(st.sampled_from(_PROP_NUMBERS), max_size=3),
        st.lists(st.sampled_from(_PROP_BOOLS), max_size=2),
    )
    value = st.one_of(scalar, st.none(), lists)
    metadata = st.dictionaries(st.sampled_from(_PROP_FIELDS), value, max_size=len(_PROP_FIELDS))
    field_name = st.sampled_from((*_PROP_FIELDS, _PROP_ABSENT))
    nullable = st.one_of(scalar, st.none())
    ranged = st.sampled_from((*_PROP_STRINGS, *_PROP_NUMBERS))
    arguments: dict[str, Any] = {
        "$eq": nullable,
        "$ne": nullable,
        "$in": st.lists(nullable, min_size=1, max_size=3),
        "$nin": st.lists(nullable, min_size=1, max_size=3),
        "$gt": ranged,
        "$gte": ranged,
        "$lt": ranged,
        "$lte": ranged,
        "$exists": st.booleans(),
    }
    leaves = [
        st.builds(lambda f, v, op=op: {f: {op: v}}, field_name, arguments[op])
        for op in sorted(ops & FIELD_OPS)
    ]
    leaf = st.one_of(*leaves)
    logical = sorted(ops & LOGICAL_OPS)
    if not logical:
        return metadata, leaf

    def combine(children: Any) -> Any:
        made = []
        if "$and" in logical:
            made.append(st.lists(children, min_size=1, max_size=3).map(lambda x: {"$and": x}))
        if "$or" in logical:
            made.append(st.lists(children, min_size=1, max_size=3).map(lambda x: {"$or": x}))
        if "$not" in logical:
            made.append(children.map(lambda x: {"$not": x}))
        return st.one_of(*made)

    return metadata, st.recursive(leaf, combine, max_leaves=6)


@_check(
    "filters.operators",
    "For generated metadata (strings, numbers, booleans, null, lists) and generated filters "
    "over the claimed operators, search and scan return exactly the passages "
    "indexplug.filters.matches selects (and remove by filter removes exactly them)",
    claim="filter_operators",
)
def _filters_property(s: Subject) -> None:
    try:
        from hypothesis import HealthCheck, Phase, Verbosity, given, settings
        from hypothesis import strategies as st
    except ImportError:
        fail("this check needs hypothesis: install indexplug[testing]")
    caps = s.capabilities
    assert caps is not None
    ops = frozenset(caps.filter_operators) & ALL_OPS
    if not ops & FIELD_OPS:
        fail(
            f"the backend claims filter operators {sorted(caps.filter_operators)} but no field "
            f"operator ({', '.join(sorted(FIELD_OPS))}): no filter can use only those"
        )
    metadata, filters = _property_strategies(ops)
    st_ = s.settings
    n = st_.property_passages
    failures: list[str] = []

    @settings(
        max_examples=st_.property_examples,
        database=None,
        derandomize=True,
        deadline=None,
        phases=(Phase.generate,),
        report_multiple_bugs=False,
        verbosity=Verbosity.quiet,
        suppress_health_check=list(HealthCheck),
    )
    @given(metas=st.lists(metadata, min_size=n, max_size=n), data=st.data())
    def example(metas: list[dict[str, Any]], data: Any) -> None:
        try:
            _filters_example(s, metas, [data.draw(filters) for _ in range(st_.property_filters)])
        except CheckFailed as exc:
            failures.append(str(exc))
            raise

    try:
        example()
    except Exception as exc:
        if failures:
            fail(failures[0])
        fail(f"the generated examples could not run: {_describe(exc)}")


def _filters_example(s: Subject, metas: list[dict[str, Any]], filters: list[Any]) -> None:
    index = s.index("ops")
    ps = [  # passages of their own (uris of this index): each example is a corpus apart
        kit_passage(f"propword generated passage {i}", i, tag=index, metadata=m)
        for i, m in enumerate(metas)
    ]
    by_id = _by_id(ps)
    _add(s, index, ps, f"add of {len(ps)} passages with generated metadata")
    for raw in filters:
        flt = parse_filter(raw)
        assert flt is not None
        shown = json.dumps(to_json(flt), ensure_ascii=False)
        want = [p.id for p in ps if matches(flt, p.metadata)]
        what = f"search for a word every passage holds with filters={shown}"
        codes = ("SEARCHED", "NO_MATCH") if want else ("NO_MATCH",)
        out = _search(s, index, "propword", what, codes, top_k=len(ps), filters=flt)
        got = _check_hits(s, out, len(ps), by_id, what) if isinstance(out, Searched) else []
        _judge_selection(what, got, want, by_id)
        if s.claims("scan"):
            what = f"scan with filters={shown}"
            page = _scan_all(s, index, what, len(want), filters=flt, limit=len(ps))
            _judge_selection(what, [p.id for p in page], want, by_id)
    if filters and s.claims("scan") and s.claims("deletion"):
        # remove by filter (the guard scans, then removes the ids): the last filter's passages
        flt = parse_filter(filters[-1])
        assert flt is not None
        shown = json.dumps(to_json(flt), ensure_ascii=False)
        want = [p.id for p in ps if matches(flt, p.metadata)]
        what = f"remove with filters={shown}"
        d = s.settings.op_deadline_s
        rm: Removed = _op(
            "remove",
            what,
            ("REMOVED",),
            index,
            lambda: s.guard.remove(index, filters=flt, deadline_s=d),
        )
        _judge_selection(what, rm.removed_ids, want, by_id)
        left = _count(s, index, f"status after {what}")
        if left != len(ps) - len(want):
            fail(f"after {what} removed {len(want)} of {len(ps)} passages, status reports {left}")
