"""How close is the native engine to an exhaustive MaxSim over the same vectors?

For every judged query of a BEIR dataset this compares the engine's answer (candidate generation,
then exact MaxSim on the candidates) with an exhaustive MaxSim over every stored token vector of
the same index: the engine's own ``exhaustive=true`` mode, so the same vectors and the same
arithmetic.  It reports

* ``top10_overlap``: the share of exhaustive top-10 hits that the engine's top 10 also holds
  (the target is >= 0.99), and ``identical_top10``: the share of queries whose top 10 is the
  same list, in the same order;
* ``candidate_recall``: the share of exhaustive top-10 passages that candidate generation put
  in the pool sent to exact MaxSim (the engine can only miss what this stage missed);
* nDCG@10 of both (ir-measures);
* search latency through the guard (p50/p95/mean, ms), as wall clock and as the process's CPU
  time (a machine shared with other work inflates the first much more), and the CPU time of
  embedding the query alone, so the engine's own share can be told apart from the model's.

The exhaustive reference costs about a second a query on a small CPU, so it is computed once and
kept in ``--reference FILE`` (JSON), reused while the index has the same passages and token
vectors.  Several engine settings can be compared in one run, each ``--config`` a comma-separated
``KEY=VALUE`` list (``--config candidates=96,nprobe=2 --config candidates=128``); with none, the
defaults (and any ``--option``) are measured.

The index is built through the public API if it does not exist yet, or reused: build it once
with ``indexplug eval DATASET --backend colbert --embedder SPEC --index NAME --keep`` and pass
the same ``--home`` (``$INDEXPLUG_HOME/colbert``) and ``--index``.

    python plugins/colbert/bench/exhaustive_recall.py ../shared/data/beir/scifact \\
        --embedder sentence-transformers:all-MiniLM-L6-v2 --home /tmp/ip/colbert --index scifact \\
        --reference /tmp/ip/scifact-minilm-exhaustive.json
"""

from __future__ import annotations

import argparse
import json
import os
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
        "p50": round(statistics.median(s), 2),
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


def parse_pairs(pairs: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    return out


def threads() -> dict[str, Any]:
    """The thread pools a measurement ran with (BLAS, OpenMP, torch if loaded)."""
    info: dict[str, Any] = {
        k: os.environ[k] for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS") if k in os.environ
    }
    try:
        from threadpoolctl import threadpool_info

        info["pools"] = sorted({(p["internal_api"], p["num_threads"]) for p in threadpool_info()})
    except ImportError:
        pass
    if "torch" in sys.modules:
        info["torch"] = sys.modules["torch"].get_num_threads()
    return info


def reference(
    path: Path | None, exhaustive: Guard, index: str, queries: list[tuple[str, str]], key: str
) -> tuple[dict[str, list[str]], float]:
    """Each query's exhaustive top 10 (passage ids), from ``path`` when it was computed for the
    same index contents (``key``), else by the engine's exhaustive mode (then saved)."""
    if path is not None and path.exists():
        kept = json.loads(path.read_text())
        if kept.get("key") == key and all(q in kept["top10"] for q, _ in queries):
            return {q: kept["top10"][q] for q, _ in queries}, kept.get("ms_per_query", 0.0)
    truth: dict[str, list[str]] = {}
    t = time.perf_counter()
    for n, (qid, text) in enumerate(queries):
        ref = exhaustive.search(index, text, top_k=10, deadline_s=3600)
        if not isinstance(ref, Searched):
            sys.exit(f"exhaustive search failed for query {qid}: {ref.code}")
        truth[qid] = [h.passage.id for h in ref.hits]
        if n % 50 == 49:
            print(f"reference {n + 1}/{len(queries)}", file=sys.stderr)
    took = round((time.perf_counter() - t) * 1000 / max(len(queries), 1), 1)
    if path is not None:
        path.write_text(json.dumps({"key": key, "ms_per_query": took, "top10": truth}))
    return truth, took


def measure(
    engine: Guard,
    index: str,
    queries: list[tuple[str, str]],
    truth: dict[str, list[str]],
    top_k: int,
) -> dict[str, Any]:
    backend = engine.backend
    assert isinstance(backend, ColbertBackend)
    # warm up: load the model, map the files
    engine.search(index, queries[0][1], top_k=top_k, deadline_s=60)
    native = backend._target(index).index  # the engine's own view, for its candidate pool
    mine: dict[str, list[str]] = {}
    wall: list[float] = []
    cpu: list[float] = []
    embed_cpu: list[float] = []
    overlap = identical = reached = want = 0
    for qid, text in queries:
        t, c = time.perf_counter(), time.process_time()
        got = engine.search(index, text, top_k=top_k, deadline_s=120)
        wall.append((time.perf_counter() - t) * 1000)
        cpu.append((time.process_time() - c) * 1000)
        c = time.process_time()
        native._query(text)  # type: ignore[attr-defined]
        embed_cpu.append((time.process_time() - c) * 1000)
        mine[qid] = [h.passage.id for h in got.hits] if isinstance(got, Searched) else []
        ref = truth[qid]
        pool = set(native.candidate_ids(text, top_k))  # type: ignore[attr-defined]
        overlap += len(set(mine[qid][:10]) & set(ref))
        identical += mine[qid][:10] == ref
        reached += len(pool & set(ref))
        want += len(ref)
    n = len(queries)
    return {
        "top10_overlap": round(overlap / want, 4),
        "identical_top10": round(identical / n, 4),
        "candidate_recall": round(reached / want, 4),
        "run": mine,
        "latency_ms": {
            "search_wall": percentiles(wall),
            "search_cpu": percentiles(cpu),
            "embed_query_cpu": percentiles(embed_cpu),
        },
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dataset", type=Path)
    ap.add_argument("--embedder", default="hashing:default")
    ap.add_argument("--home", type=Path, required=True, help="the colbert backend's home folder")
    ap.add_argument("--index", default="scifact")
    ap.add_argument("--option", "-o", action="append", default=[], help="engine KEY=VALUE")
    ap.add_argument("--config", action="append", default=[], help="KEY=VALUE,... to compare")
    ap.add_argument("--reference", type=Path, help="JSON file keeping the exhaustive top 10")
    ap.add_argument("--top-k", type=int, default=10)
    ap.add_argument("--limit", type=int, default=0, help="only the first N queries")
    args = ap.parse_args(argv)

    options: dict[str, Any] = {"embedder": args.embedder, **parse_pairs(args.option)}
    factory = get_registry().embedder
    exhaustive = Guard(ColbertBackend(args.home, {**options, "exhaustive": True}, factory))

    ds = load_beir(args.dataset)
    status = exhaustive.status(args.index)
    if status.code != "STATUS" or not status.exists:  # type: ignore[union-attr]
        passages = list(corpus_passages(ds))
        t0 = time.perf_counter()
        for i in range(0, len(passages), 1000):
            out = exhaustive.add(args.index, passages[i : i + 1000], deadline_s=3600)
            if out.code != "INDEXED":
                sys.exit(f"indexing failed: {out.message}")
            print(f"indexed {min(i + 1000, len(passages))}/{len(passages)}", file=sys.stderr)
        print(f"indexing took {time.perf_counter() - t0:.1f}s", file=sys.stderr)
        status = exhaustive.status(args.index)
    details = getattr(status, "details", {})

    queries = list(ds.queries.items())[: args.limit or None]
    # the scoring arithmetic is part of the key: since the query is quantised (int8) like the
    # passages, a reference computed with float queries no longer applies; nor does one whose
    # query was embedded in another precision (the sentence-transformers ``query_dtype``)
    embedder = factory(args.embedder)
    precision = getattr(embedder, "token_query_dtype", lambda: "float32")()
    key = (
        f"{args.embedder}|{getattr(status, 'passages', None)}|{details.get('token_vectors')}"
        f"|q-int8|q-{precision}"
    )
    truth, ref_ms = reference(args.reference, exhaustive, args.index, queries, key)
    by_id = {p.id: doc_id(p) for p in corpus_passages(ds)}
    as_docs = {q: [by_id[i] for i in ids] for q, ids in truth.items()}

    configs = [parse_pairs(c.split(",")) for c in args.config] or [{}]
    results = []
    for cfg in configs:
        engine = Guard(ColbertBackend(args.home, {**options, **cfg}, factory))
        got = measure(engine, args.index, queries, truth, args.top_k)
        run = {q: [by_id[i] for i in ids] for q, ids in got.pop("run").items()}
        results.append({"config": cfg, **got, "ndcg_at_10": ndcg10(run, ds.qrels)})
        print(json.dumps(results[-1]), file=sys.stderr)
        engine.close()
    report = {
        "dataset": ds.name,
        "embedder": args.embedder,
        "options": {k: v for k, v in options.items() if k != "embedder"},
        "passages": getattr(status, "passages", None),
        "token_vectors": details.get("token_vectors"),
        "segments": details.get("segments"),
        "kernels": details.get("kernels"),
        "queries": len(queries),
        "top_k": args.top_k,
        "exhaustive": {"ndcg_at_10": ndcg10(as_docs, ds.qrels), "ms_per_query": ref_ms},
        "threads": threads(),
        "load_average": os.getloadavg(),
        "results": results,
    }
    print(json.dumps(report, indent=2))
    exhaustive.close()
    return report


if __name__ == "__main__":
    main()
