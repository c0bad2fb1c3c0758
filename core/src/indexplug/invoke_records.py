"""What the audit log records of an op: which ops change an index, who made a change, and the
record of one change (see :meth:`indexplug.invocation.Invoker.audits`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

AUDITED = frozenset({"add", "index_folder", "remove", "drop", "import", "copy", "clear_history"})
"""The ops that change an index (or its history): each is recorded in the audit log where the
configuration's ``[audit]`` says so (see :meth:`Invoker.audits`)."""
CALLERS = ("python", "cli", "stdio", "http")
"""Who a change or a search is recorded as made by, besides the name of a named HTTP token
(:mod:`indexplug.tokens`, which refuses these as token names)."""


def change_record(op: str, parsed: Any, answer: Mapping[str, Any], caller: str) -> dict[str, Any]:
    """The audit record of a change ``op`` answered ``answer`` to: counts from its data, the
    ids it added or removed, the keys it named, and what it read from (copy, import)."""
    data = answer.get("data") or {}
    evidence = answer.get("evidence") or {}
    counts = {
        k: v
        for k, v in (data.items() if isinstance(data, Mapping) else ())
        if isinstance(v, int) and not isinstance(v, bool)
    }
    ids = list(data.get("added_ids") or data.get("removed_ids") or [])
    keys: list[str] = list(getattr(parsed, "keys", None) or [])
    if op == "add":
        keys = sorted({p.key for p in parsed.passages if p.key is not None})
    detail: dict[str, Any] = {}
    for name in ("source", "path", "filters", "before"):
        value = getattr(parsed, name, None)
        if value is not None:
            detail[name] = value
    return {
        "op": op,
        "caller": caller,
        "index": str(getattr(parsed, "index", "") or ""),
        "backend": str(evidence.get("backend", "") if isinstance(evidence, Mapping) else ""),
        "outcome": str(answer.get("code", "")),
        "ok": bool(answer.get("ok")),
        "counts": counts,
        "ids": ids,
        "keys": keys,
        "detail": detail,
    }
