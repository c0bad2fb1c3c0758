"""The nested layout (one document per key) against the flat layout of earlier versions.

``python plugins/elastic/bench/layout_parity.py ../shared/data/beir/scifact --url URL``

Indexes a BEIR corpus twice into the Elasticsearch at ``URL``: through the guard (the current,
nested layout) and, with raw requests, exactly as earlier versions wrote it (the flat layout,
:mod:`indexplug_elastic.testing.flat`); both force merged to one segment.  Then, for every
test query, BM25 at top 10 and top 100 on both, interleaved query by query (the order
alternating) so that drift in the machine's load hits both alike:

* **flat**: the ``_msearch`` earlier versions sent (a ``match`` query, ``size=k``, the source);
* **nested**: the ``_msearch`` the backend sends now (a ``nested`` query, ``score_mode: max``,
  inner hits of size k from stored fields), and its inner hits merged into the top k;
* **plugin**: the backend's own ``search`` (what the framework adds on top of ``nested``).

It reports nDCG@10 and Recall@100 of both layouts (ir-measures), the fraction of queries whose
top 10 is the same list, and median wall latency per way and k, with the load average before
and after.
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

import ir_measures
import orjson
from elasticsearch import Elasticsearch
from indexplug import Guard, Passage, Registry
from indexplug.deadlines import Deadline
from indexplug.evaluation import load_beir
from indexplug_elastic import search as q
from indexplug_elastic.testing.flat import FLAT_MAPPING, FLAT_SETTINGS, flat_document
from ir_measures import R, nDCG


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dataset", type=Path)
    ap.add_argument("--url", required=True, help="Elasticsearch URL (http://127.0.0.1:9200)")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)

    ds = load_beir(args.dataset)
    passages = [Passage.create(text, f"beir://{ds.name}/{did}") for did, text in ds.corpus]
    prefix = f"parity-{os.getpid()}-"
    guard: Guard = Registry().backend(
        "elastic",
        {"hosts": [args.url], "prefix": prefix, "mode": "bm25"},
        home=Path(tempfile.mkdtemp(prefix="es-parity-")),
    )
    client = Elasticsearch(args.url, request_timeout=600)
    flat_index = prefix + "flat"
    try:
        return _measure(guard, client, flat_index, args, passages, ds)
    finally:
        guard.call_extra("drop", "bench", deadline_s=600)
        client.indices.delete(index=flat_index, ignore_unavailable=True)
        guard.close()


def _index_flat(client: Elasticsearch, es_index: str, passages: list[Passage], cx: Any) -> None:
    client.indices.create(index=es_index, mappings=FLAT_MAPPING, settings=FLAT_SETTINGS)
    for i in range(0, len(passages), 1000):
        lines: list[bytes] = []
        for p in passages[i : i + 1000]:
            lines.append(orjson.dumps({"create": {"_index": es_index, "_id": p.id}}))
            lines.append(orjson.dumps(flat_document(p, cx.analysis)))
        answer = client.bulk(operations=b"\n".join(lines) + b"\n")  # type: ignore[arg-type]
        assert not answer["errors"]
    client.indices.refresh(index=es_index)
    client.indices.forcemerge(index=es_index, max_num_segments=1)


def _measure(
    guard: Guard,
    client: Elasticsearch,
    flat_index: str,
    args: argparse.Namespace,
    passages: list[Passage],
    ds: Any,
) -> dict[str, Any]:
    for i in range(0, len(passages), 2000):
        out = guard.add("bench", passages[i : i + 2000], deadline_s=3600)
        assert out.code == "INDEXED", out
    guard.call_extra("optimize", "bench", deadline_s=3600)
    backend: Any = guard.backend
    cx = backend._cx  # the bench sends the backend's own request shape, not a copy of it
    es_index = cx.es_index("bench")
    meta = cx.meta(client, es_index, Deadline.after(60), fresh=True)
    assert meta.analysis == "client", "the flat fixture is the client-analysis mapping"
    _index_flat(client, flat_index, passages, cx)
    doc_of = {p.id: p.source.uri.rsplit("/", 1)[-1] for p in passages}

    def terms(text: str) -> str:
        return " ".join(cx.analysis.terms(text)[: q.MAX_QUERY_TERMS])

    def flat(text: str, k: int) -> list[str]:
        body = {
            "query": {"match": {"terms": {"query": terms(text)}}},
            "size": k,
            "_source": True,
            "track_total_hits": False,
        }
        resp = client.msearch(searches=q.msearch_lines(flat_index, [body]))
        return [str(h["_id"]) for h in resp["responses"][0]["hits"]["hits"]]

    def nested(text: str, k: int) -> list[str]:
        body = q.lexical_body(
            meta.search_field, terms(text), size=k, filters=None, timeout_ms=10000
        )
        lines: Any = q.encoded(q.msearch_lines(es_index, [body]))
        resp = client.msearch(searches=lines)
        return [s.pid for s in q.ranked(resp["responses"][0], k)]

    def plugin(text: str, k: int) -> list[str]:
        out = backend.search("bench", text, top_k=k, deadline=Deadline.after(10))
        return [h.passage.id for h in getattr(out, "hits", [])]

    ways = {"flat": flat, "nested": nested, "plugin": plugin}
    queries = list(ds.queries.items())
    rankings: dict[str, dict[str, list[str]]] = {"flat": {}, "nested": {}}
    for qid, text in queries:  # warm caches, and the top 100 of both layouts for the metrics
        for n in ways:
            got = ways[n](text, 100)
            if n in rankings:
                rankings[n][qid] = got
    wall: dict[tuple[str, int], list[float]] = {(n, k): [] for n in ways for k in (10, 100)}
    load = [os.getloadavg()[0]]
    names = list(ways)
    for rep in range(args.repeats):
        for i, (_, text) in enumerate(queries):
            turn = (i + rep) % len(names)
            for k in (10, 100):
                for n in names[turn:] + names[:turn]:
                    t = time.perf_counter()
                    ways[n](text, k)
                    wall[(n, k)].append((time.perf_counter() - t) * 1000)
    load.append(os.getloadavg()[0])

    qrels = [
        ir_measures.Qrel(qq, d, rel) for qq, docs in ds.qrels.items() for d, rel in docs.items()
    ]

    def metrics(run: dict[str, list[str]]) -> dict[str, float]:
        scored = [
            ir_measures.ScoredDoc(qid, doc_of[pid], float(len(ids) - r))
            for qid, ids in run.items()
            for r, pid in enumerate(ids)
        ]
        agg = ir_measures.calc_aggregate([nDCG @ 10, R @ 100], qrels, scored)
        return {
            "ndcg_at_10": round(float(agg[nDCG @ 10]), 4),
            "recall_at_100": round(float(agg[R @ 100]), 4),
        }

    same = sum(rankings["flat"][qid][:10] == rankings["nested"][qid][:10] for qid, _ in queries)
    p50 = {f"{n}@{k}": round(statistics.median(xs), 3) for (n, k), xs in wall.items()}
    report: dict[str, Any] = {
        "dataset": ds.name,
        "passages": len(passages),
        "queries": len(queries),
        "repeats": args.repeats,
        "flat": metrics(rankings["flat"]),
        "nested": metrics(rankings["nested"]),
        "same_top10": round(same / len(queries), 4),
        "p50_ms": p50,
        "nested_over_flat": {
            f"@{k}": round(p50[f"nested@{k}"] / p50[f"flat@{k}"], 3) for k in (10, 100)
        },
        "load_avg": [round(x, 2) for x in load],
    }
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
