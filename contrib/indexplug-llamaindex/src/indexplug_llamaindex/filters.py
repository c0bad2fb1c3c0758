"""LlamaIndex ``MetadataFilters`` translated into indexplug's operator filters, exactly.

Each LlamaIndex operator becomes the indexplug operator with the same meaning under indexplug's
value model (``docs/concepts.md``, "Filters": a missing key, ``null`` and ``[]`` have no
values, a scalar is one value, a list's values are its elements).  An operator indexplug cannot
express (``TEXT_MATCH``, ``TEXT_MATCH_INSENSITIVE``: substring tests) and a ``None`` value
(whose meaning differs between LlamaIndex stores) raise :class:`UnsupportedFilter`; nothing is
approximated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import indexplug
from indexplug.filters import And, Condition, Filter, Not, Or, parse_filter, to_json
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)

_SCALAR_OPS: dict[FilterOperator, str] = {
    FilterOperator.EQ: "$eq",
    FilterOperator.NE: "$ne",
    FilterOperator.GT: "$gt",
    FilterOperator.GTE: "$gte",
    FilterOperator.LT: "$lt",
    FilterOperator.LTE: "$lte",
}
_LIST_OPS: dict[FilterOperator, str] = {
    FilterOperator.IN: "$in",
    FilterOperator.NIN: "$nin",
    FilterOperator.ANY: "$in",
}
MAX_IN = 1024
"""Most values in one indexplug ``$in`` (longer lists of node or document ids are split)."""


class UnsupportedFilter(indexplug.InvalidRequest):
    """A LlamaIndex filter with no exact indexplug translation (a ``ValueError``)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, field="filters")


FilterInput = MetadataFilters | Mapping[str, Any] | Filter | None
"""What adapters take as ``filters``: LlamaIndex ``MetadataFilters``, an indexplug filter as
JSON (``{"year": {"$gte": 2020}}``) or a parsed indexplug filter."""


def translate(filters: FilterInput) -> dict[str, Any] | None:
    """``filters`` as indexplug filter JSON (``None``: no filter), checked by
    :func:`indexplug.filters.parse_filter` so that a bad filter is refused here, up front."""
    if filters is None:
        return None
    if isinstance(filters, MetadataFilters):
        out = None if not filters.filters else _filters(filters, top=True)
    elif isinstance(filters, (Condition, And, Or, Not)):
        parsed = parse_filter(filters)
        out = None if parsed is None else to_json(parsed)
    elif isinstance(filters, Mapping):
        out = dict(filters) or None
    else:
        raise UnsupportedFilter(
            f"filters must be MetadataFilters or an indexplug filter, not {type(filters).__name__}"
        )
    parse_filter(out)
    return out


def all_of(*parts: dict[str, Any] | None) -> dict[str, Any] | None:
    """The ``$and`` of the filters given (``None`` parts left out)."""
    present = [p for p in parts if p]
    if not present:
        return None
    return present[0] if len(present) == 1 else {"$and": present}


def one_of(field: str, values: Sequence[str]) -> dict[str, Any]:
    """``field`` is one of ``values`` (split into ``$in`` lists of at most :data:`MAX_IN`)."""
    chunks = [list(values[i : i + MAX_IN]) for i in range(0, len(values), MAX_IN)] or [[]]
    parts = [{field: {"$in": c}} for c in chunks]
    return parts[0] if len(parts) == 1 else {"$or": parts}


def _filters(f: MetadataFilters, *, top: bool = False) -> dict[str, Any]:
    if not f.filters:
        raise UnsupportedFilter(
            "a nested MetadataFilters has no filters (it would be always true or always false)"
        )
    items = [_filters(i) if isinstance(i, MetadataFilters) else _one(i) for i in f.filters]
    condition = f.condition or FilterCondition.AND
    if condition == FilterCondition.NOT:
        # LlamaIndex: NOT holds when none of the filters hold
        return {"$not": items[0] if len(items) == 1 else {"$or": items}}
    if len(items) == 1:
        return items[0]
    if condition == FilterCondition.OR:
        return {"$or": items}
    if condition == FilterCondition.AND:
        return {"$and": items}
    raise UnsupportedFilter(f"unknown filter condition {condition!r}")  # pragma: no cover


def _one(f: MetadataFilter) -> dict[str, Any]:
    key, op, value = f.key, FilterOperator(f.operator), f.value
    where = f"filter on {key!r} with {op.name}"
    if op == FilterOperator.IS_EMPTY:
        # LlamaIndex: missing, None, "" or []; indexplug: $exists false is missing/null/[]
        return {"$or": [{key: {"$exists": False}}, {key: {"$eq": ""}}]}
    if op in (FilterOperator.TEXT_MATCH, FilterOperator.TEXT_MATCH_INSENSITIVE):
        raise UnsupportedFilter(
            f"{where}: indexplug filters have no substring test (operators: $eq $ne $in $nin "
            "$gt $gte $lt $lte $exists); filter on whole values instead"
        )
    if value is None:
        raise UnsupportedFilter(
            f"{where}: a None value has no single meaning across LlamaIndex stores; use "
            "IS_EMPTY for a missing or empty field"
        )
    if op in _SCALAR_OPS or op == FilterOperator.CONTAINS:
        if isinstance(value, list):
            raise UnsupportedFilter(f"{where} takes one value, not a list (use IN or ANY)")
        # CONTAINS (a list field holds the value) is indexplug's $eq, which tests membership
        return {key: {_SCALAR_OPS.get(op, "$eq"): value}}
    if not isinstance(value, list):
        raise UnsupportedFilter(f"{where} takes a list of values")
    if op in _LIST_OPS:
        name = _LIST_OPS[op]
        parts = [{key: {name: list(value[i : i + MAX_IN])}} for i in range(0, len(value), MAX_IN)]
        if len(parts) <= 1:
            return {key: {name: list(value)}}
        return {"$and": parts} if name == "$nin" else {"$or": parts}
    if op == FilterOperator.ALL:
        if not value:
            return {key: {"$exists": True}}
        each = [{key: {"$eq": v}} for v in value]
        return each[0] if len(each) == 1 else {"$and": each}
    raise UnsupportedFilter(f"{where}: unknown operator")  # pragma: no cover
