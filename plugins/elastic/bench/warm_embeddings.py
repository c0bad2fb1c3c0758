"""Fill indexplug's shared embedding cache with a BEIR corpus's vectors, with no deadline.

Why: ``indexplug eval`` adds 1,000 passages per call under a 300 s deadline, and embedding them
includes the model's full cost (all-MiniLM-L6-v2 on a busy two-core machine manages a few
passages per second).  The vectors depend only on the embedder and the passage (its id is a
content address), so computing them once beforehand and letting the eval reuse them from the
cache changes no figure but the indexing time.

    python plugins/elastic/bench/warm_embeddings.py ../shared/data/beir/scifact \
        sentence-transformers:all-MiniLM-L6-v2
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from indexplug.embedcache import cache_for, embed_passages
from indexplug.evaluation import corpus_passages, load_beir
from indexplug.plugins import get_registry
from indexplug.protocols import Granularity

BATCH = 256


def main(dataset: str, spec: str) -> int:
    passages = list(corpus_passages(load_beir(Path(dataset))))
    embedder = get_registry().embedder(spec)
    cache = cache_for(embedder)
    started = time.perf_counter()
    for i in range(0, len(passages), BATCH):
        embed_passages(embedder, passages[i : i + BATCH], Granularity.TEXT, cache=cache)
        done = min(i + BATCH, len(passages))
        print(f"{done}/{len(passages)} in {time.perf_counter() - started:.0f}s", flush=True)
    print(f"cache {cache.path}: {cache.count()} vectors")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(f"usage: {sys.argv[0]} DATASET_DIR PROVIDER:MODEL")
    sys.exit(main(sys.argv[1], sys.argv[2]))
