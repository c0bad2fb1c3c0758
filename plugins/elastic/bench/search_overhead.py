"""Where the time of an elastic search goes: the server, the request shape, the framework.

``python plugins/elastic/bench/search_overhead.py ../shared/data/beir/scifact --url URL``

Indexes a BEIR corpus through the guard into the Elasticsearch at ``URL`` (BM25 mode), force
merges it, then runs every test query, repeatedly, five ways on the same index, interleaved query
by query (the order rotating) so that drift in the machine's load hits all of them alike:

* **guard**: ``Guard.search`` as a user calls it;
* **plugin**: the backend's own ``search`` with a deadline (no guard);
* **msearch**: the exact ``_msearch`` the backend sends while it keeps a passage count
  (``count_ttl_s``: the ranked leg alone), sent with the official client and its responses left
  as parsed JSON;
* **lexical**: only the ranked leg, with ``client.search`` (what a user of the raw client writes
  for the same terms on the same index: a ``match`` query, ``size=k``, the source returned);
* **lexical-ids**: the same without the source (ids and scores only), the floor.

The differences say what each layer costs: msearch - lexical is the ``_msearch`` envelope,
plugin - msearch the backend's Python (outcomes, passages) and its counting once a second,
guard - plugin the guard.  It prints median and mean
wall latency and this process's CPU time per way, and the ratios to ``lexical``.
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

from indexplug import Guard, Passage, Registry
from indexplug.deadlines import Deadline
from indexplug.evaluation import load_beir
from indexplug_elastic import search as q


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dataset", type=Path)
    ap.add_argument("--url", required=True, help="Elasticsearch URL (http://127.0.0.1:9200)")
    ap.add_argument("--top-k", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)

    ds = load_beir(args.dataset)
    passages = [Passage.create(text, f"beir://{ds.name}/{did}") for did, text in ds.corpus]
    queries = list(ds.queries.values())
    prefix = f"overhead-{os.getpid()}-"
    guard: Guard = Registry().backend(
        "elastic",
        {"hosts": [args.url], "prefix": prefix, "mode": "bm25"},
        home=Path(tempfile.mkdtemp(prefix="es-overhead-")),
    )
    try:
        return _measure(guard, args, passages, queries, ds.name)
    finally:
        guard.call_extra("drop", "bench", deadline_s=600)
        guard.close()


def _measure(
    guard: Guard, args: argparse.Namespace, passages: list[Passage], queries: list[str], name: str
) -> dict[str, Any]:
    for i in range(0, len(passages), 2000):
        out = guard.add("bench", passages[i : i + 2000], deadline_s=3600)
        assert out.code == "INDEXED", out
    guard.call_extra("optimize", "bench", deadline_s=3600)
    backend: Any = guard.backend
    cx = backend._cx  # the bench reads the backend's own request shape, not a copy of it
    es_index = cx.es_index("bench")
    client = cx.conn.client()
    meta = cx.meta(client, es_index, Deadline.after(60), fresh=True)
    k = args.top_k

    def terms(text: str) -> str:
        if meta.analysis == "client":
            return " ".join(cx.analysis.terms(text)[: q.MAX_QUERY_TERMS])
        return text

    def run_guard(text: str) -> None:
        guard.search("bench", text, top_k=k, deadline_s=10)

    def run_plugin(text: str) -> None:
        backend.search("bench", text, top_k=k, deadline=Deadline.after(10))

    def run_msearch(text: str) -> None:
        bodies = [
            q.lexical_body(meta.search_field, terms(text), size=k, filters=None, timeout_ms=10000)
        ]
        client.msearch(searches=q.msearch_lines(es_index, bodies))

    def run_lexical(text: str) -> None:
        client.search(index=es_index, query={"match": {meta.search_field: terms(text)}}, size=k)

    def run_ids(text: str) -> None:
        client.search(
            index=es_index,
            query={"match": {meta.search_field: terms(text)}},
            size=k,
            source=False,
        )

    ways = {
        "guard": run_guard,
        "plugin": run_plugin,
        "msearch": run_msearch,
        "lexical": run_lexical,
        "lexical-ids": run_ids,
    }
    names = list(ways)
    for fn in ways.values():  # warm caches and every code path
        for text in queries:
            fn(text)
    wall: dict[str, list[float]] = {n: [] for n in ways}
    cpu: dict[str, list[float]] = {n: [] for n in ways}
    load = [os.getloadavg()[0]]
    for rep in range(args.repeats):
        for i, text in enumerate(queries):
            turn = (i + rep) % len(names)
            for n in names[turn:] + names[:turn]:
                t, c = time.perf_counter(), time.process_time()
                ways[n](text)
                wall[n].append((time.perf_counter() - t) * 1000)
                cpu[n].append((time.process_time() - c) * 1000)
    load.append(os.getloadavg()[0])

    def summary(xs: list[float]) -> dict[str, float]:
        return {"p50": round(statistics.median(xs), 3), "mean": round(statistics.fmean(xs), 3)}

    base = statistics.median(wall["lexical"])
    report: dict[str, Any] = {
        "dataset": name,
        "passages": len(passages),
        "queries": len(queries),
        "top_k": k,
        "repeats": args.repeats,
        "analysis": meta.analysis,
        "latency_ms": {n: {"wall": summary(wall[n]), "cpu": summary(cpu[n])} for n in ways},
        "p50_over_lexical": {n: round(statistics.median(wall[n]) / base, 3) for n in ways},
        "load_avg": [round(x, 2) for x in load],
    }
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
