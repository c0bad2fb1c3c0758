"""Haystack filters as indexplug operator filters, exactly.

:func:`translate` walks a Haystack filter (``{"field", "operator", "value"}`` comparisons,
``{"operator": "AND"|"OR"|"NOT", "conditions": [...]}``), refuses a malformed one with
``FilterError`` before anything is read, and answers a :class:`Plan`:

* ``pushdown``: an indexplug filter the backend runs (``None``: every passage);
* ``exact``: whether the backend's answer is exactly Haystack's.  When it is not, the
  pushdown is a *superset* and every passage it lets through is checked with Haystack's own
  reference, :func:`haystack.utils.filters.document_matches_filter` (see :func:`residual`).

What has no exact indexplug form (and is checked on the passages read back): the ordering
operators ``> >= < <=`` (Haystack compares ISO date strings as datetimes and raises
``FilterError`` on a type mismatch), equality with a string that is an ISO date (equal
instants written differently are equal), fields other than ``meta.<key>`` (``content``,
``id``, nested ``meta.a.b``), and values that are lists, dicts, non-finite or beyond 2**53.

The pushdown keeps Haystack's errors: a document the pushdown leaves out is one on which
Haystack's evaluation is false *without raising* (an ``AND`` pushes down its conditions only up
to the first one that may raise, as Haystack's ``all()`` stops at the first false one).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from haystack.dataclasses import Document
from haystack.errors import FilterError
from haystack.utils.filters import document_matches_filter
from indexplug.filters import MAX_FIELD_CHARS, MAX_IN_VALUES, And, Condition, Filter, Not, Or

from indexplug_haystack.codec import ENCODED_KEY, MAX_EXACT_INT, RECORD_KEY, RESERVED_PREFIX

COMPARISONS = frozenset({"==", "!=", ">", ">=", "<", "<=", "in", "not in"})
LOGICAL = frozenset({"AND", "OR", "NOT"})
_ORDERING = frozenset({">", ">=", "<", "<="})
_DOCUMENT_FIELDS = frozenset(
    {"id", "content", "blob", "meta", "score", "embedding", "sparse_embedding"}
)
NOTHING: Filter = Condition(RECORD_KEY, "$in", ())
"""A filter no passage passes (``$in []`` never holds)."""


@dataclass(frozen=True)
class Plan:
    """How to run one Haystack filter on an indexplug index."""

    pushdown: Filter | None
    """What the backend filters with (``None``: every passage)."""
    exact: bool
    """Whether ``pushdown`` is exactly the Haystack filter; else a superset, to be checked."""
    may_raise: bool
    """Whether Haystack's evaluation of it may raise ``FilterError`` on some document."""


EVERYTHING = Plan(None, True, False)


def translate(filters: Any) -> Plan:
    """The :class:`Plan` of a Haystack filter (``None`` or ``{}``: no filter)."""
    if filters is None:
        return EVERYTHING
    if not isinstance(filters, dict):
        raise FilterError(f"filters must be a dict, got {type(filters).__name__}")
    if not filters:
        return EVERYTHING
    return _node(filters, 1)


def _node(node: Any, depth: int) -> Plan:
    if not isinstance(node, dict):
        raise FilterError(f"a filter condition must be a dict, got {type(node).__name__}")
    if depth > 64:
        raise FilterError("a filter may nest at most 64 levels")
    if "field" in node:
        return _comparison(node)
    if "operator" not in node:
        raise FilterError(f"'operator' key missing in {node}")
    if "conditions" not in node:
        raise FilterError(f"'conditions' key missing in {node}")
    op = node["operator"]
    if op not in LOGICAL:
        raise FilterError(
            f"Unknown logical operator {op!r}. Valid operators are: {sorted(LOGICAL)}"
        )
    conditions = node["conditions"]
    if not isinstance(conditions, list):
        raise FilterError(f"'conditions' of {op} must be a list, got {type(conditions).__name__}")
    children = [_node(c, depth + 1) for c in conditions]
    if op == "OR":
        return _or(children)
    conj = _and(children)
    if op == "AND":
        return conj
    # NOT is "not all(...)": exact only when the AND is
    if conj.exact:
        return Plan(NOTHING if conj.pushdown is None else Not(conj.pushdown), True, False)
    return Plan(None, False, conj.may_raise)


def _and(children: list[Plan]) -> Plan:
    items: list[Filter] = []
    for child in children:
        if child.pushdown is not None:
            items.append(child.pushdown)
        if child.may_raise:
            break  # a later condition may not narrow what Haystack would have raised on
    exact = all(c.exact for c in children)
    may_raise = any(c.may_raise for c in children)
    return Plan(_join(And, items), exact, may_raise)


def _or(children: list[Plan]) -> Plan:
    exact = all(c.exact for c in children)
    may_raise = any(c.may_raise for c in children)
    if not children:
        return Plan(NOTHING, True, False)  # any([]) is False
    if any(c.pushdown is None for c in children):
        return Plan(None, exact, may_raise)
    return Plan(
        _join(Or, [c.pushdown for c in children if c.pushdown is not None]), exact, may_raise
    )


def _join(kind: type[And] | type[Or], items: list[Filter]) -> Filter | None:
    if not items:
        return None
    if len(items) == 1:
        return items[0]
    return kind(tuple(items))


def _comparison(node: dict[str, Any]) -> Plan:
    field = node["field"]
    if not isinstance(field, str):
        raise FilterError(f"'field' must be a string, got {type(field).__name__}")
    if "operator" not in node:
        raise FilterError(f"'operator' key missing in {node}")
    if "value" not in node:
        raise FilterError(f"'value' key missing in {node}")
    op, value = node["operator"], node["value"]
    if op not in COMPARISONS:
        raise FilterError(
            f"Unknown comparison operator {op!r}. Valid operators are: {sorted(COMPARISONS)}"
        )
    if op in ("in", "not in") and not isinstance(value, list):
        raise FilterError(
            f"Filter value must be a `list` when using operator 'in' or 'not in', "
            f"received type '{type(value)}'"
        )
    if op in _ORDERING:
        if isinstance(value, list):
            raise FilterError(
                f"Filter value can't be of type {type(value)} using operators '>', '>=', '<', '<='"
            )
        if value is None:
            return Plan(NOTHING, True, False)  # Haystack: never true, never raises
        return Plan(None, False, True)
    key = _meta_key(field)
    if key is None:
        return Plan(None, False, False)
    eq = _equals(key, value) if op in ("==", "!=") else _in(key, value)
    if eq is None:
        return Plan(None, False, False)
    # a document whose value is kept only in the adapter's record (a list, a dict...) is never
    # equal to a scalar: leave it out explicitly (the backend sees no value there)
    exact_eq: Filter = And((eq, Condition(ENCODED_KEY, "$ne", key)))
    if op in ("!=", "not in"):
        return Plan(Not(exact_eq), True, False)
    return Plan(exact_eq, True, False)


def _meta_key(field: str) -> str | None:
    """The metadata key a field names, when the backend can filter on it; else ``None``."""
    if field.startswith("meta."):
        key = field[len("meta.") :]
        if "." in key:
            return None  # a nested value: kept in the record
    elif "." in field or field in _DOCUMENT_FIELDS:
        return None  # a Document field, or a dotted path Haystack reads off the Document
    else:
        key = field  # a legacy filter: a bare name is a meta key
    if (
        not key
        or key.startswith("$")
        or len(key) > MAX_FIELD_CHARS
        or "\x00" in key
        or key == RECORD_KEY
        or key.startswith(RESERVED_PREFIX)
        or not _unicode(key)
    ):
        return None
    return key


def _unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _equals(key: str, value: Any) -> Filter | None:
    """Haystack's ``meta[key] == value`` over flat metadata (``None``: no exact form)."""
    if value is None:
        return Condition(key, "$eq", None)
    if type(value) is bool:
        return Condition(key, "$in", (value, int(value)))  # True == 1 == 1.0 in Python
    if type(value) in (int, float):
        if type(value) is float and not math.isfinite(value):
            return None
        if abs(value) > MAX_EXACT_INT:
            return None
        if value == 1:
            return Condition(key, "$in", (value, True))
        if value == 0:
            return Condition(key, "$in", (value, False))
        return Condition(key, "$eq", value)
    if type(value) is str:
        if "\x00" in value or not _unicode(value) or _is_iso_date(value):
            return None
        return Condition(key, "$eq", value)
    return None


def _in(key: str, values: list[Any]) -> Filter | None:
    """Haystack's ``meta[key] in values``: any of them equal."""
    if not values:
        return NOTHING
    if len(values) > MAX_IN_VALUES:
        return None
    parts = [_equals(key, v) for v in values]
    if any(p is None for p in parts):
        return None
    return _join(Or, [p for p in parts if p is not None])


def _is_iso_date(value: str) -> bool:
    """Whether Haystack's ``==`` may read ``value`` as a date (then equal instants spelt
    differently are equal, which no string equality says)."""
    looks = (
        len(value) >= 10
        and value[:4].isdigit()
        and value[4] == "-"
        and value[5:7].isdigit()
        and value[7] == "-"
        and value[8:10].isdigit()
    )
    return looks


def residual(filters: dict[str, Any] | None, document: Document) -> bool:
    """Haystack's own meaning of ``filters`` on one document (raises ``FilterError`` as
    Haystack does)."""
    if not filters:
        return True
    return bool(document_matches_filter(filters, document))
