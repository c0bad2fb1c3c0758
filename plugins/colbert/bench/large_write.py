"""One large write through ``open_backend``, as issue 27 item 7 states it: does it finish?

``INDEXPLUG_HOME=$(mktemp -d) python -P plugins/colbert/bench/large_write.py [--passages 1000]
[--embedder sentence-transformers:all-MiniLM-L6-v2] [--corpus PATH]``

(``-P``: this folder's ``kernels.py`` must not shadow the ``kernels`` library transformers
imports.)

Reads the first ``--passages`` documents of a BEIR corpus (default: SciFact, from
``../shared/data/beir/scifact/corpus.jsonl`` relative to the repository), makes one passage of
each (title and text), and adds them all in one call to
``open_backend("colbert", {"engine": "native", "embedder": ...}).add("x", passages)`` with the
default write deadline (the guard sends them in batches of 256).  Prints the outcome, the wall
time and the passages per second, then repeats the same call, which must answer every passage
known and add nothing.  Point ``INDEXPLUG_HOME`` at an empty folder: the index and the embedding
cache live there, and a warm cache would time the cache, not the embedder.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

from indexplug import Passage, open_backend

DEFAULT_CORPUS = Path(__file__).resolve().parents[3] / "../shared/data/beir/scifact/corpus.jsonl"


def passages(path: Path, n: int) -> list[Passage]:
    out: list[Passage] = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if len(out) == n:
                break
            doc = json.loads(line)
            text = f"{doc.get('title', '')}\n{doc['text']}".strip()
            out.append(Passage.create(text, f"beir:scifact/{doc['_id']}"))
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--passages", type=int, default=1000)
    ap.add_argument("--embedder", default="sentence-transformers:all-MiniLM-L6-v2")
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--index", default="x")
    args = ap.parse_args(argv)
    batch = passages(args.corpus.resolve(), args.passages)
    guard = open_backend("colbert", {"engine": "native", "embedder": args.embedder})
    try:
        done: list[int] = []
        started = time.perf_counter()
        out = guard.add(args.index, batch, progress=lambda d, t: done.append(d))
        wall = time.perf_counter() - started
        again = guard.add(args.index, batch)
        status = guard.status(args.index)
    finally:
        guard.close()
    result = {
        "passages": len(batch),
        "embedder": args.embedder,
        "home": os.environ.get("INDEXPLUG_HOME"),
        "code": out.code,
        "message": out.message,
        "added": getattr(out, "added", None),
        "progress": done,
        "wall_s": round(wall, 2),
        "passages_per_s": round(len(batch) / wall, 2),
        "repeat_message": again.message,
        "repeat": {
            "code": again.code,
            "added": getattr(again, "added", None),
            "known": getattr(again, "known", None),
        },
        "stored": getattr(status, "passages", None),
    }
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
