"""The check of an outage: honest answers while unavailable, and recovery."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from indexplug.outcomes import (
    Indexed,
)
from indexplug.protocols import Readiness
from indexplug.testing.checks.helpers import (
    _QUERIES,
    _add,
    _compare,
    _describe,
    _filled,
    _op,
    _snapshot,
    kit_passage,
)
from indexplug.testing.checks.registry import _check
from indexplug.testing.checks.subject import Subject, fail


@_check(
    "availability.outage",
    "When unavailable, readiness says why and every op answers "
    "INDEX_UNAVAILABLE; when back, the same instance recovers",
    outage_or_claim=True,
)
def _outage(s: Subject) -> None:
    hooks = s.outage_hooks()
    assert hooks is not None
    down, up = hooks
    index, ps = _filled(s, "outage")
    before = _snapshot(s, index, _QUERIES, "before the outage")
    try:
        down()
    except Exception as exc:
        fail(f"make_unavailable() raised {_describe(exc)}")
    try:
        try:
            raw = s.guard.backend.readiness()
        except Exception as exc:
            fail(f"readiness() raised {_describe(exc)} while unavailable instead of saying why")
        if not isinstance(raw, Readiness):
            fail(f"readiness() returned {type(raw).__name__} while unavailable")
        if raw.ready:
            fail("readiness() reported ready while the backend was unavailable")
        if not (raw.reason or "").strip():
            fail("readiness() reported not ready without a reason")
        other = kit_passage("Written during an outage: puffins nest on cliffs.", 90)
        calls: list[tuple[str, str, Callable[[], Any]]] = [
            (
                "search",
                "search while unavailable",
                lambda: s.guard.search(index, "fox", deadline_s=s.settings.op_deadline_s),
            ),
            (
                "add",
                "add while unavailable",
                lambda: s.guard.add(index, [other], deadline_s=s.settings.op_deadline_s),
            ),
            (
                "status",
                "status while unavailable",
                lambda: s.guard.status(index, deadline_s=s.settings.op_deadline_s),
            ),
        ]
        if s.claims("deletion"):
            calls.append(
                (
                    "remove",
                    "remove while unavailable",
                    lambda: s.guard.remove(index, [ps[0].id], deadline_s=s.settings.op_deadline_s),
                )
            )
        for op, what, call in calls:
            out = _op(op, what, ("INDEX_UNAVAILABLE",), index, call)
            if not out.reason.strip():
                fail(f"{what} answered INDEX_UNAVAILABLE without a reason")
    finally:
        try:
            up()
        except Exception as exc:
            fail(f"restore() raised {_describe(exc)}")
    until = time.monotonic() + s.settings.recovery_timeout_s
    while not s.guard.readiness().ready:
        if time.monotonic() > until:
            fail(
                f"the backend was not ready {s.settings.recovery_timeout_s:g}s after restore(): "
                f"{s.guard.readiness().reason}"
            )
        time.sleep(0.05)
    _compare(
        before,
        _snapshot(s, index, _QUERIES, "after the outage"),
        "the index is not as it was before the outage",
    )
    again: Indexed = _add(s, index, ps, "add after the outage")
    if again.known != len(ps):
        fail(f"after the outage, {len(ps) - again.known} stored passage(s) were not known")
