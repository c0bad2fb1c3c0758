"""The check of ``stats``: its counts agree with what ``scan`` reads and with what was added."""

from __future__ import annotations

from indexplug.ops import StatsData
from indexplug.outcomes import IndexStatus
from indexplug.testing.checks.helpers import _filled, _remove, _scan_all
from indexplug.testing.checks.registry import _check
from indexplug.testing.checks.subject import Subject, fail


@_check(
    "stats.counts",
    "stats agrees with scan and with what was added: passages (as status, the backend's own "
    "op_stats where it offers one, and a scan count them), distinct sources and keys, and the "
    "text's length and bytes, also after a remove",
    claim="scan",
)
def _stats_counts(s: Subject) -> None:
    from indexplug.stats import index_stats

    index, ps = _filled(s, "stats")
    if s.claims("deletion"):
        gone = {ps[0].id, ps[1].id}
        _remove(s, index, sorted(gone), "remove of 2 passages")
        ps = [p for p in ps if p.id not in gone]
    what = "stats of an index holding the corpus" + (
        " less 2 removed" if s.claims("deletion") else ""
    )
    got = index_stats(s.guard, index, deadline_s=s.settings.op_deadline_s)
    if not isinstance(got, StatsData):
        fail(f"{what} answered {got.code} ({got.message}) instead of the figures")
    scanned = _scan_all(s, index, f"scan for {what}", len(ps), limit=5)
    expected = {
        "passages": len(ps),
        "scanned": len(scanned),
        "distinct_sources": len({p.source.uri for p in scanned}),
        "distinct_keys": len({p.key for p in scanned if p.key is not None}),
        "text_bytes": sum(len(p.text.encode("utf-8")) for p in scanned),
    }
    if len(scanned) != len(ps):
        fail(f"a scan for {what} read {len(scanned)} passages, not the {len(ps)} stored")
    for field, want in expected.items():
        have = getattr(got, field)
        if have != want:
            fail(f"{what} said {field}={have}; scan and the passages added say {want}")
    if callable(getattr(s.guard.backend, "op_stats", None)):
        own = s.guard.call_extra("stats", index, s.settings.op_deadline_s)
        if not isinstance(own, IndexStatus):
            fail(f"op_stats of {what} answered {own.code} ({own.message}) instead of STATUS")
        if not own.exists or own.passages != len(scanned):
            fail(
                f"op_stats of {what} said exists={own.exists}, passages={own.passages}; "
                f"a scan reads {len(scanned)}"
            )
    chars = sorted(len(p.text) for p in scanned)
    if got.text_chars is None or (got.text_chars.min, got.text_chars.max) != (chars[0], chars[-1]):
        fail(
            f"{what} gave text lengths {got.text_chars}; the passages scanned run from "
            f"{chars[0]} to {chars[-1]} characters"
        )
