"""How long each add takes while a native index grows (where merges and codebook training land).

``python plugins/colbert/bench/add_timings.py 36000 [--batch 2000] [--embedder hashing:default]``

Indexes that many passages of the harness's synthetic corpus (``indexplug_bench.synthetic``,
deterministic) into a fresh native index in a temporary home, one add of ``--batch`` passages at
a time through the backend (no guard, no deadline worth the name), and prints the seconds of
every add and the passages per second overall.  The adds that merge segments or train a
codebook stand out; comparing two builds of the engine on the same corpus shows what a change to
the write path does.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from indexplug import Passage, Registry
from indexplug.deadlines import Deadline
from indexplug_bench import synthetic


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("passages", type=int)
    ap.add_argument("--batch", type=int, default=2000)
    ap.add_argument("--embedder", default="hashing:default")
    args = ap.parse_args(argv)
    home = Path(tempfile.mkdtemp(prefix="colbert-adds-"))
    try:
        guard = Registry().backend(
            "colbert", {"engine": "native", "embedder": args.embedder}, home=home
        )
        backend: Any = guard.backend
        adds: list[float] = []
        started = time.perf_counter()
        for part in synthetic.passages(args.passages):
            passages = [Passage.create(text, f"synthetic://{d}") for d, text in part]
            for i in range(0, len(passages), args.batch):
                t = time.perf_counter()
                batch = passages[i : i + args.batch]
                out = backend.add("adds", batch, max_bytes=None, deadline=Deadline.after(1e6))
                if out.code != "INDEXED":
                    raise SystemExit(f"add failed: {out}")
                adds.append(round(time.perf_counter() - t, 2))
        total = time.perf_counter() - started
        status: Any = guard.status("adds")
        report = {
            "passages": args.passages,
            "batch": args.batch,
            "passages_per_s": round(args.passages / total),
            "add_seconds": adds,
            "segments": status.details.get("segments"),
            "codebooks": status.details.get("codebooks"),
        }
        print(json.dumps(report))
        guard.close()
        return report
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
