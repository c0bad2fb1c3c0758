"""Metadata filters as SQL over a passage's metadata JSON, with exactly the meaning of
:func:`indexplug.filters.matches`.

A passage's metadata is stored as a JSON object (``passages.metadata``).  A field's *values*
(null, missing and ``[]`` are no values; a list's elements; a scalar itself) are the rows of
:data:`_SCALAR` and :data:`_ELEMENTS`: the field found by key through ``json_each`` (a JSON path
cannot quote every key), then either the field itself when it is a scalar, or its elements
through a second ``json_each`` over the list's JSON text (never over JSON that SQLite writes
itself, such as ``json_array(value)``: SQLite writes a real with 15 digits, not exactly).
``json_each`` keeps each value's JSON type, so comparisons are held to one kind: strings with
strings (SQLite compares text by bytes, and UTF-8 byte order is code point order, as Python's),
numbers with numbers (``1`` equals ``1.0``; SQLite compares integers and reals exactly), and
booleans only with booleans (``true`` reads as the integer 1 but is typed ``'true'``).

SQLite holds integers in 64 bits: a stored integer beyond that is read as the nearest real, so
a filter number at or past that edge (an integer outside ``-2**63 + 1 .. 2**63 - 1``, a real of
magnitude ``2**63`` or more) could compare wrongly.  Such a condition is served instead by
:func:`python_matches` (registered on every connection as ``indexplug_matches``), which runs the
reference on the row's parsed metadata: slower, exact.  Every other condition is plain SQL.

SQLite also reads a JSON string up to a NUL character and no further (``"a\u0000b"`` reads as
``"a"``, in values and keys alike), so a row whose metadata JSON holds the escape ``\u0000`` is
judged by :func:`python_matches` as a whole; finding the escape is one ``instr`` per row.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from indexplug.filters import And, Condition, Filter, Not, Or, matches, parse_filter, to_json

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
NUL_ESCAPE = "\\u0000"
"""How ``json.dumps`` writes a NUL character, which SQLite's JSON functions cut strings at."""
FUNCTION = "indexplug_matches"
"""The SQL name of :func:`python_matches`, registered by :func:`register`."""

_SCALAR = "FROM json_each({col}) AS e WHERE e.key = ? AND e.type NOT IN ('array', 'null')"
"""The field's value when it is a scalar (one row, or none)."""
_ELEMENTS = (
    "FROM json_each({col}) AS m, json_each(m.value) AS e "
    "WHERE m.key = ? AND m.type = 'array' AND e.type <> 'null'"
)
"""The field's elements when it is a list."""
_NUMBER = "e.type IN ('integer', 'real')"


def _kind(v: Any) -> str:
    if type(v) is bool:
        return "bool"
    if type(v) in (int, float):
        return "number"
    return "string"


def _safe(v: Any) -> bool:
    """Whether SQLite compares the number ``v`` exactly with every stored value."""
    if type(v) is int:
        return INT64_MIN < v <= INT64_MAX
    if type(v) is float:
        return -(2.0**63) < v < 2.0**63
    return True


class _Sql:
    """Builds one SQL boolean expression and its parameters."""

    def __init__(self, column: str) -> None:
        self.scalar = _SCALAR.format(col=column)
        self.elements = _ELEMENTS.format(col=column)
        self.column = column
        self.params: list[Any] = []

    def expr(self, f: Filter) -> str:
        if isinstance(f, And):
            return "(" + " AND ".join(self.expr(i) for i in f.items) + ")" if f.items else "1"
        if isinstance(f, Or):
            return "(" + " OR ".join(self.expr(i) for i in f.items) + ")" if f.items else "0"
        if isinstance(f, Not):
            return f"(NOT {self.expr(f.item)})"
        return self.condition(f)

    def any_value(self, field: str, test: str, params: list[Any]) -> str:
        """Some value of ``field`` passes ``test`` (an expression over ``e.type``/``e.value``)."""
        self.params += [field, *params, field, *params]
        return (
            f"(EXISTS (SELECT 1 {self.scalar} AND ({test})) "
            f"OR EXISTS (SELECT 1 {self.elements} AND ({test})))"
        )

    def has(self, field: str, values: tuple[Any, ...]) -> str:
        """One of ``values`` (scalars, or None for "no values") is one of the field's values."""
        parts: list[str] = []
        params: list[Any] = []
        strings = [v for v in values if type(v) is str]
        numbers = [v for v in values if _kind(v) == "number"]
        bools = {v for v in values if type(v) is bool}
        for kind, group in (("e.type = 'text'", strings), (_NUMBER, numbers)):
            if len(group) == 1:
                parts.append(f"({kind} AND e.value = ?)")
                params += group
            elif group:
                # one parameter for the whole list (a filter may hold 256 lists of 1,024
                # values: far past SQLite's limit on parameters); json_each reads back each
                # string and each number SQL is given (see _safe) exactly
                parts.append(f"({kind} AND e.value IN (SELECT value FROM json_each(?)))")
                params.append(json.dumps(group, ensure_ascii=False))
        if bools:
            parts.append("e.type IN (" + ",".join(f"'{str(b).lower()}'" for b in bools) + ")")
        out = [self.any_value(field, " OR ".join(parts), params)] if parts else []
        if any(v is None for v in values):
            out.append(f"NOT {self.any_value(field, '1', [])}")
        return "(" + " OR ".join(out) + ")" if out else "0"

    def condition(self, c: Condition) -> str:
        scalars = c.value if isinstance(c.value, tuple) else (c.value,)
        if not all(_safe(v) for v in scalars):
            self.params.append(json.dumps(to_json(c), ensure_ascii=False))
            return f"{FUNCTION}({self.column}, ?)"
        if c.op == "$eq":
            return self.has(c.field, (c.value,))
        if c.op == "$ne":
            return f"(NOT {self.has(c.field, (c.value,))})"
        if c.op == "$in":
            return self.has(c.field, c.value)
        if c.op == "$nin":
            return f"(NOT {self.has(c.field, c.value)})"
        if c.op == "$exists":
            present = self.any_value(c.field, "1", [])
            return present if c.value else f"(NOT {present})"
        sign = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}[c.op]
        kind = "e.type = 'text'" if type(c.value) is str else _NUMBER
        return self.any_value(c.field, f"{kind} AND e.value {sign} ?", [c.value])


def to_sql(f: Filter | Mapping[str, Any], column: str = "p.metadata") -> tuple[str, list[Any]]:
    """``f`` as an SQL boolean expression over the metadata JSON in ``column``, and its
    parameters.  An equality map (``{key: value}``) is read as :func:`parse_filter` reads it."""
    parsed = f if isinstance(f, (Condition, And, Or, Not)) else parse_filter(dict(f))
    if parsed is None:
        return "1", []
    sql = _Sql(column)
    expr = sql.expr(parsed)
    whole = json.dumps(to_json(parsed), ensure_ascii=False)
    return (
        f"(CASE WHEN instr({column}, ?) > 0 THEN {FUNCTION}({column}, ?) ELSE {expr} END)",
        [NUL_ESCAPE, whole, *sql.params],
    )


@lru_cache(maxsize=256)
def _parsed(filter_json: str) -> Filter | None:
    return parse_filter(json.loads(filter_json))


def python_matches(metadata: str, filter_json: str) -> int:
    """:func:`indexplug.filters.matches` of a row's metadata JSON, for the conditions SQL
    cannot compare exactly (see the module docstring)."""
    return int(matches(_parsed(filter_json), json.loads(metadata)))


def register(conn: sqlite3.Connection) -> None:
    """Make :func:`python_matches` callable from SQL on ``conn``."""
    conn.create_function(FUNCTION, 2, python_matches, deterministic=True)
