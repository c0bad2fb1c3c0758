"""How much does indexplug add to a Chroma search?  The framework against raw chromadb.

Both sides do the same work for each query: embed it with the *same* embedder object, then ask
Chroma for the top ``k`` with documents and distances (what the backend asks of a collection
keeping its provenance in the documents, as every collection it creates by default does).

* **framework**: ``guard.search(index, query, top_k=k)``: the guard (validation, readiness,
  a worker thread and its deadline, hit checks including the content-address of every hit) and
  the backend (collection lookup, count, embedder check, rebuilding each passage and its
  provenance, typed outcome);
* **raw**: ``embedder.embed_query(query)`` then ``collection.query(...)`` on a chromadb client
  opened on the same collection.

Two comparisons are made:

* **end to end**: both sides embed the query (the figure a user sees);
* **precomputed**: both sides get the query's embedding computed beforehand (the framework's
  embedder is swapped for a lookup), which removes the model from the comparison: what is left
  is the framework's own cost against Chroma's query alone, the strictest reading of "overhead".

Queries alternate between the two sides (framework, raw, raw, framework, ...) so that load on a
shared machine hits both alike; figures are medians over every query and repetition.  (End to
end, the framework embeds in the guard's worker thread and the raw side in the main thread; on a
small, busy machine the two threads' math-library pools contend, which makes that comparison
noisy in both directions.)  Usage (from the repository root)::

    .venv/bin/python plugins/chroma/bench/overhead.py ../shared/data/beir/scifact \
        --embedder sentence-transformers:all-MiniLM-L6-v2 --repeat 3 --json

``--mode server`` starts a real ``chroma run`` (``indexplug_chroma.testing``) and measures
over HTTP.  Indexing reuses the embedding cache of ``--home`` (default: a temporary home).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _ms(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)
    return {
        "median": round(statistics.median(s), 3),
        "mean": round(statistics.fmean(s), 3),
        "p95": round(s[min(len(s) - 1, round(0.95 * (len(s) - 1)))], 3),
    }


class _Lookup:
    """An embedder answering queries from precomputed vectors (same name and dimension)."""

    def __init__(self, inner: Any, vectors: dict[str, Any]) -> None:
        self.inner = inner
        self.vectors = vectors
        self.name = inner.name
        self.dim = inner.dim
        self.granularities = inner.granularities

    def readiness(self) -> Any:
        return self.inner.readiness()

    def embed_documents(self, texts: Any, granularity: Any) -> Any:
        return self.inner.embed_documents(texts, granularity)

    def embed_query(self, text: str, granularity: Any) -> Any:
        return self.vectors[text]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("dataset", type=Path, help="BEIR folder (corpus.jsonl, queries.jsonl, qrels/)")
    ap.add_argument("--embedder", default="sentence-transformers:all-MiniLM-L6-v2")
    ap.add_argument("--mode", choices=["embedded", "server"], default="embedded")
    ap.add_argument("--top-k", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--home", type=Path, default=None, help="indexplug home (embedding cache)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    import os

    tmp = tempfile.TemporaryDirectory(prefix="indexplug-bench-")
    home = args.home or Path(tmp.name)
    os.environ["INDEXPLUG_HOME"] = str(home)

    from indexplug.evaluation import corpus_passages, load_beir
    from indexplug.plugins import get_registry
    from indexplug.protocols import Granularity
    from indexplug_chroma.stores import chroma_settings, collection_name

    server = None
    options: dict[str, Any] = {"embedder": args.embedder, "mode": args.mode}
    if args.mode == "server":
        from indexplug_chroma.testing import ChromaServer

        server = ChromaServer().start()
        options.update(host=server.host, port=server.port)
    try:
        ds = load_beir(args.dataset)
        guard = get_registry().backend("chroma", options, home=Path(tmp.name) / "chroma")
        backend: Any = guard.backend
        backend.warm()
        index = "bench-overhead"
        passages = list(corpus_passages(ds))
        t0 = time.perf_counter()
        for i in range(0, len(passages), 1000):
            out = guard.add(index, passages[i : i + 1000], deadline_s=3600)
            if out.code != "INDEXED":
                raise SystemExit(f"indexing failed: {out.message}")
        index_s = time.perf_counter() - t0

        import chromadb

        if server is not None:
            raw_client = chromadb.HttpClient(
                host=server.host, port=server.port, settings=chroma_settings()
            )
        else:
            raw_client = chromadb.PersistentClient(
                path=str(Path(tmp.name) / "chroma" / index), settings=chroma_settings()
            )
        coll = raw_client.get_collection(collection_name(index), embedding_function=None)
        emb = backend.embedder()
        queries = list(ds.queries.values())

        def framework(q: str) -> float:
            t = time.perf_counter()
            out = guard.search(index, q, top_k=args.top_k, deadline_s=60)
            took = time.perf_counter() - t
            if out.code != "SEARCHED":
                raise SystemExit(f"search failed: {out.message}")
            return took * 1000

        def raw(q: str) -> float:
            t = time.perf_counter()
            vec = emb.embed_query(q, Granularity.TEXT)
            coll.query(
                query_embeddings=[vec],
                n_results=args.top_k,
                include=["documents", "distances"],
            )
            return (time.perf_counter() - t) * 1000

        def embed_only(q: str) -> float:
            t = time.perf_counter()
            emb.embed_query(q, Granularity.TEXT)
            return (time.perf_counter() - t) * 1000

        def compare(repeat: int, em: list[float]) -> tuple[list[float], list[float]]:
            for q in queries[:20]:  # warm caches on both sides
                framework(q)
                raw(q)
            fw: list[float] = []
            rw: list[float] = []
            for r in range(repeat):
                for n, q in enumerate(queries):
                    if (n + r) % 2:
                        fw.append(framework(q))
                        rw.append(raw(q))
                    else:
                        rw.append(raw(q))
                        fw.append(framework(q))
                    em.append(embed_only(q))
            return fw, rw

        em: list[float] = []
        fw, rw = compare(args.repeat, em)
        vectors = {q: emb.embed_query(q, Granularity.TEXT) for q in queries}
        backend._embedder = _Lookup(emb, vectors)
        emb = backend._embedder
        pfw, prw = compare(args.repeat, [])

        def summary(f_: list[float], w_: list[float]) -> dict[str, Any]:
            f, w = _ms(f_), _ms(w_)
            return {
                "framework_ms": f,
                "raw_chromadb_ms": w,
                "overhead_ms_median": round(f["median"] - w["median"], 3),
                "overhead_pct_median": round(100 * (f["median"] - w["median"]) / w["median"], 1),
            }

        report = {
            "dataset": ds.name,
            "mode": args.mode,
            "embedder": backend.settings.embedder,
            "passages": len(passages),
            "index_seconds": round(index_s, 1),
            "queries": len(queries) * args.repeat,
            "top_k": args.top_k,
            "embedding_only_ms": _ms(em),
            "end_to_end": summary(fw, rw),
            "precomputed_embedding": summary(pfw, prw),
            "load_average_1m": round(os.getloadavg()[0], 1),
        }
        guard.close()
        raw_client.close()
    finally:
        if server is not None:
            server.close()
        tmp.cleanup()
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for key, value in report.items():
            print(f"{key:>22}: {value}")
    return report


if __name__ == "__main__":
    main(sys.argv[1:])
