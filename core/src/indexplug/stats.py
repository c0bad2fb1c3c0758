"""``stats``: what an index holds, for every backend, through the guard.

The figures every backend has are computed here from its ``status`` and by scanning its
passages (``scan``, page by page): passages as status says and as counted, distinct keys and
source URIs, the text's UTF-8 bytes and its length distribution in characters (min, p50, p90,
max, mean; nearest-rank percentiles), bytes against the budget.  The embedder and its dimension
and the score scale come from the backend; its own figures from its status ``details`` and,
where it offers one, its ``op_stats`` extension op (:class:`indexplug.protocols.StatsSource`),
whose ``last_write`` (Unix seconds) is the last write time.  A backend without ``scan`` answers
status's figures only, and says so in ``notes``.
"""

from __future__ import annotations

import math
from array import array
from typing import Any

from indexplug.guard import Guard
from indexplug.ops import LengthStats, StatsData
from indexplug.outcomes import IndexStatus, Scanned

PAGE = 1000


def _rank(sorted_values: array[int], q: float) -> int:
    """The nearest-rank ``q`` percentile of a sorted, non-empty array."""
    k = max(1, math.ceil(q * len(sorted_values)))
    return int(sorted_values[k - 1])


def lengths(values: array[int]) -> LengthStats | None:
    """min, p50, p90, max and mean of ``values`` (None when empty)."""
    if not values:
        return None
    ordered = array("q", sorted(values))
    return LengthStats(
        min=int(ordered[0]),
        p50=_rank(ordered, 0.5),
        p90=_rank(ordered, 0.9),
        max=int(ordered[-1]),
        mean=round(sum(ordered) / len(ordered), 3),
    )


def index_stats(guard: Guard, index: str, *, deadline_s: float | None = None) -> Any:
    """:class:`StatsData` for ``index``, or the outcome of the read that failed (status, a
    scan page, or the backend's ``op_stats``).  ``deadline_s`` holds each read."""
    status = guard.status(index, deadline_s=deadline_s)
    if not isinstance(status, IndexStatus):
        return status
    backend = guard.backend
    extras: dict[str, Any] = dict(status.details)
    notes: list[str] = []
    if callable(getattr(backend, "op_stats", None)):
        own = guard.call_extra("stats", index, deadline_s)
        if not isinstance(own, IndexStatus):
            return own
        extras.update(own.details)
        if own.passages != status.passages:
            notes.append(
                f"status says {status.passages} passage(s) and the backend's own figures "
                f"{own.passages}"
            )
    embedder = getattr(backend, "embedder", None)
    dim = getattr(embedder, "dim", None)
    if not isinstance(dim, int) or isinstance(dim, bool):
        dim = extras.get("dim") if isinstance(extras.get("dim"), int) else None
    last = extras.get("last_write")
    data: dict[str, Any] = {
        "passages": status.passages,
        "bytes_used": status.bytes_used,
        "max_bytes": status.max_bytes,
        "estimate": status.estimate,
        "embedder": status.embedder or getattr(embedder, "name", None),
        "dim": dim,
        "scale": backend.score_scale,
        "last_write": float(last) if isinstance(last, int | float) and last > 0 else None,
        "extras": extras,
        "notes": notes,
    }
    if status.bytes_used is not None and status.max_bytes:
        data["budget_used"] = status.bytes_used / status.max_bytes
    if data["last_write"] is None:
        notes.append("the backend does not say when it was last written")
    if not getattr(backend.capabilities, "scan", False) or not status.exists:
        if status.exists:
            notes.append("the backend has no scan: counts beyond passages are unknown")
        else:
            data.update(scanned=0, distinct_keys=0, distinct_sources=0, text_bytes=0)
        return StatsData(**data)
    keys: set[str] = set()
    sources: set[str] = set()
    chars: array[int] = array("q")
    text_bytes = 0
    after: str | None = None
    while True:
        page = guard.scan(index, after=after, limit=PAGE, deadline_s=deadline_s)
        if not isinstance(page, Scanned):
            return page
        for p in page.passages:
            chars.append(len(p.text))
            text_bytes += len(p.text.encode("utf-8", "surrogatepass"))
            sources.add(p.source.uri)
            if p.key is not None:
                keys.add(p.key)
        if page.next_after is None or not page.passages:
            break
        after = page.next_after
    if len(chars) != status.passages:
        notes.append(
            f"status says {status.passages} passage(s) and a scan counted {len(chars)} "
            "(a write under way, or the backend's count is off)"
        )
    data.update(
        scanned=len(chars),
        distinct_keys=len(keys),
        distinct_sources=len(sources),
        text_bytes=text_bytes,
        text_chars=lengths(chars),
    )
    return StatsData(**data)
