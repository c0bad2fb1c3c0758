"""Indexing throughput of the chroma backend, cold and with the embedding cache warm.

Embedding is the cost of building a dense index; this measures how much, and how much the
embedding cache (``indexplug.embedcache``) saves when the same passages are indexed again:

1. load the embedder's model (timed apart: it is paid once per process);
2. **cold**: index the whole corpus into a new index, in batches of 1000, with an empty cache;
3. **warm**: index the same corpus into a second index: every embedding comes from the cache,
   so what is left is storage (Chroma's writes) and the framework.

Usage (from the repository root; ``--home`` keeps the cache for a later ``indexplug eval``)::

    .venv/bin/python plugins/chroma/bench/throughput.py ../shared/data/beir/scifact \
        --embedder sentence-transformers:all-MiniLM-L6-v2 --home /tmp/ip-bench --json

``--limit N`` indexes the first ``N`` passages only (a cold run of the whole of SciFact takes
half an hour on a busy 2-core machine); ``--mode server`` writes to a real ``chroma run``
started for the run (``indexplug_chroma.testing``) instead of embedded folders.  Embedded, the
report also gives the warm index's size on disk next to the budget's projection for it
(:mod:`indexplug_chroma.sizes`), measured after the client is closed (Chroma writes its HNSW
files every 1,000 additions and on close).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("dataset", type=Path)
    ap.add_argument("--embedder", default="sentence-transformers:all-MiniLM-L6-v2")
    ap.add_argument("--home", type=Path, default=None, help="indexplug home (must be fresh)")
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--limit", type=int, default=None, help="index the first N passages only")
    ap.add_argument("--mode", choices=["embedded", "server"], default="embedded")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    tmp = tempfile.TemporaryDirectory(prefix="indexplug-bench-")
    home = args.home or Path(tmp.name)
    if (home / "embedcache").exists() and any((home / "embedcache").iterdir()):
        raise SystemExit(f"{home} already holds an embedding cache: the cold run would not be cold")
    os.environ["INDEXPLUG_HOME"] = str(home)

    from indexplug.evaluation import corpus_passages, load_beir
    from indexplug.plugins import get_registry

    ds = load_beir(args.dataset)
    passages = list(corpus_passages(ds))[: args.limit]
    chars = sum(len(p.text) for p in passages)
    load_before = os.getloadavg()[0]
    options: dict[str, Any] = {"embedder": args.embedder}
    server = None
    if args.mode == "server":
        from indexplug_chroma.testing import ChromaServer

        server = ChromaServer().start()
        options.update(mode="server", host=server.host, port=server.port)
    guard = get_registry().backend("chroma", options)
    backend: Any = guard.backend
    t = time.perf_counter()
    backend.warm()
    load_s = time.perf_counter() - t

    def index_all(name: str) -> float:
        t0 = time.perf_counter()
        for i in range(0, len(passages), args.batch):
            out = guard.add(name, passages[i : i + args.batch], deadline_s=3600)
            if out.code != "INDEXED":
                raise SystemExit(f"indexing failed: {out.message}")
            print(
                f"  {name}: {min(i + args.batch, len(passages))}/{len(passages)} "
                f"after {time.perf_counter() - t0:.0f}s",
                file=sys.stderr,
            )
        return time.perf_counter() - t0

    cold_s = index_all("bench-cold")
    warm_s = index_all("bench-warm")
    sizes_report: dict[str, Any] = {}
    if server is None:
        from indexplug_chroma import sizes

        backend._store.close()  # let Chroma write its HNSW files before the folder is measured
        measured = backend._store.disk_bytes("bench-warm")
        dim = backend.embedder().dim
        projected = sizes.EMPTY_FOLDER_BYTES + sizes.projected_bytes(passages, dim)
        sizes_report = {
            "disk_bytes": measured,
            "projected_bytes": projected,
            "disk_bytes_per_passage": round(measured / len(passages)) if measured else None,
            "projected_bytes_per_passage": round(projected / len(passages)),
        }
    for name in ("bench-cold", "bench-warm"):
        guard.call_extra("drop", name)
    guard.close()
    if server is not None:
        server.close()
    report = {
        "dataset": ds.name,
        "embedder": args.embedder,
        "mode": args.mode,
        "passages": len(passages),
        "mean_chars": round(chars / len(passages)),
        "model_load_s": round(load_s, 1),
        "cold_s": round(cold_s, 1),
        "cold_passages_per_s": round(len(passages) / cold_s, 1),
        "warm_s": round(warm_s, 1),
        "warm_passages_per_s": round(len(passages) / warm_s, 1),
        **sizes_report,
        "cpu_count": os.cpu_count(),
        "load_average_1m_before": round(load_before, 1),
        "load_average_1m_after": round(os.getloadavg()[0], 1),
    }
    tmp.cleanup()
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for key, value in report.items():
            print(f"{key:>22}: {value}")
    return report


if __name__ == "__main__":
    main(sys.argv[1:])
