"""Each embedding path side by side: passages per second and nDCG@10 on SciFact.

Usage (offline; SciFact is read where it lies, never copied)::

    HF_HUB_OFFLINE=1 python plugins/sentence-transformers/bench/embed_paths.py \\
        --paths fp32,bf16,int8 --sample 256 --quality

* **Speed**: the same fixed sample (every Nth SciFact passage, title and body as the eval
  harness joins them) embedded as text vectors by each path, after a warm-up batch; passages
  per second.  ``--batch-sizes`` and ``--threads`` sweep those settings for every path.
* **Quality** (``--quality``): the whole corpus embedded once per path through the embedder's
  own document encoder (token embeddings); text vectors are their mean (the model's Pooling is
  checked to be mean pooling) made unit length, token vectors each made unit length, exactly as
  the embedder returns them.  Queries are embedded by the same path (as an index built with it
  would embed them).  nDCG@10 of the test queries by ir-measures: text vectors by exhaustive
  cosine, token vectors by exhaustive MaxSim.  Per-path vectors are cached in ``--work`` so a
  rerun repeats only what changed.

The header gives the processor model, its relevant flags, torch's CPU capability, the
environment variables that restrict instruction sets, and the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

SCIFACT = Path("/work/shared/data/beir/scifact")
FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16", "amx_int8")


def processor() -> dict[str, Any]:
    import torch
    from indexplug_sentence_transformers.paths import cpu_flags

    model = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "model": model,
        "cores": os.cpu_count(),
        "flags": [f for f in FLAGS if f in cpu_flags()],
        "torch_capability": torch.backends.cpu.get_cpu_capability(),
        "torch_threads": torch.get_num_threads(),
        "env": {
            k: os.environ[k]
            for k in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "OMP_NUM_THREADS")
            if k in os.environ
        },
    }


def load_scifact() -> tuple[list[str], list[str], dict[str, str], dict[str, dict[str, int]]]:
    ids, texts = [], []
    with open(SCIFACT / "corpus.jsonl", encoding="utf-8") as fh:
        for line in fh:
            d = json.loads(line)
            title, body = (d.get("title") or "").strip(), (d.get("text") or "").strip()
            ids.append(str(d["_id"]))
            texts.append(f"{title}\n\n{body}" if title else body)
    qrels: dict[str, dict[str, int]] = {}
    with open(SCIFACT / "qrels" / "test.tsv", encoding="utf-8") as fh:
        next(fh)
        for line in fh:
            q, d, s = line.rstrip("\n").split("\t")
            qrels.setdefault(q, {})[d] = int(s)
    queries = {}
    with open(SCIFACT / "queries.jsonl", encoding="utf-8") as fh:
        for line in fh:
            d = json.loads(line)
            if str(d["_id"]) in qrels:
                queries[str(d["_id"])] = d["text"]
    return ids, texts, queries, qrels


def embedder(path: str, batch: int) -> Any:
    from indexplug_sentence_transformers import SentenceTransformerEmbedder

    emb = SentenceTransformerEmbedder(
        "all-MiniLM-L6-v2", device="cpu", path=path, batch_size=batch, progress_min=10**9
    )
    emb.load()
    return emb


def speed(emb: Any, sample: list[str]) -> float:
    from indexplug.protocols import Granularity

    emb.embed_documents(sample[:16], Granularity.TEXT)  # warm-up
    t = time.perf_counter()
    emb.embed_documents(sample, Granularity.TEXT)
    return len(sample) / (time.perf_counter() - t)


def corpus_vectors(emb: Any, texts: list[str], work: Path, path: str) -> tuple[Any, Any, Any]:
    """(text vectors, token vectors stacked, offsets) for the whole corpus, cached."""
    from indexplug.protocols import Granularity

    cached = work / f"corpus-{path}.npz"
    if cached.is_file():
        z = np.load(cached)
        return z["text"], z["tokens"], z["offsets"]
    pooling = emb._load()[1]
    assert getattr(pooling, "pooling_mode", "mean") == "mean", "the model must mean-pool"
    text_vecs, token_chunks, offsets = [], [], [0]
    step = 256
    for i in range(0, len(texts), step):
        raw = emb._encode(texts[i : i + step], Granularity.TOKEN, query=False)
        for t in raw:
            arr = t.detach().float().cpu().numpy()
            mean = arr.mean(axis=0)
            text_vecs.append(mean / max(np.linalg.norm(mean), 1e-12))
            unit = arr / np.maximum(np.linalg.norm(arr, axis=1, keepdims=True), 1e-12)
            token_chunks.append(unit.astype(np.float16))
            offsets.append(offsets[-1] + len(arr))
        print(f"  {path}: {min(i + step, len(texts))}/{len(texts)}", file=sys.stderr, flush=True)
    text = np.stack(text_vecs).astype(np.float32)
    tokens = np.concatenate(token_chunks)
    off = np.asarray(offsets, dtype=np.int64)
    np.savez(cached, text=text, tokens=tokens, offsets=off)
    return text, tokens, off


def ndcg10(run: dict[str, dict[str, float]], qrels: dict[str, dict[str, int]]) -> float:
    import ir_measures
    from ir_measures import nDCG

    return float(ir_measures.calc_aggregate([nDCG @ 10], qrels, run)[nDCG @ 10])


def quality(emb: Any, path: str, data: tuple[Any, ...], work: Path) -> tuple[float, float]:
    from indexplug.protocols import Granularity

    ids, texts, queries, qrels = data
    text, tokens, off = corpus_vectors(emb, texts, work, path)
    qids = list(queries)
    run_text: dict[str, dict[str, float]] = {}
    for qid in qids:
        s = text @ emb.embed_query(queries[qid], Granularity.TEXT)
        top = np.argsort(-s)[:10]
        run_text[qid] = {ids[i]: float(s[i]) for i in top}
    # MaxSim: every query's token rows against document-aligned blocks of token rows, the
    # maximum per (query token, document) by reduceat, then summed per query.
    qtok = [emb.embed_query(queries[q], Granularity.TOKEN).astype(np.float32) for q in qids]
    qrows = np.concatenate(qtok)
    qoff = np.cumsum([0] + [len(t) for t in qtok])
    best = np.empty((len(qrows), len(ids)), dtype=np.float32)
    d0 = 0
    while d0 < len(ids):
        d1 = int(np.searchsorted(off, off[d0] + 200_000, side="right")) - 1
        d1 = min(max(d1, d0 + 1), len(ids))
        block = tokens[off[d0] : off[d1]].astype(np.float32)
        sims = qrows @ block.T
        best[:, d0:d1] = np.maximum.reduceat(sims, off[d0:d1] - off[d0], axis=1)
        d0 = d1
    run_tok: dict[str, dict[str, float]] = {}
    for j, qid in enumerate(qids):
        s2 = best[qoff[j] : qoff[j + 1]].sum(axis=0)
        top = np.argsort(-s2)[:10]
        run_tok[qid] = {ids[i]: float(s2[i]) for i in top}
    return ndcg10(run_text, qrels), ndcg10(run_tok, qrels)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--paths", default="fp32,bf16,int8")
    ap.add_argument("--sample", type=int, default=256, help="passages in the speed sample")
    ap.add_argument("--batch-sizes", default="64", help="comma-separated batch sizes to sweep")
    ap.add_argument("--threads", default="", help="comma-separated torch/ORT thread counts")
    ap.add_argument("--quality", action="store_true", help="nDCG@10 on the full corpus")
    ap.add_argument("--work", default="/tmp/indexplug-embed-paths", help="vector cache folder")
    args = ap.parse_args()
    import torch

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    data = load_scifact()
    texts = data[1]
    step = max(1, len(texts) // args.sample)
    sample = texts[::step][: args.sample]
    print(json.dumps({"processor": processor(), "load_before": os.getloadavg()}))
    print(f"speed sample: {len(sample)} SciFact passages (every {step}th); MiniLM-L6-v2")
    print("| path | batch | threads | passages/s | nDCG@10 text | nDCG@10 tokens |")
    print("|---|---|---|---|---|---|")
    threads = [int(t) for t in args.threads.split(",") if t] or [torch.get_num_threads()]
    for path in args.paths.split(","):
        for n in threads:
            torch.set_num_threads(n)
            for batch in (int(b) for b in args.batch_sizes.split(",")):
                emb = embedder(path, batch)
                pps = speed(emb, sample)
                q = ("", "")
                first = n == threads[0] and batch == int(args.batch_sizes.split(",")[0])
                if args.quality and first:
                    t, k = quality(emb, path, data, work)
                    q = (f"{t:.4f}", f"{k:.4f}")
                print(f"| {path} | {batch} | {n} | {pps:.1f} | {q[0]} | {q[1]} |", flush=True)
    print(json.dumps({"load_after": os.getloadavg()}))


if __name__ == "__main__":
    main()
