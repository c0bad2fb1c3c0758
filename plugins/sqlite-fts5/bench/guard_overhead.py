"""What the guard costs on a search, and what the framework costs over raw ``sqlite3``.

``python plugins/sqlite-fts5/bench/guard_overhead.py ../shared/data/beir/scifact [--top-k 10]``

Indexes a BEIR corpus through the guard, optimises it, then runs every test query, repeatedly,
three ways on the same index and the same connection settings, interleaved query by query so that
drift in the machine's load hits all three alike:

* **guard**: ``Guard.search`` as a user calls it (readiness, validation, the deadline, the
  hit and integrity checks);
* **plugin**: the backend's own ``search`` called directly with a deadline (no guard);
* **raw**: a plain ``sqlite3`` connection to the same file running the FTS5 query a user would
  write for the same terms (``MATCH <OR of the terms> ORDER BY bm25 LIMIT k``) and reading the
  rows (no pruning, no passages built).

It prints the median and mean latency of each (wall clock and this process's CPU time) and the
ratios guard/plugin (the guard's overhead) and guard/raw (the framework's, which pruning can make
below 1).  Figures go to ``docs/backends/sqlite-fts5.md`` with the command and the machine load.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from indexplug import Guard, Passage, Registry
from indexplug.deadlines import Deadline
from indexplug.evaluation import load_beir
from indexplug_sqlite_fts5.query import fts5_expression, query_terms


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dataset", type=Path)
    ap.add_argument("--top-k", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=6, help="a multiple of 3 keeps orders fair")
    args = ap.parse_args(argv)

    ds = load_beir(args.dataset)
    passages = [Passage.create(text, f"beir://{ds.name}/{did}") for did, text in ds.corpus]
    queries = list(ds.queries.values())
    home = Path(tempfile.mkdtemp(prefix="guard-overhead-"))
    guard: Guard = Registry().backend("sqlite-fts5", {}, home=home)
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(0, len(passages), 1000):
        out = guard.add("bench", passages[i : i + 1000], deadline_s=3600)
        assert out.code == "INDEXED", out
    index_wall, index_cpu = time.perf_counter() - t0, time.process_time() - c0
    guard.call_extra("optimize", "bench", deadline_s=3600)
    plugin = guard.backend
    raw = sqlite3.connect(next(home.glob("bench*")), isolation_level=None)
    raw_sql = "SELECT rowid, bm25(fts) FROM fts WHERE fts MATCH ? ORDER BY bm25(fts) LIMIT ?"

    def run_guard(q: str) -> None:
        guard.search("bench", q, top_k=args.top_k, deadline_s=10)

    def run_plugin(q: str) -> None:
        plugin.search("bench", q, top_k=args.top_k, deadline=Deadline.after(10))

    def run_raw(q: str) -> None:
        expr = fts5_expression(query_terms(q))
        if expr:
            raw.execute(raw_sql, (expr, args.top_k)).fetchall()

    ways = {"guard": run_guard, "plugin": run_plugin, "raw": run_raw}
    for fn in ways.values():  # warm the page cache and every code path
        for q in queries:
            fn(q)
    wall: dict[str, list[float]] = {k: [] for k in ways}
    cpu: dict[str, list[float]] = {k: [] for k in ways}
    load = [os.getloadavg()[0]]
    names = list(ways)
    for rep in range(args.repeats):
        for n, q in enumerate(queries):
            # rotate who goes first: the first to run a query pays for its cold pages and
            # caches, and the ones after it would look faster for it; over every 3 repeats
            # each query runs in each order once
            turn = (n + rep) % 3
            for name in names[turn:] + names[:turn]:
                fn = ways[name]
                t, c = time.perf_counter(), time.process_time()
                fn(q)
                wall[name].append((time.perf_counter() - t) * 1000)
                cpu[name].append((time.process_time() - c) * 1000)
    load.append(os.getloadavg()[0])

    def summary(xs: list[float]) -> dict[str, float]:
        return {"p50": round(statistics.median(xs), 3), "mean": round(statistics.fmean(xs), 3)}

    report: dict[str, Any] = {
        "dataset": ds.name,
        "passages": len(passages),
        "queries": len(queries),
        "top_k": args.top_k,
        "repeats": args.repeats,
        "index_passages_per_s": {
            "wall": round(len(passages) / index_wall),
            "cpu": round(len(passages) / index_cpu),
        },
        "latency_ms": {
            name: {"wall": summary(wall[name]), "cpu": summary(cpu[name])} for name in ways
        },
        "guard_over_plugin_p50": round(
            statistics.median(wall["guard"]) / statistics.median(wall["plugin"]), 3
        ),
        "guard_over_raw_p50": round(
            statistics.median(wall["guard"]) / statistics.median(wall["raw"]), 3
        ),
        "load_avg": [round(x, 2) for x in load],
    }
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
