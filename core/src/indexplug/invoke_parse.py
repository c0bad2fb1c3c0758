"""Parsing an op's arguments: JSON text read strictly, its nesting bounded, and a failed
validation told as one reason and the field it names (see :mod:`indexplug.invocation`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from indexplug.errors import InvalidRequest

MAX_ARGS_DEPTH = 32
"""Deepest nesting of arrays and objects the arguments may have (the deepest any op needs is 4:
``passages`` / a passage / its ``source`` / ``provenance``); deeper is ``BAD_REQUEST``, so no
input can exhaust the stack of the parser, the validator or anything after them."""


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_args(text: str | bytes) -> Any:
    """JSON text as Python values, strictly: ``NaN`` and ``Infinity`` are refused, and so is
    anything json cannot read (too deep for its recursion, an integer too long to convert).
    Raises :class:`InvalidRequest` for ``args``."""
    if not text.strip():
        return {}
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise InvalidRequest(
            f"args nest deeper than {MAX_ARGS_DEPTH} levels", field="args"
        ) from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, a 5000-digit integer
        reason = " ".join(str(exc).split())[:300]
        raise InvalidRequest(f"args are not valid JSON: {reason}", field="args") from None


def nesting_depth(value: Any, limit: int = MAX_ARGS_DEPTH) -> int:
    """How deep ``value``'s arrays and objects nest, counted without recursion and only up to
    ``limit + 1`` (so a cyclic structure stops too)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        depth += 1
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        stack.extend((child, depth) for child in children)
    return deepest


def _field(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(p) for p in loc) or "args"


def _validation_reason(exc: ValidationError) -> tuple[str, str]:
    """The first problem of a failed validation as (reason, field), one line."""
    first = exc.errors()[0]
    msg = str(first["msg"]).removeprefix("Value error, ")
    more = f" (and {exc.error_count() - 1} more problem(s))" if exc.error_count() > 1 else ""
    return f"{msg}{more}", _field(first["loc"])
