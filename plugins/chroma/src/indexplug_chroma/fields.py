"""Filterable metadata in Chroma: typed fields, and filters translated to Chroma's ``where``.

Chroma's own comparisons differ from :func:`indexplug.filters.matches` (the meaning every
backend is held to): it has no ``$exists`` and no ``$not``; ``$eq`` on a list-valued key does
not look inside the list; ``$ne`` holds on a list that contains the value; lists must be
non-empty and of one type; null is refused; ``$gt`` compares numbers only.  So a passage's
metadata is not handed to Chroma as it is.  Each key ``k`` becomes typed fields that Chroma
can compare exactly:

* ``s:k``, ``i:k``, ``f:k``, ``b:k``: the key's string, integer, float and boolean values,
  each a non-empty list (a scalar is a list of one; null and ``[]`` give no fields at all);
* ``i<:k``/``i>:k`` and ``f<:k``/``f>:k``: the smallest and largest integer and float value
  ("some value > v" is "the largest > v");
* ``t:k``: tags, ``*`` when the key has any value, ``i``/``f``/``s`` when it has integers,
  floats or strings (so that "no integer value > v" can be said: Chroma's comparisons are
  false on a missing field, and ``$not_contains`` is true on one).

Then every operator is translated with its negation pushed down (Chroma has no ``$not``):
``$eq v`` is ``$contains`` on the field of ``v``'s type (an integer on the integer field,
``1`` and ``1.0`` being the same number, but never on the boolean one), ``$ne`` is
``$not_contains``, ``$exists`` is a tag, the ranges compare the extremes with bounds
converted so that Chroma only ever compares an integer field with an integer.  Strings,
booleans and integers are compared exactly.

Floats are not: Chroma compares a float in a filter as a 32-bit float (``0.1`` stored,
``$gt 0.09999999999999999`` finds nothing, ``$eq 0.09999999999999999`` finds it).  So a
comparison with a float field is only ever pushed down *widened*: ranges and equality become
ranges on the extremes with bounds moved outwards to 32-bit floats (:func:`_widened`), which
every matching record passes however Chroma rounds, and ``$ne``/``$nin`` on floats (whose
widening would be "anything") are not pushed down at all.  Such a translation, like ``$gt``
(etc.) on a *string*, which Chroma cannot compare (the keys holding strings are asked for),
is a superset: :attr:`Where.exact` is false and the backend checks every candidate with
:func:`indexplug.filters.matches` on the passage's exact metadata (the JSON in its record),
at the cost of reading the candidates' documents.

Integers must fit Chroma's 64 bits (chromadb silently stores a larger one as a float);
:func:`fields_of` refuses one that does not.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from indexplug.filters import And, Condition, Filter, Not, Or

from indexplug_chroma.errors import ChromaProblem

I64_MIN = -(2**63)
I64_MAX = 2**63 - 1
KEY_FIELD = "ip.key"
"""The caller key of a passage (absent for a passage without one)."""
DIGEST_FIELD = "ip.digest"
"""The passage's digest (whether a stored passage is the one being added again)."""
DEAD_FIELD = "ip.dead"
"""``True`` on a record replaced by its key's new passages and about to be deleted."""
TYPED = ("s:", "i:", "f:", "b:")
PREFIXES = frozenset({"s", "i", "f", "b", "t", "i<", "i>", "f<", "f>"})
ANY, INTS, FLOATS, STRINGS = "*", "i", "f", "s"


class UnstorableValue(ChromaProblem):
    """A metadata value Chroma cannot store exactly (an integer beyond 64 bits)."""


def fields_of(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The typed fields of a passage's metadata (see the module docstring)."""
    out: dict[str, Any] = {}
    for key, value in metadata.items():
        items = value if isinstance(value, list) else [value]
        strs: list[str] = []
        ints: list[int] = []
        floats: list[float] = []
        bools: list[bool] = []
        for v in items:
            if v is None:
                continue
            if type(v) is bool:
                bools.append(v)
            elif type(v) is int:
                if not I64_MIN <= v <= I64_MAX:
                    raise UnstorableValue(
                        f"metadata {key!r} holds the integer {v}, beyond the 64 bits Chroma "
                        "stores exactly; store it as a string or a float"
                    )
                ints.append(v)
            elif type(v) is float:
                floats.append(v)
            else:
                strs.append(str(v))
        tags: list[str] = []
        for prefix, vals, tag in (
            ("s:", strs, STRINGS),
            ("i:", ints, INTS),
            ("f:", floats, FLOATS),
        ):
            if vals:
                out[prefix + key] = sorted(set(vals))  # type: ignore[type-var]
                tags.append(tag)
        if bools:
            out["b:" + key] = sorted(set(bools))
        if ints:
            out["i<:" + key], out["i>:" + key] = min(ints), max(ints)
        if floats:
            out["f<:" + key], out["f>:" + key] = min(floats), max(floats)
        if tags or bools:
            out["t:" + key] = [ANY, *tags]
    return out


def is_typed(name: str) -> bool:
    """Whether a record's metadata key is one of the typed fields."""
    head, sep, _ = name.partition(":")
    return bool(sep) and head in PREFIXES


def decode(metadata: Mapping[str, Any] | None) -> dict[str, list[Any]]:
    """The values of every key, from a record's typed fields: what
    :func:`indexplug.filters.matches` needs (it looks at values only, not at their order or
    whether a key held a list)."""
    out: dict[str, list[Any]] = {}
    for name, value in (metadata or {}).items():
        prefix = name[:2]
        if prefix in TYPED:
            out.setdefault(name[2:], []).extend(value if isinstance(value, list) else [value])
    return out


# -- translation ---------------------------------------------------------------------------

TRUE: dict[str, Any] = {}
"""The filter every record passes (no ``where``)."""
FALSE: dict[str, Any] = {"$false": True}
"""The filter no record passes (answered without asking Chroma)."""


def _and(items: list[dict[str, Any]]) -> dict[str, Any]:
    if any(i is FALSE for i in items):
        return FALSE
    kept = [i for i in items if i is not TRUE]
    if not kept:
        return TRUE
    return kept[0] if len(kept) == 1 else {"$and": kept}


def _or(items: list[dict[str, Any]]) -> dict[str, Any]:
    if any(i is TRUE for i in items):
        return TRUE
    kept = [i for i in items if i is not FALSE]
    if not kept:
        return FALSE
    return kept[0] if len(kept) == 1 else {"$or": kept}


def _tag(key: str, tag: str, present: bool) -> dict[str, Any]:
    return {"t:" + key: {"$contains" if present else "$not_contains": tag}}


@dataclass
class Where:
    """A filter as Chroma's ``where``: ``clause`` (``TRUE``/``FALSE`` or a where) and whether
    it is exact; when not, it is a superset and the candidates are checked with
    :func:`indexplug.filters.matches`."""

    clause: dict[str, Any]
    exact: bool


def translate(f: Filter) -> Where:
    """``f`` as a Chroma ``where`` over the typed fields (see the module docstring)."""
    state = {"exact": True}
    clause = _node(f, False, state)
    return Where(clause, state["exact"])


def _node(f: Filter, neg: bool, state: dict[str, bool]) -> dict[str, Any]:
    """The where of ``f`` (of ``not f`` when ``neg``), or a superset of it (state: inexact)."""
    if isinstance(f, Not):
        return _node(f.item, not neg, state)
    if isinstance(f, (And, Or)):
        parts = [_node(i, neg, state) for i in f.items]
        return _and(parts) if isinstance(f, And) is not neg else _or(parts)
    return _condition(f, neg, state)


def _condition(c: Condition, neg: bool, state: dict[str, bool]) -> dict[str, Any]:
    key, op, value = c.field, c.op, c.value
    if op == "$ne":
        return _eq(key, value, not neg, state)
    if op == "$eq":
        return _eq(key, value, neg, state)
    if op in ("$in", "$nin"):
        positive = (op == "$in") is not neg
        terms = [_eq(key, v, not positive, state) for v in value]
        return _or(terms) if positive else _and(terms)
    if op == "$exists":
        return _tag(key, ANY, bool(value) is not neg)
    if isinstance(value, str):
        # Chroma compares numbers only: the keys holding strings, checked after
        state["exact"] = False
        return TRUE if neg else _tag(key, STRINGS, True)
    sides = ((_int_side(key, op, value), INTS), (_float_side(key, op, value), FLOATS))
    if not neg:
        return _or([_side(key, side, tag, state) for side, tag in sides])
    return _and([_not_side(key, side, tag, state) for side, tag in sides])


def _eq(key: str, value: Any, neg: bool, state: dict[str, bool]) -> dict[str, Any]:
    """``key`` has ``value`` among its values (not, when ``neg``); a float is compared only
    in a widened form (a superset, state: inexact)."""
    if value is None:  # no values at all
        return _tag(key, ANY, neg)
    op = "$not_contains" if neg else "$contains"
    if type(value) is bool:
        return {"b:" + key: {op: value}}
    if isinstance(value, str):
        return {"s:" + key: {op: value}}
    terms: list[dict[str, Any]] = []
    as_int = _as_int(value)
    if as_int is not None:
        terms.append({"i:" + key: {op: as_int}})
    as_float = _as_float(value)
    if as_float is not None:
        state["exact"] = False
        if not neg:  # some float value == v: the smallest <= v <= the largest, widened
            low = _widened(("f<:" + key, "$lte", as_float))
            high = _widened(("f>:" + key, "$gte", as_float))
            terms.append(_and([_tag(key, FLOATS, True), low, high]))
        # neg: "no float value == v" widens to anything; the check decides
    return _and(terms) if neg else _or(terms)


def _as_int(v: int | float) -> int | None:
    """``v`` as a 64-bit integer equal to it, if there is one."""
    if type(v) is float:
        if not v.is_integer():
            return None
        v = int(v)
    return int(v) if I64_MIN <= v <= I64_MAX else None


def _as_float(v: int | float) -> float | None:
    """``v`` as a float equal to it, if there is one."""
    if type(v) is float:
        return v
    try:
        f = float(v)
    except OverflowError:
        return None
    return f if f == v else None


Side = tuple[str, str, Any] | bool
"""One field compared with a bound (field, op, bound), or a constant: ``True`` "whenever the
key has values of the side's type", ``False`` never."""

_COMPLEMENT = {"$gt": "$lte", "$gte": "$lt", "$lt": "$gte", "$lte": "$gt"}


def _int_side(key: str, op: str, v: int | float) -> Side:
    """ "Some integer value ``op`` v" as a comparison of an integer extreme with an integer."""
    field = ("i>:" if op in ("$gt", "$gte") else "i<:") + key
    if type(v) is float:
        # x > 2.5 is x > 2 for integers; x >= 2.5 is x >= 3; x < 2.5 is x < 3; x <= 2.5, x <= 2
        bound = math.floor(v) if op in ("$gt", "$lte") else math.ceil(v)
    else:
        bound = int(v)
    if bound > I64_MAX:
        return op in ("$lt", "$lte")
    if bound < I64_MIN:
        return op in ("$gt", "$gte")
    return (field, op, bound)


def _float_side(key: str, op: str, v: int | float) -> Side:
    """ "Some float value ``op`` v" as a comparison of a float extreme with a float."""
    field = ("f>:" if op in ("$gt", "$gte") else "f<:") + key
    if type(v) is float:
        return (field, op, v)
    try:
        f = float(v)
    except OverflowError:
        return (v < 0) is (op in ("$gt", "$gte"))  # beyond every float
    if f == v:
        return (field, op, f)
    # no float lies between v and f (the nearest float to v): rewrite the bound to f
    if f > v:
        return (field, {"$gt": "$gte", "$gte": "$gte", "$lt": "$lt", "$lte": "$lt"}[op], f)
    return (field, {"$gt": "$gt", "$gte": "$gt", "$lt": "$lte", "$lte": "$lte"}[op], f)


F32_MAX = 3.4028234663852886e38


def _f32_step(x: float, up: bool) -> float:
    """The next 32-bit float above (``up``) or below ``x``, itself a 32-bit float."""
    bits = struct.unpack("<i", struct.pack("<f", x))[0]
    if x == 0.0:
        return (1.401298464324817e-45) if up else -1.401298464324817e-45
    bits += 1 if (x > 0) is up else -1
    return float(struct.unpack("<f", struct.pack("<i", bits))[0])


def _f32_outward(v: float, up: bool) -> float | None:
    """A 32-bit float at or beyond ``v`` (above it when ``up``), one step further out than
    the nearest one, so that neither rounding of ``v`` nor of a stored value can cross it;
    None where there is none (beyond the 32-bit range: no bound)."""
    if not math.isfinite(v) or abs(v) >= F32_MAX:
        return None
    near = float(struct.unpack("<f", struct.pack("<f", v))[0])  # round to nearest
    if (near < v) if up else (near > v):
        near = _f32_step(near, up)
    out = _f32_step(near, up)
    return out if abs(out) <= F32_MAX else None


def _widened(comparison: tuple[str, str, Any]) -> dict[str, Any]:
    """A comparison of a float extreme as one every record it holds for passes, whether
    Chroma compares it as a 64- or a 32-bit float: ``$gt``/``$gte v`` becomes ``$gte`` a
    32-bit float below ``v``, ``$lt``/``$lte v`` becomes ``$lte`` one above (:data:`TRUE`
    where ``v`` is beyond the 32-bit range: no bound is safe there)."""
    field, op, bound = comparison
    up = op in ("$lt", "$lte")
    edge = _f32_outward(float(bound), up)
    if edge is None:
        return TRUE
    return {field: {("$lte" if up else "$gte"): edge}}


def _compared(key: str, side: tuple[str, str, Any], state: dict[str, bool]) -> dict[str, Any]:
    field, op, bound = side
    if field.startswith("f"):
        state["exact"] = False
        return _widened(side)
    return {field: {op: bound}}


def _side(key: str, side: Side, tag: str, state: dict[str, bool]) -> dict[str, Any]:
    if side is True:
        return _tag(key, tag, True)
    if side is False:
        return FALSE
    assert isinstance(side, tuple)
    if side[0].startswith("f"):  # a float extreme: with the tag (TRUE needs a float there)
        return _and([_tag(key, tag, True), _compared(key, side, state)])
    return _compared(key, side, state)


def _not_side(key: str, side: Side, tag: str, state: dict[str, bool]) -> dict[str, Any]:
    """No value of the side's type compares so: the complement, or no such values."""
    if side is True:
        return _tag(key, tag, False)
    if side is False:
        return TRUE
    assert isinstance(side, tuple)
    field, op, bound = side
    complement = _compared(key, (field, _COMPLEMENT[op], bound), state)
    return _or([complement, _tag(key, tag, False)])
