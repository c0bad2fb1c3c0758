"""The lead of ``docs/benchmarks.md``: which backend for what, picked from the page's own rows.

Every pick and every figure here is computed from the results the tables below it are rendered
from, so the summary cannot disagree with them: re-measure, re-render, and the lead follows.
A system's traits (keyword or vector search, a server or not) come from its name in the
harness; a row that failed any query, or that uses the test-only hashing embedder, is not a
candidate.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

Row = dict[str, Any]


def _p50(row: Row) -> float:
    return float(statistics.median(row["latency_ms"]["p50"]))


def _pps(row: Row) -> float:
    return float(statistics.median(row["index_passages_per_s"]))


def _ndcg(row: Row) -> float:
    return float((row.get("quality") or {}).get("ndcg_at_10") or 0.0)


def _server(system: str) -> bool:
    return "elastic" in system


def _vectors(system: str) -> bool:
    return "MiniLM" in system


def _keywords(system: str) -> bool:
    return "sqlite-fts5" in system or "BM25" in system


def _name(system: str) -> str:
    return system.removeprefix("indexplug ")


def _candidates(quality: list[Row]) -> list[Row]:
    """One row per indexplug system: its top-10 row where measured, else its smallest top k."""
    rows = [
        r
        for r in quality
        if r.get("kind") == "indexplug"
        and r.get("quality")
        and not r.get("failures")
        and "(hashing)" not in r["system"]
    ]
    rows.sort(key=lambda r: (r["system"], abs((r.get("top_k") or 10) - 10)))
    return list({r["system"]: r for r in reversed(rows)}.values())


def _figures(row: Row) -> str:
    cached = " †" if row.get("vectors_from_cache") else ""
    return (
        f"nDCG@10 {_ndcg(row)}; p50 {_p50(row):.2f} ms at top {row.get('top_k')}; "
        f"indexing {_pps(row):,.0f} passages/s{cached} (run {row.get('run', 0) + 1})"
    )


def _pick(rows: list[Row], keep: Callable[[str], bool], best: Callable[[Row], float]) -> Row | None:
    kept = [r for r in rows if keep(r["system"])]
    return max(kept, key=best) if kept else None


def which_backend(results: dict[str, Any]) -> list[str]:
    """The summary's lines (a heading, a table, a note), or none when nothing was measured."""
    rows = _candidates(results.get("quality", []))
    if not rows:
        return []
    uses: list[tuple[str, Row | None, str]] = []

    def fastest(row: Row) -> float:
        return -_p50(row)

    def one_machine_keywords(s: str) -> bool:
        return _keywords(s) and not _vectors(s) and not _server(s)

    def server_keywords(s: str) -> bool:
        return _keywords(s) and not _vectors(s) and _server(s)

    def one_machine_vectors(s: str) -> bool:
        return _vectors(s) and not _keywords(s) and not _server(s)

    for use, keep, best, why in (
        ("keyword search on one machine, no server", one_machine_keywords, fastest, "fastest"),
        ("keyword search on a server or a cluster", server_keywords, fastest, "fastest"),
        ("search by meaning on one machine", one_machine_vectors, fastest, "fastest"),
        (
            "the best ranking on one machine",
            lambda s: not _server(s),
            _ndcg,
            "highest nDCG@10",
        ),
        ("the best ranking with a server", _server, _ndcg, "highest nDCG@10"),
    ):
        pick = _pick(rows, keep, best)
        if pick is not None:
            uses.append((use, pick, f"{why} of its kind: {_figures(pick)}"))
    lines = [
        "## Which backend for what",
        "",
        "Picked from the tables below (the same rows, their medians); a backend's own page says "
        "what it offers beyond these figures.",
        "",
        "| for | backend | from the tables below |",
        "|---|---|---|",
    ]
    for use, pick, why in uses:
        assert pick is not None
        lines.append(f"| {use} | {_name(pick['system'])} | {why} |")
    largest = _largest_corpus(results.get("scale", []))
    if largest:
        lines.append(largest)
    lines.append("")
    if any(pick is not None and pick.get("vectors_from_cache") for _, pick, _ in uses):
        lines += [
            "† Indexing from a warm embedding cache: the store's own work, not the model's "
            "(see the note under the quality table).",
            "",
        ]
    return lines


def _largest_corpus(scale: list[Row]) -> str | None:
    """The row for the largest corpus the scale table measured more than one system at."""
    by_size: dict[int, list[Row]] = {}
    for r in scale:
        if r.get("kind", "indexplug") == "indexplug" and not r.get("failures"):
            by_size.setdefault(int(r["passages"]), []).append(r)
    sizes = [n for n, rs in by_size.items() if len(rs) > 1]
    if not sizes:
        return None
    size = max(sizes)
    rows = sorted(by_size[size], key=_p50)
    best, others = rows[0], rows[1:]
    against = ", ".join(f"{_name(r['system'])} {_p50(r):.2f} ms" for r in others)
    return (
        f"| the largest corpora | {_name(best['system'])} | fastest at {size:,} passages: "
        f"p50 {_p50(best):.2f} ms at top {best.get('top_k')} against {against}; indexing "
        f"{_pps(best):,.0f} passages/s (run {best.get('run', 0) + 1}) |"
    )
