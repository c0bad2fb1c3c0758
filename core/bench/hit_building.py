"""What a search's hits cost: built by a backend, then checked and copied by the guard.

``python core/bench/hit_building.py ../shared/data/beir/scifact [--top-k 100]``

Elasticsearch and Chroma store a passage as an id, a text and one provenance string
(:func:`indexplug.passages.provenance_json`); every search turns ``top_k`` of those into
:class:`~indexplug.outcomes.Hit` objects (:func:`indexplug.outcomes.hits_from_provenance`), and
the guard then checks every hit (ranks, scores, scale, each passage's id and digest) and hands
the caller copies it builds.  This measures those steps alone, without a server: answers of
``top_k`` SciFact passages (random ones, seeded) are serialised as JSON once, and each timed
try parses one (so every string is fresh, as from a client) and then goes one of these ways,
ways alternating try by try:

* **ids**: only the ids out of the parsed answer (what a raw client's caller does), the floor;
* **built**: ``hits_from_provenance`` (what the backend does);
* **checked**: built, then checked and copied as the guard does for every answer
  (``Guard._checked_hits``), with the guard's memory of checked passages
  (:data:`indexplug.guard.CHECKED_PASSAGES`) on: after the untimed first pass every passage
  here is in it, so a hit's passage is compared field by field with the remembered copy
  instead of hashed again;
* **checked, no memory**: the same with a guard that remembers nothing, so every passage is
  hashed (its id and its digest) and copied on every try: what the memory saves.

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
from indexplug.guard import Guard
from indexplug.outcomes import ScoreScale, hits_from_provenance
from indexplug.passages import Passage, provenance_json

Rows = list[tuple[str, float, str, str]]
SCALE = ScoreScale(name="bm25", higher_is_better=True)


class Forgetful(dict[str, Passage]):
    """A guard memory that keeps nothing (the guard finds no passage in it, ever)."""

    def __setitem__(self, key: str, value: Passage) -> None:
        pass


class _Backend:
    """Just enough of a backend for a :class:`Guard` whose checks are called directly."""

    name = "bench"
    score_scale = SCALE


def _rows(answer: bytes) -> Rows:
    return [(h["id"], h["score"], h["text"], h["prov"]) for h in json.loads(answer)]


def ids(answer: bytes) -> Any:
    return [h["id"] for h in json.loads(answer)]


def built(answer: bytes) -> Any:
    return hits_from_provenance(_rows(answer), SCALE.name)


def checked_by(guard: Guard) -> Callable[[bytes], Any]:
    def checked(answer: bytes) -> Any:
        return guard._checked_hits("bench", built(answer), SCALE)

    return checked


def main(argv: list[str] | None = None) -> dict[str, float]:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
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
    remembering = Guard(_Backend(), plugin="bench")  # type: ignore[arg-type]
    forgetting = Guard(_Backend(), plugin="bench")  # type: ignore[arg-type]
    forgetting._checked = Forgetful()
    ways: dict[str, Callable[[bytes], Any]] = {
        "ids": ids,
        "built": built,
        "checked": checked_by(remembering),
        "checked, no memory": checked_by(forgetting),
    }
    buffer = bytearray(args.evict_mb << 20)
    zeros = bytes(len(buffer[::64]))
    times: dict[str, list[float]] = {w: [] for w in ways}
    order = list(ways)
    for rep in range(args.repeats + 1):  # the first pass fills the guard's memory, untimed
        for i, answer in enumerate(answers):
            for way in order if i % 2 == 0 else order[::-1]:
                buffer[::64] = zeros
                t = time.perf_counter()
                ways[way](answer)
                took = (time.perf_counter() - t) * 1000
                if rep:
                    times[way].append(took)
    assert len(forgetting._checked) == 0 and len(remembering._checked) > 0
    medians = {w: statistics.median(v) for w, v in times.items()}
    floor = medians["ids"]
    print(
        f"{len(passages)} passages, {args.answers} answers of {args.top_k}, {args.repeats} repeats"
    )
    for way, ms in medians.items():
        per_hit = (ms - floor) * 1000 / args.top_k
        print(f"{way:18s} {ms:7.3f} ms a try, {per_hit:6.2f} us a hit over the ids")
    return medians


if __name__ == "__main__":
    main()
