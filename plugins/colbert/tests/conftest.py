"""Shared fixtures: a colbert backend over a temporary home, native engine, hashing embedder
(model-free and fast, so these tests run anywhere)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from indexplug import Guard, Passage, get_registry
from indexplug_colbert import ColbertBackend

WORDS = (
    "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho "
    "sigma tau upsilon phi chi psi omega"
).split()


def corpus(n: int, prefix: str = "doc", words: int = 12) -> list[Passage]:
    """``n`` passages of Greek-letter words plus a word of their own (``item<i>``)."""
    return [
        Passage.create(
            " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(words)) + f" item{i}",
            f"mem://{prefix}/{i}",
            metadata={"n": i},
        )
        for i in range(n)
    ]


def random_corpus(n: int, *, words: int = 20, vocab: int = 600, seed: int = 0) -> list[Passage]:
    """``n`` passages of random made-up words (few ties, unlike :func:`corpus`)."""
    import random

    rng = random.Random(seed)
    lexicon = [
        "".join(rng.choice("bcdfghklmnprstvz") + rng.choice("aeiou") for _ in range(3))
        for _ in range(vocab)
    ]
    return [
        Passage.create(" ".join(rng.choice(lexicon) for _ in range(words)), f"mem://rand/{i}")
        for i in range(n)
    ]


@pytest.fixture(autouse=True)
def _private_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep the embedding cache (``<indexplug home>/embedcache``) inside the test's folder."""
    monkeypatch.setenv("INDEXPLUG_HOME", str(tmp_path / "indexplug-home"))


@pytest.fixture
def make(tmp_path: Path) -> Iterator[Callable[..., Guard]]:
    """``make(**options)``: a guarded colbert backend on the test's home (closed afterwards)."""
    opened: list[Guard] = []

    def factory(home: Path | None = None, **options: Any) -> Guard:
        g = Guard(ColbertBackend(home or tmp_path / "home", options, get_registry().embedder))
        opened.append(g)
        return g

    yield factory
    for g in opened:
        g.close()


@pytest.fixture
def guard(make: Callable[..., Guard]) -> Guard:
    return make()
