"""One system on one dataset, in its own process, so peak memory is that system's alone.

``python -m indexplug_bench.worker SYSTEM DATASET --repeats 3 --out result.json`` where DATASET
is a BEIR folder or ``synthetic:N``.  Each repeat indexes into a fresh folder and runs every
query once; quality comes from the last repeat (every system here is deterministic).
``--paired-with RAW`` measures SYSTEM against RAW in this one process instead
(:mod:`indexplug_bench.paired`).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from indexplug_bench import machine
from indexplug_bench.datasets import load
from indexplug_bench.systems import SCALE_SYSTEMS, by_name, fresh
from indexplug_bench.timing import index_all, pct


def quality(run: dict[str, list[str]], qrels: dict[str, dict[str, int]]) -> dict[str, float]:
    import ir_measures
    from ir_measures import RR, R, nDCG

    qr = [ir_measures.Qrel(q, d, r) for q, docs in qrels.items() for d, r in docs.items()]
    scored = [
        ir_measures.ScoredDoc(q, d, float(len(ids) - i))
        for q, ids in run.items()
        for i, d in enumerate(dict.fromkeys(ids))
    ]
    agg = ir_measures.calc_aggregate([nDCG @ 10, R @ 100, RR @ 10], qr, scored)
    return {
        "ndcg_at_10": round(float(agg[nDCG @ 10]), 4),
        "recall_at_100": round(float(agg[R @ 100]), 4),
        "mrr_at_10": round(float(agg[RR @ 10]), 4),
    }


@contextmanager
def _workdir(given: Path | None) -> Iterator[str]:
    if given is not None:
        given.mkdir(parents=True, exist_ok=True)
        yield str(given)
        return
    with tempfile.TemporaryDirectory(prefix="ipbench-") as tmp:
        yield tmp


def measure(
    system: str,
    dataset: str,
    *,
    repeats: int,
    index_repeats: int,
    top_k: int,
    ctx: dict[str, Any],
    warmup: int = 0,
    workdir: Path | None = None,
) -> dict[str, Any]:
    """One system on one dataset.  Its indexes go under ``workdir`` (left for the caller to
    remove) or, without one, a temporary folder removed at the end."""
    name, size, batches, queries, qrels = load(dataset)
    load_before = os.getloadavg()[0]
    clock = machine.cpu_clock()
    cpu0 = time.process_time()
    make = SCALE_SYSTEMS[system] if dataset.startswith("synthetic:") else by_name(system).make
    index_pps: list[float] = []
    lat: dict[str, list[float]] = {"p50": [], "p95": [], "p99": [], "mean": []}
    run: dict[str, list[str]] = {}
    size_bytes = None
    failures: dict[str, int] = {}
    note = None
    with _workdir(workdir) as tmp:
        runner = None
        for rep in range(max(repeats, index_repeats)):
            if rep < index_repeats or runner is None:
                if runner is not None:
                    runner.close()
                home = fresh(Path(tmp) / f"rep{rep}")
                runner = make(home, ctx)
                index_pps.append(size / index_all(runner, batches))
                size_bytes = runner.size_bytes()
            if rep >= repeats:
                continue
            if rep == 0:
                # untimed passes over the queries first (``--warmup``): what a long-running
                # process has already done (a JVM's compiled search path, a backend's caches)
                for _ in range(warmup):
                    for _qid, text in queries:
                        runner.search(text, top_k)
            samples = []
            for qid, text in queries:
                t = time.perf_counter()
                ids = runner.search(text, top_k)
                samples.append((time.perf_counter() - t) * 1000)
                run[qid] = ids
            for key, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99)):
                lat[key].append(round(pct(samples, q), 3))
            lat["mean"].append(round(statistics.fmean(samples), 3))
        failures = dict(getattr(runner, "failures", {}) or {})
        note = getattr(runner, "note", None)
        if runner is not None:
            runner.close()
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "system": system,
        "dataset": name,
        "passages": size,
        "queries": len(queries),
        "top_k": top_k,
        "repeats": repeats,
        "index_repeats": index_repeats,
        "warmup": warmup,
        "index_passages_per_s": [round(x, 1) for x in index_pps],
        "latency_ms": lat,
        "quality": quality(run, qrels) if qrels else None,
        "size_bytes": size_bytes,
        "peak_rss_mb": round(peak_mb, 1),
        "failures": failures,
        "note": note,
        # the machine may be shared: its 1-minute load before and after, and this process's CPU
        # seconds, say how much the wall-clock figures can be trusted
        "load_avg": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "cpu_s": round(time.process_time() - cpu0, 1),
        "steal_pct": machine.steal_pct(clock, machine.cpu_clock()),
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("system")
    p.add_argument("dataset")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--index-repeats", type=int, default=None)
    p.add_argument("--top-k", type=int, default=100)
    p.add_argument("--elastic-url", default=None)
    p.add_argument("--warmup", type=int, default=0, help="untimed passes over the queries")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--workdir", type=Path, default=None, help="where the indexes go")
    p.add_argument(
        "--paired-with",
        default=None,
        metavar="RAW",
        help="measure SYSTEM against the system RAW in this process, query by query in turns "
        "(indexplug_bench.paired); --repeats is then the caller's business (one pass here)",
    )
    p.add_argument(
        "--replay",
        action="store_true",
        help="with --paired-with: also replay SYSTEM's searches with its library's answers "
        "from memory (indexplug_bench.replay), where its library calls are named",
    )
    p.add_argument(
        "--no-guard-memory",
        dest="guard_memory",
        action="store_false",
        help="with --paired-with: SYSTEM's guard remembers no checked passage "
        "(indexplug_bench.paired.forget_checked)",
    )
    a = p.parse_args()
    ctx = {
        "elastic_url": a.elastic_url,
        "elastic_url_list": [a.elastic_url] if a.elastic_url else None,
    }
    if a.paired_with:
        from indexplug_bench.paired import measure_pair
        from indexplug_bench.replay import LIBRARY_CALLS, Replay

        calls = LIBRARY_CALLS.get(a.system) if a.replay else None
        with _workdir(a.workdir) as tmp:
            pair = measure_pair(
                a.system,
                a.paired_with,
                a.dataset,
                top_k=a.top_k,
                ctx=ctx,
                warmup=max(1, a.warmup) if calls else a.warmup,
                workdir=Path(tmp),
                replay=Replay(calls) if calls else None,
                guard_memory=a.guard_memory,
            )
        a.out.write_text(json.dumps(pair, indent=1))
        return
    result = measure(
        a.system,
        a.dataset,
        repeats=a.repeats,
        index_repeats=a.index_repeats if a.index_repeats is not None else a.repeats,
        top_k=a.top_k,
        ctx=ctx,
        warmup=a.warmup,
        workdir=a.workdir,
    )
    a.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
