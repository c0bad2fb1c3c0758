"""Metadata filters as keyword terms and bool queries, exactly as :func:`indexplug.filters.matches`.

Every metadata entry of a passage becomes keyword terms of two fields (both indexed, neither
in ``_source``), so one mapping serves every key (a ``dynamic`` or ``flattened`` mapping would
lose the value's JSON type):

``passages.mv`` (equality), each ``key NUL tag``:

* ``key NUL e``: the key has at least one value (``$exists``; null, missing and ``[]`` have
  none, so ``$eq null`` is "no such term");
* ``key NUL b:true`` / ``b:false``: a boolean;
* ``key NUL n:`` + :func:`number_key` of a number: the same for ``1`` and ``1.0`` (for every
  int and float that are equal in Python), different from ``true`` and ``"1"``;
* ``key NUL s:`` + a string of at most :data:`EQ_CHARS` characters, or ``key NUL S:`` + the
  SHA-256 of a longer one.

``passages.mo`` (order), each starting with a digest of the key (a range's bounds must stay short:
Lucene refuses a range whose bound is about a thousand bytes, "input automaton is too large"):

* ``K n`` + :func:`number_key`: an ASCII string whose byte order is the numbers' order;
* ``K c|`` + the first :data:`CHUNK` characters of a string (level 0), and ``K c`` + a digest
  of the first ``j * CHUNK`` characters + ``|`` + the ``j``-th chunk (level ``j``).  ``x > v``
  holds exactly when, at some level, the prefixes agree and x's chunk is greater than v's (one
  ``range`` per level), and a string ending on a chunk boundary also gets an empty last chunk,
  so ``x < v`` is found when x is a prefix of v.  Lucene compares UTF-8 bytes, whose order is
  code point order, Python's string order.

Each value of a list gets its terms, so ``$eq``/``$in`` hold when any element does and
``$ne``/``$nin`` (``must_not``) when none does.  Keys containing NUL or longer than
:data:`~indexplug.filters.MAX_FIELD_CHARS` get no terms: no filter can name them.
"""

from __future__ import annotations

import hashlib
import math
import struct
import sys
from collections.abc import Mapping
from typing import Any

from indexplug.filters import (
    MAX_FIELD_CHARS,
    And,
    Condition,
    Filter,
    Not,
    Or,
    parse_filter,
    values_of,
)

from indexplug_elastic.mapping import MO_PATH, MV_PATH

SEP = "\x00"
EQ_CHARS = 4096
"""Longest string kept as it is in an equality term (longer ones by their SHA-256)."""
CHUNK = 200
"""Characters of a string per order term: at most 800 bytes of UTF-8, which with the key's
digest and the level's keeps every range bound under Lucene's limit."""

_FMAX = int(sys.float_info.max)
MATCH_NONE: dict[str, Any] = {"match_none": {}}
MATCH_ALL: dict[str, Any] = {"match_all": {}}


def _float_key(f: float) -> str:
    """16 hex digits whose order is the order of the floats (-0.0 as 0.0)."""
    bits = struct.unpack(">Q", struct.pack(">d", f + 0.0))[0]
    bits = bits ^ 0xFFFF_FFFF_FFFF_FFFF if bits >> 63 else bits | 1 << 63
    return f"{bits:016x}"


def number_key(x: int | float) -> str:
    """An ASCII string whose byte order is the exact numeric order of ints and floats, the
    same for equal numbers (``1`` and ``1.0``).

    A float is its sortable bits.  An int is the sortable bits of the largest float not above
    it, then, if it is not that float, ``+`` and the difference (a positive int, its length in
    four digits first), which sorts after the float and before the next one.
    """
    if isinstance(x, float):
        return _float_key(x)
    if x < -_FMAX:  # below every float: after -inf's bits, the larger |x| the lower
        digits = str(-x)
        inverted = "".join(str(9 - int(c)) for c in digits)
        return f"{_float_key(-math.inf)}+{9999 - len(digits):04d}{inverted}"
    f = float(x) if x <= _FMAX else _FMAX
    if f > x:
        f = math.nextafter(f, -math.inf)
    diff = x - int(f)
    if diff == 0:
        return _float_key(f)
    digits = str(diff)
    return f"{_float_key(f)}+{len(digits):04d}{digits}"


def _digest(s: str, n: int = 64) -> str:
    return hashlib.sha256(s.encode("utf-8", "surrogatepass")).hexdigest()[:n]


def _key_tag(key: str) -> str:
    return _digest(key, 16)


def _level(key: str, s: str, j: int) -> str:
    """The prefix of level ``j``'s order terms of ``s`` (ends in ``|``)."""
    if j == 0:
        return f"{_key_tag(key)}c|"
    return f"{_key_tag(key)}c{_digest(s[: j * CHUNK], 16)}|"


def _eq_term(key: str, v: str | int | float | bool) -> str:
    if type(v) is bool:
        return f"{key}{SEP}b:{'true' if v else 'false'}"
    if isinstance(v, (int, float)):
        return f"{key}{SEP}n:{number_key(v)}"
    s = str(v)
    if len(s) <= EQ_CHARS:
        return f"{key}{SEP}s:{s}"
    return f"{key}{SEP}S:{_digest(s)}"


def _exists_term(key: str) -> str:
    return f"{key}{SEP}e"


def filterable(key: str) -> bool:
    """Whether a filter can name metadata key ``key`` (else it gets no terms)."""
    return SEP not in key and len(key) <= MAX_FIELD_CHARS


def terms_of(metadata: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """The ``mv`` and ``mo`` terms of a passage's metadata (see the module docstring)."""
    eq: dict[str, None] = {}
    order: dict[str, None] = {}
    for key in metadata:
        if not filterable(key):
            continue
        values = values_of(metadata, key)
        if not values:
            continue
        eq[_exists_term(key)] = None
        for v in values:
            eq[_eq_term(key, v)] = None
            if type(v) is str:
                for j in range(len(v) // CHUNK + 1):
                    order[_level(key, v, j) + v[j * CHUNK : (j + 1) * CHUNK]] = None
            elif isinstance(v, (int, float)) and type(v) is not bool:
                order[f"{_key_tag(key)}n{number_key(v)}"] = None
    return list(eq), list(order)


def _term(t: str) -> dict[str, Any]:
    return {"term": {MV_PATH: t}}


def _range(**bounds: str) -> dict[str, Any]:
    return {"range": {MO_PATH: bounds}}


def _not(q: dict[str, Any]) -> dict[str, Any]:
    return {"bool": {"must_not": [q]}}


def _any(qs: list[dict[str, Any]]) -> dict[str, Any]:
    if not qs:
        return MATCH_NONE
    if len(qs) == 1:
        return qs[0]
    return {"bool": {"should": qs, "minimum_should_match": 1}}


def _eq(key: str, v: Any) -> dict[str, Any]:
    if v is None:
        return _not(_term(_exists_term(key)))
    return _term(_eq_term(key, v))


def _one_of(key: str, values: tuple[Any, ...]) -> dict[str, Any]:
    """Some value of ``key`` is one of ``values`` (``None``: it has none): one ``terms``
    query, so a long ``$in`` list is one clause, not one per value."""
    terms = list(dict.fromkeys(_eq_term(key, v) for v in values if v is not None))
    legs = [{"terms": {MV_PATH: terms}}] if terms else []
    if any(v is None for v in values):
        legs.append(_eq(key, None))
    return _any(legs)


def _string_order(key: str, v: str, op: str) -> dict[str, Any]:
    """Some string value of ``key`` is ``op`` (``$gt``/``$lt``, strict) ``v``: one range per
    level (see the module docstring)."""
    legs = []
    for j in range(len(v) // CHUNK + 1):
        prefix = _level(key, v, j)
        end = prefix[:-1] + "}"  # every term of the level is below it
        bound = prefix + v[j * CHUNK : (j + 1) * CHUNK]
        if op == "$gt":
            legs.append(_range(gt=bound, lt=end))
        else:
            legs.append(_range(gte=prefix, lt=bound))
    return _any(legs)


def _order(key: str, op: str, v: str | int | float) -> dict[str, Any]:
    strict = "$gt" if op in ("$gt", "$gte") else "$lt"
    if isinstance(v, str):
        q = _string_order(key, v, strict)
    else:
        base = f"{_key_tag(key)}n"
        bound = base + number_key(v)
        end = f"{_key_tag(key)}o"  # the letter after n: above every number of the key
        q = _range(gt=bound, lt=end) if strict == "$gt" else _range(gte=base, lt=bound)
    if op in ("$gte", "$lte"):
        return _any([q, _eq(key, v)])
    return q


def query_of(f: Filter) -> dict[str, Any]:
    """The Elasticsearch query that matches exactly the passages ``matches(f, metadata)``
    accepts."""
    if isinstance(f, And):
        return {"bool": {"filter": [query_of(i) for i in f.items]}}
    if isinstance(f, Or):
        return _any([query_of(i) for i in f.items])
    if isinstance(f, Not):
        return _not(query_of(f.item))
    assert isinstance(f, Condition)
    key, op, value = f.field, f.op, f.value
    if not filterable(key):  # no passage has terms for it: it has no values anywhere
        return _query_without_values(op, value)
    if op == "$eq":
        return _eq(key, value)
    if op == "$ne":
        return _not(_eq(key, value))
    if op == "$in":
        return _one_of(key, value)
    if op == "$nin":
        return _not(_one_of(key, value))
    if op == "$exists":
        exists = _term(_exists_term(key))
        return exists if value else _not(exists)
    return _order(key, op, value)


def _query_without_values(op: str, value: Any) -> dict[str, Any]:
    """A condition on a key no passage can have values for (``matches`` with no values)."""
    from indexplug.filters import matches

    return MATCH_ALL if matches(Condition("k", op, value), {}) else MATCH_NONE  # type: ignore[arg-type]


def filter_query(filters: Any) -> dict[str, Any] | None:
    """The query of ``filters`` (a parsed :data:`~indexplug.filters.Filter`, or an equality
    map as JSON), ``None`` for no filter."""
    parsed = parse_filter(filters)
    return None if parsed is None else query_of(parsed)
