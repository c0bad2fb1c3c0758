"""``indexplug eval``: index a BEIR dataset into a fresh index and measure it.

Quality measures are computed by ir-measures (never by hand): nDCG@10, Recall@100 and MRR@10
(``RR@10``).  Speed is measured around the public, guarded API, so the figures include every
cost a user pays: query latency percentiles over every judged query, and indexing throughput in
passages per second.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from indexplug.errors import IndexplugError
from indexplug.guard import Guard
from indexplug.outcomes import IndexEmpty, NoMatch, Searched
from indexplug.passages import Passage

URI_PREFIX = "beir://"


@dataclass(frozen=True)
class Dataset:
    name: str
    corpus: list[tuple[str, str]]
    """(doc id, text) with the title and body joined by a blank line."""
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]


def load_beir(path: Path, split: str = "test") -> Dataset:
    """Read ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/SPLIT.tsv``; keep judged queries."""
    path = Path(path)
    for need in ("corpus.jsonl", "queries.jsonl", f"qrels/{split}.tsv"):
        if not (path / need).is_file():
            raise FileNotFoundError(f"{path} is not a BEIR dataset: {need} is missing")
    qrels: dict[str, dict[str, int]] = {}
    with open(path / "qrels" / f"{split}.tsv", encoding="utf-8") as fh:
        for n, line in enumerate(fh):
            parts = line.rstrip("\n").split("\t")
            if n == 0 and not parts[-1].lstrip("-").isdigit():
                continue  # header
            qid, did, score = parts[0], parts[1], int(parts[2])
            qrels.setdefault(qid, {})[did] = score
    queries: dict[str, str] = {}
    with open(path / "queries.jsonl", encoding="utf-8") as fh:
        for line in fh:
            q = json.loads(line)
            if str(q["_id"]) in qrels:
                queries[str(q["_id"])] = q["text"]
    corpus: list[tuple[str, str]] = []
    with open(path / "corpus.jsonl", encoding="utf-8") as fh:
        for line in fh:
            d = json.loads(line)
            title = (d.get("title") or "").strip()
            body = (d.get("text") or "").strip()
            text = f"{title}\n\n{body}" if title else body
            if text.strip():
                corpus.append((str(d["_id"]), text))
    return Dataset(path.name, corpus, queries, qrels)


def corpus_passages(ds: Dataset) -> Iterator[Passage]:
    """One passage per document; the document id travels in the source uri."""
    for did, text in ds.corpus:
        yield Passage.create(text, f"{URI_PREFIX}{ds.name}/{did}")


def doc_id(p: Passage) -> str:
    return p.source.uri.rsplit("/", 1)[-1]


class Percentiles(BaseModel):
    p50: float
    p95: float
    p99: float
    mean: float


class EvalReport(BaseModel):
    dataset: str
    backend: str
    options: dict[str, Any]
    passages: int
    queries: int
    ndcg_at_10: float
    recall_at_100: float
    mrr_at_10: float
    index_seconds: float
    passages_per_second: float
    latency_ms: Percentiles
    outcomes: dict[str, int]
    """How many queries ended in each outcome code (anything but SEARCHED/NO_MATCH is a
    failure the figures above do not hide)."""


def percentiles(samples: list[float]) -> Percentiles:
    s = sorted(samples)

    def at(q: float) -> float:
        if not s:
            return 0.0
        k = min(len(s) - 1, max(0, round(q * (len(s) - 1))))
        return round(s[k], 3)

    return Percentiles(
        p50=at(0.5), p95=at(0.95), p99=at(0.99), mean=round(statistics.fmean(s), 3) if s else 0.0
    )


def run_eval(
    guard: Guard,
    ds: Dataset,
    index: str,
    *,
    backend: str,
    options: dict[str, Any] | None = None,
    batch: int = 1000,
    top_k: int = 100,
    deadline_s: float = 60.0,
    progress: Callable[[int, int], None] | None = None,
    searcher: Callable[..., Any] | None = None,
) -> EvalReport:
    """Index ``ds`` into ``index`` (which should be fresh) and run every judged query."""
    import ir_measures
    from ir_measures import RR, R, nDCG

    passages = list(corpus_passages(ds))
    t0 = time.perf_counter()
    for i in range(0, len(passages), batch):
        # Indexing may embed with a model on a small CPU: give each batch an hour, not the
        # per-query deadline, and report a refusal as one sentence (never a traceback).
        added = guard.add(index, passages[i : i + batch], deadline_s=max(deadline_s, 3600.0))
        if added.code != "INDEXED":
            raise IndexplugError(f"indexing failed: {added.message}")
        if progress:
            progress(min(i + batch, len(passages)), len(passages))
    index_s = time.perf_counter() - t0
    run: dict[str, dict[str, float]] = {}
    latencies: list[float] = []
    codes: dict[str, int] = {}
    for qid, text in ds.queries.items():
        t = time.perf_counter()
        out: Any
        if searcher is not None:
            out = searcher(text, top_k=top_k, deadline_s=deadline_s)
        else:
            out = guard.search(index, text, top_k=top_k, deadline_s=deadline_s)
        latencies.append((time.perf_counter() - t) * 1000)
        codes[out.code] = codes.get(out.code, 0) + 1
        scores: dict[str, float] = {}
        if isinstance(out, Searched):
            n = len(out.hits)
            for hit in out.hits:
                did = doc_id(hit.passage)
                # rank-based score: ir-measures sorts by score, and ties must keep our order
                scores.setdefault(did, float(n - hit.rank + 1))
        elif not isinstance(out, NoMatch | IndexEmpty):
            pass  # counted in codes; the query scores zero
        run[qid] = scores
    qrels = [ir_measures.Qrel(q, d, rel) for q, docs in ds.qrels.items() for d, rel in docs.items()]
    flat = [ir_measures.ScoredDoc(q, d, s) for q, docs in run.items() for d, s in docs.items()]
    agg = ir_measures.calc_aggregate([nDCG @ 10, R @ 100, RR @ 10], qrels, flat)
    return EvalReport(
        dataset=ds.name,
        backend=backend,
        options=dict(options or {}),
        passages=len(passages),
        queries=len(ds.queries),
        ndcg_at_10=round(float(agg[nDCG @ 10]), 4),
        recall_at_100=round(float(agg[R @ 100]), 4),
        mrr_at_10=round(float(agg[RR @ 10]), 4),
        index_seconds=round(index_s, 3),
        passages_per_second=round(len(passages) / index_s, 1) if index_s > 0 else 0.0,
        latency_ms=percentiles(latencies),
        outcomes=codes,
    )
