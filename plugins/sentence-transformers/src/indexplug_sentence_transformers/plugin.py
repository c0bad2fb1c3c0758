"""Registration: the ``indexplug`` entry point of this distribution points here.

Importing this module is cheap (no torch): the embedder loads its model on first use.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, cast

from indexplug.hookspecs import hookimpl
from indexplug.protocols import Embedder, EmbedderSpec

from indexplug_sentence_transformers.embedder import (
    DEFAULT_BATCH_SIZE,
    PROGRESS_MIN,
    PROVIDER,
    SentenceTransformerEmbedder,
)

_OPTIONS = {"device", "batch_size", "max_seq_length", "progress_min", "query_dtype"}


def make_embedder(model: str, options: Mapping[str, Any]) -> SentenceTransformerEmbedder:
    # (``dim`` and ``granularities`` are read-only properties, computed on demand; the
    # protocol's plain attributes are what they look like to callers.)
    """``factory(model, options)`` of the provider.

    Options not given fall back to ``INDEXPLUG_ST_DEVICE``, ``INDEXPLUG_ST_BATCH_SIZE`` and
    ``INDEXPLUG_ST_QUERY_DTYPE``:
    a backend asks for its embedder by spec alone, so the environment is how a deployment
    picks a GPU or a batch size for every index at once.
    """
    unknown = set(options) - _OPTIONS
    if unknown:
        raise ValueError(f"unknown sentence-transformers option(s): {', '.join(sorted(unknown))}")
    device = options.get("device") or os.environ.get("INDEXPLUG_ST_DEVICE") or None
    batch = options.get("batch_size") or os.environ.get("INDEXPLUG_ST_BATCH_SIZE")
    max_len = options.get("max_seq_length")
    return SentenceTransformerEmbedder(
        model,
        device=str(device) if device else None,
        batch_size=int(batch) if batch else DEFAULT_BATCH_SIZE,
        max_seq_length=int(max_len) if max_len else None,
        progress_min=int(options.get("progress_min", PROGRESS_MIN)),
        query_dtype=str(
            options.get("query_dtype") or os.environ.get("INDEXPLUG_ST_QUERY_DTYPE") or "auto"
        ),
    )


@hookimpl
def indexplug_embedders() -> list[EmbedderSpec]:
    return [
        EmbedderSpec(
            provider=PROVIDER,
            factory=cast("Callable[[str, Mapping[str, Any]], Embedder]", make_embedder),
            description=(
                "sentence-transformers models (hub name or local folder): mean-pooled text "
                "vectors and per-token vectors, normalised."
            ),
        )
    ]
