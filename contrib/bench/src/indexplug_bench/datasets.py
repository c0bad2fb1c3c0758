"""The datasets a bench run reads: a BEIR folder or ``synthetic:N``, batched for indexing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from indexplug_bench import synthetic


def load(dataset: str) -> tuple[str, int, Any, list[tuple[str, str]], dict[str, dict[str, int]]]:
    """(name, size, batches factory, queries [(qid, text)], qrels)."""
    if dataset.startswith("synthetic:"):
        n = int(dataset.split(":", 1)[1])
        qs = [(f"q{i}", q) for i, q in enumerate(synthetic.queries())]
        return f"synthetic-{n}", n, lambda: synthetic.passages(n), qs, {}
    from indexplug.evaluation import load_beir

    ds = load_beir(Path(dataset))

    def batches() -> Iterator[list[tuple[str, str]]]:
        for i in range(0, len(ds.corpus), 1000):
            yield ds.corpus[i : i + 1000]

    return ds.name, len(ds.corpus), batches, list(ds.queries.items()), ds.qrels
