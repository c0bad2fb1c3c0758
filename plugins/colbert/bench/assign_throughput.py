"""How fast the native engine can code token vectors, and what that means at a given corpus size.

``python plugins/colbert/bench/assign_throughput.py [--dim 256] [--tokens-per-passage 120]``

Coding a segment assigns every token vector to its nearest centroid (``candidates.assign``: a
product with the whole codebook, then an argmax), and the codebook grows with the index (``K``
is about ``centroids_per_sqrt * sqrt(tokens)``, a power of two).  So the cost of one coding
pass grows faster than the corpus: this script times ``assign`` on random unit vectors with the
codebook the engine's defaults give for 10k, 100k and 1M passages, and prints the tokens coded
per second and the hours one pass over that corpus takes on this machine.  Merges and retrained
codebooks code tokens again, so an index's build is several such passes.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from indexplug_colbert.candidates import assign, codebook_size
from indexplug_colbert.manifest import CodebookSettings


def main(argv: list[str] | None = None) -> list[dict[str, float]]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dim", type=int, default=256, help="token vector size (hashing:default)")
    ap.add_argument(
        "--tokens-per-passage",
        type=float,
        default=120.0,
        help="the synthetic scale corpus averages about 120 words a passage",
    )
    ap.add_argument("--sample", type=int, default=65_536, help="token vectors timed per size")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.sample, args.dim)).astype(np.float32)
    out = []
    for passages in (10_000, 100_000, 1_000_000):
        tokens = int(passages * args.tokens_per_passage)
        k = codebook_size(tokens, CodebookSettings.per_sqrt)
        c = rng.standard_normal((k, args.dim)).astype(np.float32)
        c /= np.linalg.norm(c, axis=1, keepdims=True)
        assign(x[:1024], c)  # warm up the BLAS threads
        t = time.perf_counter()
        assign(x, c)
        rate = args.sample / (time.perf_counter() - t)
        out.append(
            {
                "passages": passages,
                "tokens": tokens,
                "k": k,
                "tokens_per_s": round(rate),
                "hours_per_pass": round(tokens / rate / 3600, 2),
            }
        )
        print(json.dumps(out[-1]))
    return out


if __name__ == "__main__":
    main()
