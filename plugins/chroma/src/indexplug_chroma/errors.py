"""From whatever went wrong to the one outcome that says it.

The backend raises a few exceptions of its own (a deadline passed between steps, a write lock
held too long, an index built with another embedder) and lets everything else propagate from
chromadb, httpx or the embedder; :func:`failure_outcome` is the single place that decides what
each becomes, so every op reports the same thing the same way:

* a deadline or a busy lock -> ``INDEX_TIMEOUT``;
* a server that refuses, drops or never answers the connection -> ``INDEX_UNAVAILABLE`` (and a
  request that timed out before the op's own deadline too: the server is not answering);
* an embedder that is not ready (model or torch missing) -> ``INDEX_UNAVAILABLE``;
* an embedder mismatch or any other error -> ``INDEX_FAILED`` with the reason.
"""

from __future__ import annotations

import functools

from indexplug.deadlines import Deadline
from indexplug.outcomes import IndexFailed, IndexTimeout, IndexUnavailable

from indexplug_chroma.settings import ChromaSettings


class ChromaProblem(Exception):
    """Raised by the backend itself; the message is the reason shown to the caller."""


class DeadlinePassed(ChromaProblem):
    pass


class WriteLockBusy(ChromaProblem):
    pass


class EmbedderMismatch(ChromaProblem):
    pass


class RecordLost(ChromaProblem, ValueError):
    """Chroma answered a vector's id without its record (no document, no metadata): the
    record was deleted behind the vector index, so the index cannot say what it holds."""


@functools.cache
def chromadb_missing() -> str | None:
    """Why chromadb cannot be used here, or None (imported once per process)."""
    try:
        import chromadb  # noqa: F401
    except Exception as exc:
        return f"chromadb cannot be imported ({type(exc).__name__}: {exc}); pip install chromadb"
    return None


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in seen and len(seen) < 8:
        seen.append(cur)
        cur = cur.__cause__ or cur.__context__
    return seen


def _transport(exc: BaseException) -> tuple[str, BaseException] | None:
    """``("timeout" | "connection", the httpx error)`` if a network error is behind ``exc``."""
    try:
        import httpx
    except ImportError:
        return None
    for e in _chain(exc):
        if isinstance(e, httpx.TimeoutException):
            return "timeout", e
        if isinstance(e, httpx.TransportError):
            return "connection", e
        if isinstance(e, ValueError) and "could not connect" in str(e).lower():
            return "connection", e
    return None


def failure_outcome(
    index: str,
    backend: str,
    exc: BaseException,
    deadline: Deadline,
    settings: ChromaSettings,
    *,
    embedder_not_ready: str | None = None,
) -> IndexFailed | IndexTimeout | IndexUnavailable:
    if isinstance(exc, DeadlinePassed):
        return IndexTimeout(
            index=index, backend=backend, deadline_s=deadline.seconds, reason=str(exc)
        )
    if isinstance(exc, WriteLockBusy):
        return IndexTimeout(
            index=index, backend=backend, deadline_s=deadline.seconds, reason=str(exc)
        )
    if isinstance(exc, EmbedderMismatch):
        return IndexFailed(
            index=index, backend=backend, reason=str(exc), error_type="EmbedderMismatch"
        )
    if isinstance(exc, RecordLost):
        return IndexFailed(index=index, backend=backend, reason=str(exc), error_type="Inconsistent")
    net = _transport(exc) if settings.mode == "server" else None
    if net is not None:
        kind, err = net
        if kind == "timeout" and deadline.expired():
            return IndexTimeout(
                index=index,
                backend=backend,
                deadline_s=deadline.seconds,
                reason=f"Chroma server at {settings.url} did not answer in time ({_describe(err)})",
            )
        what = (
            f"did not answer within {settings.timeout_s:g}s"
            if kind == "timeout"
            else "cannot be reached"
        )
        return IndexUnavailable(
            index=index,
            backend=backend,
            reason=f"Chroma server at {settings.url} {what} ({_describe(err)})",
        )
    if embedder_not_ready:
        return IndexUnavailable(index=index, backend=backend, reason=embedder_not_ready)
    return IndexFailed(
        index=index,
        backend=backend,
        reason=f"Chroma error: {_describe(exc)}",
        error_type=type(exc).__name__,
    )
