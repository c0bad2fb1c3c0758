"""What rebuilding a search's hits costs, one by one against in one pass.

``python core/bench/hit_building.py ../shared/data/beir/scifact [--top-k 100]``

Elasticsearch and Chroma store a passage as an id, a text and one provenance string
(:func:`indexplug.passages.provenance_json`); every search turns ``top_k`` of those into
:class:`~indexplug.outcomes.Hit` objects.  This measures that step alone, without a server:
answers of ``top_k`` SciFact passages (random ones, seeded) are serialised as JSON once, and
each timed try parses one (so every string is fresh, as from a client) and then rebuilds its
hits either way, ways alternating try by try:

* **one-by-one**: ``Hit.from_stored(passage=passage_from_provenance(...))`` per row (how both
  plugins did it until 4 December 2026);
* **one-pass**: :func:`indexplug.outcomes.hits_from_provenance` (since the night of 4
  December 2026 it hands out again the passages it rebuilt for earlier answers: after the
  first tries most hits here take that way, so this measures the search path as it is, not
  the rebuilding alone; since late on 4 December 2026 it also checks the hits as it builds
  them, the check the guard no longer repeats for them, which one-by-one leaves to the guard);
* **ids**: only the ids out of the parsed answer (what a raw client's caller does), the floor.

Before each try it writes over a buffer of ``--evict-mb`` (default 8 MiB), so the try starts
with the CPU's private caches holding none of the objects it touches, as after a server's
answer.  It prints the median milliseconds per try and per hit over the floor.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from indexplug.evaluation import load_beir
from indexplug.outcomes import Hit, hits_from_provenance
from indexplug.passages import Passage, passage_from_provenance, provenance_json

Rows = list[tuple[str, float, str, str]]


def _rows(answer: bytes) -> Rows:
    return [(h["id"], h["score"], h["text"], h["prov"]) for h in json.loads(answer)]


def one_by_one(answer: bytes) -> Any:
    return [
        Hit.from_stored(
            rank=n, score=s, score_scale="bm25", passage=passage_from_provenance(pid, t, prov)
        )
        for n, (pid, s, t, prov) in enumerate(_rows(answer), start=1)
    ]


def one_pass(answer: bytes) -> Any:
    return hits_from_provenance(_rows(answer), "bm25")


def ids(answer: bytes) -> Any:
    return [h["id"] for h in json.loads(answer)]


WAYS: dict[str, Callable[[bytes], Any]] = {
    "ids": ids,
    "one-by-one": one_by_one,
    "one-pass": one_pass,
}


def main(argv: list[str] | None = None) -> dict[str, float]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dataset", type=Path)
    ap.add_argument("--top-k", type=int, default=100)
    ap.add_argument("--answers", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=8)
    ap.add_argument("--evict-mb", type=int, default=8)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)

    ds = load_beir(args.dataset)
    passages = [Passage.create(text, f"beir://{ds.name}/{did}") for did, text in ds.corpus]
    rng = random.Random(args.seed)
    answers = []
    for _ in range(args.answers):
        picked = rng.sample(passages, args.top_k)
        answers.append(
            json.dumps(
                [
                    {"id": p.id, "score": 20.0 - i / 10, "text": p.text, "prov": provenance_json(p)}
                    for i, p in enumerate(picked)
                ]
            ).encode()
        )
    buffer = bytearray(args.evict_mb << 20)
    zeros = bytes(len(buffer[::64]))
    times: dict[str, list[float]] = {w: [] for w in WAYS}
    order = list(WAYS)
    for rep in range(args.repeats + 1):  # the first pass fills the provenance cache, untimed
        for i, answer in enumerate(answers):
            for way in order if i % 2 == 0 else order[::-1]:
                buffer[::64] = zeros
                t = time.perf_counter()
                WAYS[way](answer)
                took = (time.perf_counter() - t) * 1000
                if rep:
                    times[way].append(took)
    medians = {w: statistics.median(v) for w, v in times.items()}
    floor = medians["ids"]
    print(
        f"{len(passages)} passages, {args.answers} answers of {args.top_k}, {args.repeats} repeats"
    )
    for way, ms in medians.items():
        per_hit = (ms - floor) * 1000 / args.top_k
        print(f"{way:11s} {ms:7.3f} ms a try, {per_hit:6.2f} us a hit over the ids")
    return medians


if __name__ == "__main__":
    main()
