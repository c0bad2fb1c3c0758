"""Deterministic synthetic corpora for scale runs: no download, same text from the same seed.

Words follow a Zipf distribution over a generated vocabulary (as natural text does: a few words
are very common, most are rare), passage lengths vary around ~120 words, and queries draw 3-8
words from the middle of the frequency range, where real query terms live.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from numpy.typing import NDArray

VOCAB = 60_000
SYLLABLES = [c + v for c in "bcdfghjklmnprstvwz" for v in "aeiou"] + ["th", "ch", "sh", "qu"]


def vocabulary(seed: int = 7, size: int = VOCAB) -> list[str]:
    rng = np.random.default_rng(seed)
    words: dict[str, None] = {}
    while len(words) < size:
        n = int(rng.integers(1, 5))
        w = "".join(SYLLABLES[i] for i in rng.integers(0, len(SYLLABLES), n))
        words.setdefault(w, None)
    return list(words)


def _zipf_p(size: int, s: float = 1.07) -> NDArray[np.float64]:
    ranks = np.arange(1, size + 1, dtype=np.float64)
    p: NDArray[np.float64] = ranks**-s
    out: NDArray[np.float64] = p / p.sum()
    return out


def passages(n: int, seed: int = 7, batch: int = 10_000) -> Iterator[list[tuple[str, str]]]:
    """Batches of ``(doc_id, text)``; memory stays bounded whatever ``n`` is."""
    vocab = np.array(vocabulary(seed))
    p = _zipf_p(len(vocab))
    rng = np.random.default_rng(seed + 1)
    done = 0
    while done < n:
        m = min(batch, n - done)
        lengths = np.clip(rng.normal(120, 35, m).astype(int), 20, 300)
        words = vocab[rng.choice(len(vocab), size=int(lengths.sum()), p=p)]
        out = []
        pos = 0
        for i, ln in enumerate(lengths):
            out.append((f"s{done + i}", " ".join(words[pos : pos + ln])))
            pos += ln
        done += m
        yield out


def queries(count: int = 200, seed: int = 7) -> list[str]:
    vocab = vocabulary(seed)
    rng = np.random.default_rng(seed + 2)
    return [
        " ".join(vocab[int(i)] for i in rng.integers(100, 20_000, int(rng.integers(3, 9))))
        for _ in range(count)
    ]
