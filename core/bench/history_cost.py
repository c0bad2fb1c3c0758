"""What search history costs a search: sqlite-fts5 on a BEIR set, history off, hashed, full.

``python core/bench/history_cost.py ../shared/data/beir/scifact [--top-k 10] [--repeats 3]``

Indexes the corpus into three indexes (sqlite-fts5, in a fresh ``INDEXPLUG_HOME``), one per
history mode, then runs every test query through three invokers in one process, interleaved
query by query (the order rotating) so that drift in the machine's load hits all three alike.
Each search is ``Invoker.invoke("search", ...)``, as a Python caller makes it. It prints the p50
and p99 of each mode, the p50 difference from ``off``, and, for the writer's bound, the p50, p99
and max of ``HistoryStore.record`` alone (the only work a search waits for: a non-blocking
``put`` on the bounded queue) and how many records were dropped.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dataset", type=Path)
    ap.add_argument("--top-k", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    os.environ["INDEXPLUG_HOME"] = tempfile.mkdtemp(prefix="history-cost-")

    from indexplug.config import Config, Defaults, IndexConfig
    from indexplug.evaluation import load_beir
    from indexplug.history import store
    from indexplug.invocation import Invoker

    ds = load_beir(args.dataset)
    modes = ("off", "hashed", "full")
    cfg = Config(
        defaults=Defaults(backend="sqlite-fts5"),
        indexes={
            m: IndexConfig(backend="sqlite-fts5", history=m)  # type: ignore[arg-type]
            for m in modes
        },
    )
    invokers = {m: Invoker(cfg) for m in modes}
    loader = invokers["off"]
    docs = [{"text": text, "uri": f"beir://{ds.name}/{did}"} for did, text in ds.corpus]
    for m in modes:
        for i in range(0, len(docs), 1000):
            a = loader.invoke("add", {"index": m, "passages": docs[i : i + 1000]})
            assert a["code"] == "INDEXED", a
    queries = list(ds.queries.values())
    times: dict[str, list[float]] = {m: [] for m in modes}
    for r in range(args.repeats + 1):  # the first pass warms up
        for n, q in enumerate(queries):
            order = modes[(n + r) % 3 :] + modes[: (n + r) % 3]
            for m in order:
                t0 = time.perf_counter()
                got = invokers[m].invoke("search", {"index": m, "query": q, "top_k": args.top_k})
                dt = (time.perf_counter() - t0) * 1000
                assert got["code"] in ("SEARCHED", "NO_MATCH"), got
                if r:
                    times[m].append(dt)
    h = store()
    h.flush(60)
    # the bound: the record call alone
    rec: list[float] = []
    for q in queries:
        t0 = time.perf_counter()
        h.record(
            caller="python",
            op="search",
            index="full",
            backend="sqlite-fts5",
            mode="full",
            query=q,
            top_k=10,
            filters=None,
            outcome="SEARCHED",
            hits=[("a" * 64, 1.0, i + 1) for i in range(10)],
            latency_ms=1.0,
        )
        rec.append((time.perf_counter() - t0) * 1000)
    h.flush(60)

    def q99(xs: list[float]) -> float:
        return statistics.quantiles(xs, n=100)[98]

    out: dict[str, Any] = {
        "queries": len(queries),
        "repeats": args.repeats,
        "top_k": args.top_k,
        "p50_ms": {m: round(statistics.median(times[m]), 3) for m in modes},
        "p99_ms": {m: round(q99(times[m]), 3) for m in modes},
        "record_ms": {
            "p50": round(statistics.median(rec), 4),
            "p99": round(q99(rec), 4),
            "max": round(max(rec), 4),
        },
        "dropped": h.dropped,
        "written": h.written,
        "load": os.getloadavg(),
    }
    out["p50_over_off_ms"] = {
        m: round(out["p50_ms"][m] - out["p50_ms"]["off"], 3) for m in modes[1:]
    }
    print(json.dumps(out, indent=2))
    for inv in invokers.values():
        inv.close()
    return out


if __name__ == "__main__":
    main()
