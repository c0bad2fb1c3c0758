"""What each ranking path of the backend costs per query, on an index file that exists.

``python plugins/sqlite-fts5/bench/ranking_paths.py INDEX.sqlite ../shared/data/beir/scifact
[--top-k 10] [--passes 2]``

Runs every test query of a BEIR dataset against ``INDEX.sqlite`` (an index the backend wrote,
e.g. one ``indexplug eval --keep`` left) through the two unfiltered rankings on one connection,
each in its own read transaction as the backend runs them:

* **pruned**: :func:`indexplug_sqlite_fts5.pruning.top_k` (a process's first search, and every
  search of an index past ``postings_mb``);
* **memory**: :func:`indexplug_sqlite_fts5.postings.top_k` (later searches of an index that fits).

The last of ``--passes`` passes is timed (the earlier ones fill the term statistics and the held
postings).  It prints each path's median and mean in milliseconds as JSON.  To compare with
another version of the backend, run it again with that version's package first on
``PYTHONPATH``, in turns with this one, so that the machine's load hits both alike.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import time
from pathlib import Path
from typing import Any

from indexplug.evaluation import load_beir
from indexplug_sqlite_fts5 import postings, pruning
from indexplug_sqlite_fts5.query import query_terms


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("index", type=Path)
    ap.add_argument("dataset", type=Path)
    ap.add_argument("--top-k", type=int, default=10)
    ap.add_argument("--passes", type=int, default=2)
    args = ap.parse_args(argv)
    queries = [query_terms(q) for q in load_beir(args.dataset).queries.values()]
    conn = sqlite3.connect(f"file:{args.index}?mode=ro", uri=True, isolation_level=None)
    report: dict[str, Any] = {"top_k": args.top_k, "queries": len(queries)}
    for path in ("pruned", "memory"):
        stats = pruning.TermStats()
        times: list[float] = []
        for _ in range(max(args.passes, 1)):
            times = []
            for terms in queries:
                conn.execute("BEGIN")
                try:
                    stats.sync(conn, conn.execute("PRAGMA data_version").fetchone()[0])
                    t = time.perf_counter()
                    if path == "pruned":
                        pruning.top_k(conn, stats, terms, args.top_k)
                    else:
                        postings.top_k(conn, stats, terms, args.top_k, budget_bytes=1 << 30)
                    times.append((time.perf_counter() - t) * 1000)
                finally:
                    conn.execute("ROLLBACK")
        report[path] = {
            "median_ms": round(statistics.median(times), 3),
            "mean_ms": round(statistics.fmean(times), 3),
        }
    conn.close()
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
