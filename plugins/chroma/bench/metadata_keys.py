"""What a record's metadata keys cost a Chroma query: none, one or four keys per record, or the
provenance in the document.

``python plugins/chroma/bench/metadata_keys.py [--records 5183] [--queries 300]``

Chroma (embedded) keeps a record's document and metadata as one row per key and reads them back
for every hit a query returns, so the number of keys a backend writes per record is paid on every
search, a hundred times over at top 100.  This builds four collections of the same random
vectors and SciFact-sized documents (about 1,500 characters), differing only in their metadata
and documents:

* **none**: no metadata (what a raw user who keeps the source in the id stores);
* **in document**: no metadata, the provenance JSON after the text in the document, behind a
  record separator (the chroma backend's layout since December 2026);
* **one**: the provenance as one JSON key, ``ip.prov`` (the backend's layout before, still
  written with ``plain_documents=true``);
* **four**: source, start, end and metadata as four keys (the backend's first layout);

then runs the same random queries against all of them, interleaved query by query (so drift in the
machine's load hits them alike), asking for documents, metadatas (where there are any; asking
for them costs even where records have none) and distances, and prints the median milliseconds
per query at k=10 and k=100.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from typing import Any

import chromadb
import numpy as np
from chromadb.config import Settings


def main(argv: list[str] | None = None) -> dict[int, dict[str, float]]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=5183)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args(argv)

    rng = np.random.default_rng(0)
    n = args.records
    vectors = rng.standard_normal((n, 384)).astype(np.float32)
    docs = [f"passage {i} " + "word " * 300 for i in range(n)]
    provs = [
        json.dumps({"source": {"uri": f"beir://scifact/{i}"}, "start": 0, "end": 1500, "meta": {}})
        for i in range(n)
    ]
    inline = [f"{d}\x1e{p}" for d, p in zip(docs, provs, strict=True)]
    layouts: dict[str, list[dict[str, Any]] | None] = {
        "none": None,
        "in document": None,
        "one": [{"ip.prov": p} for p in provs],
        "four": [
            {
                "ip.source": json.dumps({"uri": f"beir://scifact/{i}"}),
                "ip.start": 0,
                "ip.end": 1500,
                "ip.meta": "{}",
            }
            for i in range(n)
        ],
    }
    client = chromadb.PersistentClient(
        path=tempfile.mkdtemp(prefix="chroma-keys-"), settings=Settings(anonymized_telemetry=False)
    )
    collections = {}
    for name, metas in layouts.items():
        col = client.create_collection(
            f"keys-{name.replace(' ', '-')}",
            configuration={"hnsw": {"space": "cosine", "ef_search": 256}},
            embedding_function=None,
        )
        for i in range(0, n, 2000):
            part: dict[str, Any] = {
                "ids": [f"id{j}" for j in range(i, min(n, i + 2000))],
                "documents": (inline if name == "in document" else docs)[i : i + 2000],
                "embeddings": vectors[i : i + 2000],
            }
            if metas is not None:
                part["metadatas"] = metas[i : i + 2000]
            col.add(**part)
        collections[name] = (col, metas is not None)
    queries = rng.standard_normal((args.queries, 384)).astype(np.float32)
    report: dict[int, dict[str, float]] = {}
    for k in (10, 100):
        times: dict[str, list[float]] = {name: [] for name in collections}
        for _ in range(args.repeats):
            for q in queries:
                for name, (col, has_meta) in collections.items():
                    include = ["documents", "metadatas", "distances"] if has_meta else None
                    t = time.perf_counter()
                    col.query(
                        query_embeddings=[q],
                        n_results=k,
                        include=include or ["documents", "distances"],
                    )
                    times[name].append((time.perf_counter() - t) * 1000)
        report[k] = {name: round(statistics.median(ts), 3) for name, ts in times.items()}
    print(json.dumps({"records": n, "queries": args.queries, "median_ms": report}, indent=2))
    return report


if __name__ == "__main__":
    main()
