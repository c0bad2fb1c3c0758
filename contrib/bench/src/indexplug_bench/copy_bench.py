"""How fast ``indexplug copy`` moves an index between backends, in passages per second.

SciFact's corpus (title and text of each document, one passage each) is added to a source
index (untimed), then copied with :func:`indexplug.transfer.copy` into a fresh target index.
Two figures: the copy itself (scan pages read, re-embedded where the target is dense, written:
start to the last passage stored) and the whole call (with its verification: counts, every id,
and sample queries where the scales agree).  ``--measure add`` instead times the target's own
``add`` of the same passages (what re-ingesting would cost the target), for scale: in a process
and an indexplug home of its own, so that neither run finds vectors the other embedded in the
embedding cache.  Run with an interpreter that has both backends (the tox env ``chroma`` has
sqlite-fts5, chroma and the MiniLM model)::

    python contrib/bench/src/indexplug_bench/copy_bench.py --dst chroma \\
        --dst-option embedder=hashing:default [--measure add]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

SCIFACT = Path("/work/shared/data/beir/scifact/corpus.jsonl")


def passages(path: Path, limit: int | None) -> list[Any]:
    from indexplug.passages import Passage

    out = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            doc = json.loads(line)
            text = f"{doc.get('title', '')}\n\n{doc['text']}".strip()
            if not text:
                continue
            out.append(
                Passage.create(text, f"scifact://{doc['_id']}", metadata={"doc": doc["_id"]})
            )
            if limit is not None and len(out) >= limit:
                break
    return out


def options(pairs: list[str]) -> dict[str, Any]:
    from indexplug.cli.resolve import parse_options

    return parse_options(pairs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=SCIFACT)
    ap.add_argument("--src", default="sqlite-fts5")
    ap.add_argument("--src-option", action="append", default=[])
    ap.add_argument("--dst", default="chroma")
    ap.add_argument("--dst-option", action="append", default=[])
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--measure", choices=["copy", "add"], default="copy")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as home:
        os.environ["INDEXPLUG_HOME"] = home
        os.environ.pop("INDEXPLUG_EMBED_CACHE", None)
        from indexplug.plugins import get_registry
        from indexplug.transfer import Copied, copy

        reg = get_registry()
        src = reg.backend(args.src, options(args.src_option))
        dst = reg.backend(args.dst, options(args.dst_option))
        batch = passages(args.corpus, args.limit)
        if args.measure == "add":
            t1 = time.perf_counter()
            added = dst.add("scifact", batch)
            add_s = time.perf_counter() - t1
            if added.code != "INDEXED":
                raise SystemExit(f"the target's add failed: {added.message}")
            report(
                {
                    "target": f"{args.dst} {args.dst_option}",
                    "passages": len(batch),
                    "target_add_s": round(add_s, 2),
                    "target_add_passages_per_s": round(len(batch) / add_s, 1),
                }
            )
            return
        loaded = src.add("scifact", batch)
        if loaded.code != "INDEXED":
            raise SystemExit(f"loading the source failed: {loaded.message}")
        written_at: list[float] = []
        t0 = time.perf_counter()
        out = copy(
            src,
            "scifact",
            dst,
            "scifact",
            progress=lambda done, total: written_at.append(time.perf_counter()),
        )
        total_s = time.perf_counter() - t0
        if not isinstance(out, Copied):
            raise SystemExit(f"the copy failed: {out.message}")
        copy_s = written_at[-1] - t0
        result: dict[str, Any] = {
            "source": f"{args.src} {args.src_option}",
            "target": f"{args.dst} {args.dst_option}",
            "passages": out.read,
            "code": out.code,
            "copy_s": round(copy_s, 2),
            "copy_passages_per_s": round(out.read / copy_s, 1),
            "with_verification_s": round(total_s, 2),
            "with_verification_passages_per_s": round(out.read / total_s, 1),
            "verification": out.verification.model_dump(exclude={"queries", "missing_sample"}),
            "sample_queries_agree": [q.agree for q in out.verification.queries],
        }
        src.close()
        dst.close()
    report(result)


def report(result: dict[str, Any]) -> None:
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    result.update(
        {
            "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
            "load_1_5_15": load,
            "python": platform.python_version(),
        }
    )
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
