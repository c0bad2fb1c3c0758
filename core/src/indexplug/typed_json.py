"""Metadata values that are more than flat JSON, kept exactly as text.

Passage metadata is flat (:data:`indexplug.passages.MetadataValue`).  The framework adapters
keep what their frameworks' in-memory stores keep (nested dicts and lists, dates, tuples) in
one JSON text beside it: :func:`dumps` writes a value as JSON plus the places that held a
``datetime``, ``date``, ``time`` or ``tuple`` (JSON has none of them), and :func:`loads` gives
back a value equal to the one written, of the same types.  Anything else that is not JSON (a
set, bytes, an object, a non-string dict key, a non-finite float unless allowed) raises
:class:`UnstorableValue` naming where it is, never converted.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import Any

MAX_DEPTH = 100
"""The deepest nesting of lists, tuples and dicts a value may have."""

_KINDS = ("datetime", "date", "time", "tuple")


class UnstorableValue(ValueError):
    """A value that cannot be kept exactly; the message and :attr:`where` name it."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where


Path = list[str | int]


def _plain(value: Any, where: str, path: Path, tags: list[list[Any]], depth: int, nan: bool) -> Any:
    if depth > MAX_DEPTH:
        raise UnstorableValue(where, f"nested deeper than {MAX_DEPTH} levels")
    if value is None or type(value) in (bool, int, str):
        if type(value) is str:
            _check_text(value, where)
        return value
    if type(value) is float:
        if not (nan or math.isfinite(value)):
            raise UnstorableValue(where, f"{value!r} is not a finite number")
        return value
    if isinstance(value, dt.datetime):  # before date: a datetime is a date
        tags.append([list(path), "datetime"])
        return value.isoformat()
    if isinstance(value, dt.date):
        tags.append([list(path), "date"])
        return value.isoformat()
    if isinstance(value, dt.time):
        tags.append([list(path), "time"])
        return value.isoformat()
    if type(value) in (list, tuple):
        if type(value) is tuple:
            tags.append([list(path), "tuple"])
        return [
            _plain(v, f"{where}[{i}]", [*path, i], tags, depth + 1, nan)
            for i, v in enumerate(value)
        ]
    if type(value) is dict:
        out: dict[str, Any] = {}
        for k, v in value.items():
            if type(k) is not str:
                raise UnstorableValue(where, f"the dict key {k!r} is not a string")
            _check_text(k, where)
            out[k] = _plain(v, f"{where}.{k}", [*path, k], tags, depth + 1, nan)
        return out
    raise UnstorableValue(
        where,
        f"a {type(value).__name__} cannot be stored (JSON values, tuples, and datetime, date "
        "and time values can)",
    )


def _check_text(text: str, where: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise UnstorableValue(where, "text that is not Unicode (a lone surrogate)") from None


def dumps(value: Any, where: str = "value", *, allow_nan: bool = False) -> str:
    """``value`` as one JSON text (``{"v": ..., "t": [[path, kind], ...]}``); ``where`` names
    it in errors (a metadata key, say).  ``allow_nan`` keeps NaN and the infinities, written
    as Python's ``json`` writes them (``NaN``, ``Infinity``: not strict JSON)."""
    tags: list[list[Any]] = []
    plain = _plain(value, where, [], tags, 0, allow_nan)
    record: dict[str, Any] = {"v": plain}
    if tags:
        record["t"] = tags
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def is_plain(value: Any) -> bool:
    """Whether :func:`dumps` would need no tag for ``value`` (it is JSON as it is)."""
    tags: list[list[Any]] = []
    try:
        _plain(value, "value", [], tags, 0, True)
    except UnstorableValue:
        return False
    return not tags


def loads(text: str) -> Any:
    """The value :func:`dumps` wrote (``ValueError`` for text it did not write)."""
    record = json.loads(text)
    if not isinstance(record, dict) or "v" not in record:
        raise ValueError("not a typed_json record")
    value = record["v"]
    tags = record.get("t", [])
    if not isinstance(tags, list):
        raise ValueError("not a typed_json record")
    # the deepest places first, so a tuple holding dates is rebuilt after its items
    for tag in sorted(tags, key=lambda t: -len(t[0])):
        path, kind = tag
        if kind not in _KINDS or not isinstance(path, list):
            raise ValueError(f"unknown typed_json tag {tag!r}")
        value = _replace(value, path, kind)
    return value


def _convert(item: Any, kind: str) -> Any:
    if kind == "datetime":
        return dt.datetime.fromisoformat(item)
    if kind == "date":
        return dt.date.fromisoformat(item)
    if kind == "time":
        return dt.time.fromisoformat(item)
    return tuple(item)


def _replace(value: Any, path: list[Any], kind: str) -> Any:
    if not path:
        return _convert(value, kind)
    parent = value
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = _convert(parent[path[-1]], kind)
    return value
