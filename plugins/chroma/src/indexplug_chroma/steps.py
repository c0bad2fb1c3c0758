"""Chroma calls as data, so that one op's logic serves a blocking and an async client.

An op of the backend that reads (search, get, scan) is written once, as a generator of
*steps*: it yields what it needs done (call a method of a collection, embed a query, count an
index, open a collection) and is sent back the result, or has the exception thrown in.  The
backend runs it with the blocking client (``run``) or awaits each step with chromadb's
``AsyncHttpClient`` (``arun``), so both forms give the same answers by the same logic.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from indexplug.protocols import Embedder

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Call:
    """``target.method(**kwargs)``: a collection (or client) the steps were given."""

    target: Any
    method: str
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Embed:
    """The query vector of ``text`` (CPU work: a thread, in the async form)."""

    embedder: Embedder
    text: str


@dataclass(frozen=True, slots=True)
class Count:
    """The passage count of ``index`` for a search (the shared count cache; ``fresh``:
    forget the cached one first)."""

    index: str
    collection: Any
    fresh: bool = False


@dataclass(frozen=True, slots=True)
class Handle:
    """The search handle of ``index`` (collection, include, embedder, typed) or None."""

    index: str
    embedder: Embedder


@dataclass(frozen=True, slots=True)
class Open:
    """The collection of ``index``, or None."""

    index: str


Step = Call | Embed | Count | Handle | Open
Steps = Generator[Step, Any, T]


def run(steps: Steps[T], do: Callable[[Step], Any]) -> T:
    """Run ``steps``, doing each with ``do`` (an exception is thrown back into the steps)."""
    value: Any = None
    error: Exception | None = None
    while True:
        try:
            step = steps.throw(error) if error is not None else steps.send(value)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        error = None
        try:
            value = do(step)
        except Exception as exc:
            error = exc


async def arun(steps: Steps[T], do: Callable[[Step], Awaitable[Any]]) -> T:
    """:func:`run` with each step awaited."""
    value: Any = None
    error: Exception | None = None
    while True:
        try:
            step = steps.throw(error) if error is not None else steps.send(value)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        error = None
        try:
            value = await do(step)
        except Exception as exc:
            error = exc
