"""Metadata filters: one small operator language, parsed once, served the same everywhere.

A filter is JSON in the MongoDB style that LangChain, LlamaIndex and Chroma users know::

    {"lang": "en"}                                  # equality (the short form)
    {"year": {"$gte": 2020, "$lt": 2024}}           # several operators on a field: all hold
    {"$or": [{"tags": "ml"}, {"draft": {"$exists": false}}]}
    {"$not": {"status": {"$in": ["retracted", "withdrawn"]}}}

Field operators: ``$eq $ne $in $nin $gt $gte $lt $lte $exists``; combinators ``$and $or
$not``; several keys in one object are an ``$and``.  :func:`parse_filter` turns the JSON into a
:data:`Filter` tree (or raises :class:`~indexplug.errors.InvalidRequest`, a BAD_REQUEST) and
:func:`matches` is the reference meaning every backend is held to by the conformance kit.

The meaning, chosen so that SQLite's JSON functions, Elasticsearch and an in-memory scan can
all serve it exactly:

* A field's *values* are: nothing when the key is missing, null or an empty list; the value
  itself for a scalar; the elements for a list.  Null and missing are the same thing.
* ``$eq v`` holds when ``v`` is one of the values (so it tests list membership); ``$eq null``
  holds when there are no values.  ``$ne`` is its negation, so it holds on a missing key.
* ``$in``/``$nin``: any / none of the listed values is one of the field's values.
* ``$gt $gte $lt $lte``: some value compares so, numbers with numbers, strings with strings
  (by code point); a value of the other kind never compares.
* ``$exists true`` holds when there is at least one value.
* Equality is by JSON type: ``1`` and ``1.0`` are the same number, but ``true`` is not ``1``
  and ``"1"`` is not ``1``.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from indexplug.errors import InvalidRequest

Scalar = str | int | float | bool
FieldOp = Literal["$eq", "$ne", "$in", "$nin", "$gt", "$gte", "$lt", "$lte", "$exists"]
FIELD_OPS: frozenset[str] = frozenset(
    {"$eq", "$ne", "$in", "$nin", "$gt", "$gte", "$lt", "$lte", "$exists"}
)
LOGICAL_OPS: frozenset[str] = frozenset({"$and", "$or", "$not"})
ALL_OPS: frozenset[str] = FIELD_OPS | LOGICAL_OPS
"""Every operator of the language: what a backend claims in
:attr:`indexplug.protocols.Capabilities.filter_operators` when it serves them all."""
EQUALITY_OPS: frozenset[str] = frozenset({"$eq", "$and"})
"""What a backend that claims only ``filters=True`` (equality on scalars) serves."""

MAX_FILTER_NODES = 256
MAX_FILTER_DEPTH = 16
MAX_IN_VALUES = 1024
MAX_FIELD_CHARS = 256


@dataclass(frozen=True, slots=True)
class Condition:
    """``field op value``: one test on one metadata key."""

    field: str
    op: FieldOp
    value: Any
    """A scalar or ``None`` for ``$eq``/``$ne``; a tuple of those for ``$in``/``$nin``; a
    number or string for the ranges; a bool for ``$exists``."""


@dataclass(frozen=True, slots=True)
class And:
    items: tuple[Filter, ...]


@dataclass(frozen=True, slots=True)
class Or:
    items: tuple[Filter, ...]


@dataclass(frozen=True, slots=True)
class Not:
    item: Filter


Filter = Condition | And | Or | Not
"""A parsed filter: what backends that claim operators receive in ``filters=``."""


def _bad(reason: str) -> InvalidRequest:
    return InvalidRequest(reason, field="filters")


def _scalar(value: Any, where: str, *, null: bool = True) -> Scalar | None:
    if value is None and null:
        return None
    if type(value) in (str, bool, int):
        if type(value) is str:
            if "\x00" in value:
                raise _bad(f"{where}: a filter value contains a NUL character")
            _unicode(value, f"{where}: a filter value")
        return value  # type: ignore[no-any-return]
    if type(value) is float:
        if not math.isfinite(value):
            raise _bad(f"{where}: a filter value is not a finite number")
        return value  # type: ignore[no-any-return]
    kinds = "a string, number, boolean" + (" or null" if null else "")
    raise _bad(f"{where}: expected {kinds}, got {type(value).__name__}")


def _unicode(text: str, what: str) -> None:
    """Refuse text that is not Unicode (a lone surrogate, which JSON's ``"\\ud800"`` escape
    parses to): no passage can hold it and no backend can encode it, so it is a bad request,
    not a failure of the index."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise _bad(f"{what} is not Unicode text (it holds a lone surrogate)") from None


def _field_name(name: Any) -> str:
    if type(name) is not str:
        raise _bad("a filter key must be a string")
    if "\x00" in name:
        raise _bad("a filter key contains a NUL character")
    _unicode(name, "a filter key")
    if len(name) > MAX_FIELD_CHARS:
        raise _bad(f"a filter key is longer than {MAX_FIELD_CHARS} characters")
    if name.startswith("$"):
        # Keys that start with '$' are operators (as in MongoDB and Chroma), so a metadata
        # key spelt that way cannot be filtered on: refused, never read as a field.
        raise _bad(
            f"unknown operator {name!r} (operators: {', '.join(sorted(ALL_OPS))}; a metadata "
            "key that starts with '$' cannot be filtered on)"
        )
    return name


def _is_ops(spec: Any) -> bool:
    """Whether a field's spec is an object of operators (``{"$gt": 1}``), not a value."""
    return isinstance(spec, Mapping) and bool(spec) and all(str(k).startswith("$") for k in spec)


class _Parser:
    """Builds the tree, counting its nodes and levels as it goes (so the limits bound the
    parsed :data:`Filter`, the thing a backend translates, and a huge or deep input is refused
    before it is walked)."""

    def __init__(self) -> None:
        self.nodes = 0

    def count(self, level: int) -> None:
        """One more node of the tree, at ``level`` (the root is level 1)."""
        self.nodes += 1
        if self.nodes > MAX_FILTER_NODES:
            raise _bad(
                f"a filter may have at most {MAX_FILTER_NODES} nodes (conditions and $and/$or/$not)"
            )
        if level > MAX_FILTER_DEPTH:
            raise _bad(f"a filter may nest at most {MAX_FILTER_DEPTH} levels")

    def expr(self, obj: Any, level: int) -> Filter:
        if not isinstance(obj, Mapping) or not obj:
            raise _bad("a filter is a non-empty JSON object")
        if level > MAX_FILTER_DEPTH:
            raise _bad(f"a filter may nest at most {MAX_FILTER_DEPTH} levels")
        width = sum(len(v) if k not in LOGICAL_OPS and _is_ops(v) else 1 for k, v in obj.items())
        if width > 1:  # several parts: the object is an $and of them, one level up
            self.count(level)
            level += 1
        parts: list[Filter] = []
        for key, value in obj.items():
            if key in ("$and", "$or"):
                if not isinstance(value, list) or not value:
                    raise _bad(f"{key} takes a non-empty list of filters")
                self.count(level)
                items = tuple(self.expr(v, level + 1) for v in value)
                parts.append(And(items) if key == "$and" else Or(items))
            elif key == "$not":
                self.count(level)
                parts.append(Not(self.expr(value, level + 1)))
            else:
                parts.extend(self.field(_field_name(key), value, level))
        return parts[0] if len(parts) == 1 else And(tuple(parts))

    def field(self, name: str, spec: Any, level: int) -> list[Filter]:
        if _is_ops(spec):
            out: list[Filter] = []
            for op, value in spec.items():
                self.count(level)
                out.append(self.condition(name, op, value))
            return out
        if isinstance(spec, Mapping):
            raise _bad(f"{name}: a field's filter is a value or an object of operators")
        if isinstance(spec, list):
            raise _bad(f"{name}: a list is not a value to compare; use $in")
        self.count(level)
        return [Condition(name, "$eq", _scalar(spec, name))]

    def condition(self, name: str, op: Any, value: Any) -> Condition:
        where = f"{name}.{op}"
        if op in ("$eq", "$ne"):
            return Condition(name, op, _scalar(value, where))
        if op in ("$in", "$nin"):
            if not isinstance(value, list):
                raise _bad(f"{where} takes a list of values")
            if len(value) > MAX_IN_VALUES:
                raise _bad(f"{where} takes at most {MAX_IN_VALUES} values")
            return Condition(name, op, tuple(_scalar(v, where) for v in value))
        if op in ("$gt", "$gte", "$lt", "$lte"):
            v = _scalar(value, where, null=False)
            if type(v) is bool:
                raise _bad(f"{where} compares numbers or strings, not booleans")
            return Condition(name, op, v)
        if op == "$exists":
            if type(value) is not bool:
                raise _bad(f"{where} takes true or false")
            return Condition(name, op, value)
        raise _bad(f"unknown operator {op!r} (operators: {', '.join(sorted(FIELD_OPS))})")


def parse_filter(obj: Any) -> Filter | None:
    """The :data:`Filter` of a JSON filter (``None`` for ``None`` or ``{}``: no filter).

    Raises :class:`~indexplug.errors.InvalidRequest` (``field="filters"``) naming what is
    wrong.  A :data:`Filter` built in Python is checked as its JSON would be (the same rules
    and limits: the dataclasses check nothing themselves) and answered in the parsed form."""
    if obj is None:
        return None
    if isinstance(obj, (Condition, And, Or, Not)):
        with _PARSED_LOCK:
            if _PARSED.get(id(obj)) is obj:  # made here: already checked
                return obj
        _check_shape(obj)
        return _remember(_Parser().expr(to_json(obj), 1))
    if isinstance(obj, Mapping) and not obj:
        return None
    return _remember(_Parser().expr(obj, 1))


_PARSED: dict[int, Filter] = {}
"""The filters :func:`parse_filter` made lately, by ``id`` (held, so an id is not reused while
it is here): the guard, and backends after it, parse the filter they are given again, and a
filter made here needs no second check."""
_PARSED_LOCK = threading.Lock()
_PARSED_MAX = 256


def _remember(f: Filter) -> Filter:
    with _PARSED_LOCK:
        while len(_PARSED) >= _PARSED_MAX:
            del _PARSED[next(iter(_PARSED))]
        _PARSED[id(f)] = f
    return f


def _check_shape(f: Filter) -> None:
    """Refuse a built :data:`Filter` over the limits or with nodes of other types, without
    recursion (so that :func:`to_json` of it is safe)."""
    nodes = 0
    stack: list[tuple[Any, int]] = [(f, 1)]
    while stack:
        node, level = stack.pop()
        nodes += 1
        if nodes > MAX_FILTER_NODES:
            raise _bad(
                f"a filter may have at most {MAX_FILTER_NODES} nodes (conditions and $and/$or/$not)"
            )
        if level > MAX_FILTER_DEPTH:
            raise _bad(f"a filter may nest at most {MAX_FILTER_DEPTH} levels")
        if isinstance(node, (And, Or)):
            if not isinstance(node.items, (tuple, list)):
                raise _bad(f"{type(node).__name__}.items is a tuple of filters")
            stack.extend((item, level + 1) for item in node.items)
        elif isinstance(node, Not):
            stack.append((node.item, level + 1))
        elif not isinstance(node, Condition):
            raise _bad(f"a filter node is a {type(node).__name__}, not a Condition, And, Or or Not")


def walk(f: Filter) -> Iterator[Filter]:
    """Every node of ``f``, ``f`` first."""
    yield f
    if isinstance(f, (And, Or)):
        for item in f.items:
            yield from walk(item)
    elif isinstance(f, Not):
        yield from walk(f.item)


def operators(f: Filter) -> frozenset[str]:
    """The operators ``f`` uses (a bare several-key object counts as ``$and``)."""
    used: set[str] = set()
    for node in walk(f):
        if isinstance(node, Condition):
            used.add(node.op)
        else:
            used.add({And: "$and", Or: "$or", Not: "$not"}[type(node)])
    return frozenset(used)


def equality_map(f: Filter) -> dict[str, Scalar] | None:
    """``f`` as ``{key: value}`` when it is only equalities on scalars, joined by ``$and``
    (however nested: what a backend claiming just ``filters=True`` is given), else ``None``
    (also when one key is asked to equal two different values: no single map says that)."""
    out: dict[str, Scalar] = {}
    pending: list[Filter] = [f]
    while pending:
        item = pending.pop(0)
        if isinstance(item, And):
            pending[:0] = item.items
            continue
        if not (isinstance(item, Condition) and item.op == "$eq" and item.value is not None):
            return None
        if item.field in out and not _same(out[item.field], item.value):
            return None
        out[item.field] = item.value
    return out


def to_json(f: Filter) -> dict[str, Any]:
    """``f`` as canonical JSON (every condition in the operator form): ``parse_filter`` of it
    gives ``f`` back."""
    if isinstance(f, Condition):
        value = list(f.value) if isinstance(f.value, tuple) else f.value
        return {f.field: {f.op: value}}
    if isinstance(f, And):
        return {"$and": [to_json(i) for i in f.items]}
    if isinstance(f, Or):
        return {"$or": [to_json(i) for i in f.items]}
    return {"$not": to_json(f.item)}


# -- the reference meaning ---------------------------------------------------------------


def values_of(metadata: Mapping[str, Any], field: str) -> list[Scalar]:
    """The values of ``field`` in ``metadata`` (see the module docstring)."""
    v = metadata.get(field)
    if v is None:
        return []
    if isinstance(v, list):
        return [x for x in v if x is not None]
    return [v]


def _kind(v: Any) -> str:
    if type(v) is bool:
        return "bool"
    if type(v) in (int, float):
        return "number"
    return "string"


def _same(a: Any, b: Any) -> bool:
    return _kind(a) == _kind(b) and a == b


def _has(values: list[Scalar], v: Any) -> bool:
    if v is None:
        return not values
    return any(_same(x, v) for x in values)


def _compare(values: list[Scalar], op: str, v: Any) -> bool:
    kind = _kind(v)
    for x in values:
        if _kind(x) != kind:
            continue
        if (
            (op == "$gt" and x > v)  # type: ignore[operator]
            or (op == "$gte" and x >= v)  # type: ignore[operator]
            or (op == "$lt" and x < v)  # type: ignore[operator]
            or (op == "$lte" and x <= v)  # type: ignore[operator]
        ):
            return True
    return False


def matches(f: Filter | None, metadata: Mapping[str, Any]) -> bool:
    """Whether a passage with ``metadata`` passes ``f``: the reference every backend's
    filtering is checked against."""
    if f is None:
        return True
    if isinstance(f, And):
        return all(matches(i, metadata) for i in f.items)
    if isinstance(f, Or):
        return any(matches(i, metadata) for i in f.items)
    if isinstance(f, Not):
        return not matches(f.item, metadata)
    values = values_of(metadata, f.field)
    if f.op == "$eq":
        return _has(values, f.value)
    if f.op == "$ne":
        return not _has(values, f.value)
    if f.op == "$in":
        return any(_has(values, v) for v in f.value)
    if f.op == "$nin":
        return not any(_has(values, v) for v in f.value)
    if f.op == "$exists":
        return bool(values) is f.value
    return _compare(values, f.op, f.value)
