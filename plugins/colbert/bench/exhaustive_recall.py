"""How close is the native engine to an exhaustive MaxSim over the same vectors?

For every judged query of a BEIR dataset this compares the engine's answer (candidate generation,
then exact MaxSim on the candidates) with an exhaustive MaxSim over every stored token vector of
the same index (the engine with ``exhaustive=true``: same vectors, same arithmetic), and reports

* ``top10_overlap``: the share of exhaustive top-10 hits that the engine's top 10 also holds
  (the target is >= 0.99), and ``identical_top10``: the share of queries whose top 10 is the
  same list, in the same order;
* ``candidate_recall``: the share of exhaustive top-10 passages that candidate generation put
  in the pool sent to exact MaxSim (the engine can only miss what this stage missed);
* nDCG@10 of both (ir-measures), and search latency through the guard (p50/p95/mean, ms).

The index is built through the public API if it does not exist yet, or reused: build it once
with ``indexplug eval DATASET --backend colbert --embedder SPEC --index NAME --keep`` and pass
the same ``--home`` (``$INDEXPLUG_HOME/colbert``) and ``--index``.

    python plugins/colbert/bench/exhaustive_recall.py ../shared/data/beir/scifact \\
        --embedder sentence-transformers:all-MiniLM-L6-v2 --home /tmp/ip/colbert --index scifact
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from indexplug import Guard, Searched, get_registry
from indexplug.evaluation import corpus_passages, doc_id, load_beir
from indexplug_colbert import ColbertBackend


def percentiles(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)
    return {
        "p50": round(s[len(s) // 2], 2),
        "p95": round(s[min(len(s) - 1, round(0.95 * (len(s) - 1)))], 2),
        "mean": round(statistics.fmean(s), 2),
    }


def ndcg10(run: dict[str, list[str]], qrels: dict[str, dict[str, int]]) -> float:
    import ir_measures
    from ir_measures import nDCG

    rels = [ir_measures.Qrel(q, d, r) for q, docs in qrels.items() for d, r in docs.items()]
    scored = [
        ir_measures.ScoredDoc(q, d, float(len(docs) - i))
        for q, docs in run.items()
        for i, d in enumerate(docs)
    ]
    return round(float(ir_measures.calc_aggregate([nDCG @ 10], rels, scored)[nDCG @ 10]), 4)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dataset", type=Path)
    ap.add_argument("--embedder", default="hashing:default")
    ap.add_argument("--home", type=Path, required=True, help="the colbert backend's home folder")
    ap.add_argument("--index", default="exhaustive-recall")
    ap.add_argument("--option", "-o", action="append", default=[], help="engine KEY=VALUE")
    ap.add_argument("--top-k", type=int, default=10)
    ap.add_argument("--limit", type=int, default=0, help="only the first N queries")
    args = ap.parse_args(argv)

    options: dict[str, Any] = {"embedder": args.embedder}
    for pair in args.option:
        key, _, value = pair.partition("=")
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    factory = get_registry().embedder
    engine = Guard(ColbertBackend(args.home, options, factory))
    exhaustive = Guard(ColbertBackend(args.home, {**options, "exhaustive": True}, factory))

    ds = load_beir(args.dataset)
    status = engine.status(args.index)
    if status.code != "STATUS" or not status.exists:  # type: ignore[union-attr]
        passages = list(corpus_passages(ds))
        t0 = time.perf_counter()
        for i in range(0, len(passages), 1000):
            out = engine.add(args.index, passages[i : i + 1000], deadline_s=3600)
            if out.code != "INDEXED":
                sys.exit(f"indexing failed: {out.message}")
            print(f"indexed {min(i + 1000, len(passages))}/{len(passages)}", file=sys.stderr)
        print(f"indexing took {time.perf_counter() - t0:.1f}s", file=sys.stderr)
        status = engine.status(args.index)

    queries = list(ds.queries.items())[: args.limit or None]
    # warm up: load the model, map the files
    engine.search(args.index, queries[0][1], top_k=args.top_k, deadline_s=60)
    backend = engine.backend
    assert isinstance(backend, ColbertBackend)
    native = backend._target(args.index).index  # the engine's own view, for its candidate pool

    run_engine: dict[str, list[str]] = {}
    run_exhaustive: dict[str, list[str]] = {}
    lat_engine: list[float] = []
    lat_exhaustive: list[float] = []
    overlap = identical = reached = 0
    for qid, text in queries:
        t = time.perf_counter()
        got = engine.search(args.index, text, top_k=args.top_k, deadline_s=120)
        lat_engine.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        ref = exhaustive.search(args.index, text, top_k=args.top_k, deadline_s=600)
        lat_exhaustive.append((time.perf_counter() - t) * 1000)
        mine = [h.passage.id for h in got.hits] if isinstance(got, Searched) else []
        truth = [h.passage.id for h in ref.hits] if isinstance(ref, Searched) else []
        pool = set(native.candidate_ids(text, args.top_k))  # type: ignore[attr-defined]
        overlap += len(set(mine[:10]) & set(truth[:10]))
        identical += mine[:10] == truth[:10]
        reached += len(pool & set(truth[:10]))
        if isinstance(got, Searched):
            run_engine[qid] = [doc_id(h.passage) for h in got.hits]
        if isinstance(ref, Searched):
            run_exhaustive[qid] = [doc_id(h.passage) for h in ref.hits]
    n = len(queries)
    want = sum(min(10, args.top_k) for _ in queries)
    report = {
        "dataset": ds.name,
        "embedder": args.embedder,
        "options": {k: v for k, v in options.items() if k != "embedder"},
        "passages": getattr(status, "passages", None),
        "token_vectors": getattr(status, "details", {}).get("token_vectors"),
        "segments": getattr(status, "details", {}).get("segments"),
        "queries": n,
        "top10_overlap": round(overlap / want, 4),
        "identical_top10": round(identical / n, 4),
        "candidate_recall": round(reached / want, 4),
        "ndcg_at_10": {
            "engine": ndcg10(run_engine, ds.qrels),
            "exhaustive": ndcg10(run_exhaustive, ds.qrels),
        },
        "latency_ms": {
            "engine": percentiles(lat_engine),
            "exhaustive": percentiles(lat_exhaustive),
        },
    }
    print(json.dumps(report, indent=2))
    engine.close()
    exhaustive.close()
    return report


if __name__ == "__main__":
    main()
