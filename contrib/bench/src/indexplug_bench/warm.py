"""Filling a shared embedding cache before the dense systems run (``run --embed-cache DIR``).

Embedding SciFact with all-MiniLM-L6-v2 takes about ten minutes of this project's two-core
machine, and every dense system (indexplug chroma, elastic kNN and hybrid, raw chromadb) would
pay it again in each of its processes, for the same vectors: a vector depends only on the model
and the passage.  With ``--embed-cache``, the vectors are computed once here, timed (that is the
model's cold indexing rate, reported as its own row), and every dense system then reads them from
the cache through :mod:`indexplug.embedcache`, so its indexing figure is the store's own work.
Query embedding is never cached: search latency always includes embedding the query.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

BATCH = 256


def bench_passages(docs: list[tuple[str, str]]) -> list[Any]:
    """The passages every runner makes of ``(doc_id, text)`` (so their ids, the cache keys,
    are the same in every system)."""
    from indexplug import Passage

    return [Passage.create(text, f"bench://{did}") for did, text in docs]


def warm(dataset: Path, spec: str, cache_dir: Path, *, tokens: bool = False) -> dict[str, Any]:
    """Embed every passage of ``dataset`` not yet in the cache; how long the model took.

    ``tokens``: per-token vectors, in the float16 cache the colbert engine keeps them in,
    instead of text vectors (float32, what chroma and elastic read).
    """
    from indexplug import Granularity, get_embedder
    from indexplug.embedcache import EmbeddingCache, embed_passages
    from indexplug.evaluation import load_beir

    ds = load_beir(dataset)
    passages = bench_passages(ds.corpus)
    embedder = get_embedder(spec)
    granularity = Granularity.TOKEN if tokens else Granularity.TEXT
    cache = EmbeddingCache(
        embedder.name,
        int(embedder.dim),
        root=cache_dir,
        dtype="float16" if tokens else "float32",
    )
    before = cache.count()
    started = time.perf_counter()
    for i in range(0, len(passages), BATCH):
        embed_passages(embedder, passages[i : i + BATCH], granularity, cache=cache)
    took = time.perf_counter() - started
    computed = cache.count() - before
    return {
        "embedder": spec + (" (token vectors)" if tokens else ""),
        "dataset": ds.name,
        "passages": len(passages),
        "computed": computed,
        "seconds": round(took, 1),
        "passages_per_s": round(computed / took, 1) if computed else None,
    }
