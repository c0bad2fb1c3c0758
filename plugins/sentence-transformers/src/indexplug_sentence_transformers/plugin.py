"""Registration: the ``indexplug`` entry point of this distribution points here.

Importing this module is cheap: discovery imports it in every ``indexplug`` process, so it
imports neither the embedder module (numpy) nor torch; the factory imports the embedder when
one is made, and the embedder loads its model on first use.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

from indexplug.errors import InvalidOption
from indexplug.hookspecs import hookimpl
from indexplug.protocols import Embedder, EmbedderSpec

if TYPE_CHECKING:
    from indexplug_sentence_transformers.embedder import SentenceTransformerEmbedder

PROVIDER = "sentence-transformers"
"""The provider's name: the part of ``sentence-transformers:MODEL`` before the colon."""

_OPTIONS = {"device", "batch_size", "max_seq_length", "progress_min", "query_dtype", "path"}


def split_path(model: str) -> tuple[str, str | None]:
    """``MODEL@PATH`` -> (``MODEL``, ``PATH``); a suffix with a ``/`` is part of a folder name."""
    head, sep, tail = model.rpartition("@")
    if not sep or not head or "/" in tail or "\\" in tail:
        return model, None
    return head, tail


def _count(key: str, value: Any, low: int) -> int:
    """A whole-number setting (a number, or text that reads as one), refused naming the key."""
    try:
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise TypeError
        n = int(value)
    except (TypeError, ValueError):
        raise InvalidOption(
            key, f"sentence-transformers option {key} must be a whole number, got {value!r}"
        ) from None
    if n < low:
        raise InvalidOption(
            key, f"sentence-transformers option {key} must be at least {low}, got {n}"
        )
    return n


def make_embedder(model: str, options: Mapping[str, Any]) -> SentenceTransformerEmbedder:
    # (``dim`` and ``granularities`` are read-only properties, computed on demand; the
    # protocol's plain attributes are what they look like to callers.)
    """``factory(model, options)`` of the provider.

    ``MODEL@PATH`` (how embedder names record a path other than fp32) and the ``path`` option
    pick the path; given both, they must agree.  Without either, ``INDEXPLUG_ST_PATH``, else
    ``fp32``: a bare spec keeps meaning what indexes built before paths existed recorded.

    Options not given fall back to ``INDEXPLUG_ST_DEVICE``, ``INDEXPLUG_ST_BATCH_SIZE`` and
    ``INDEXPLUG_ST_QUERY_DTYPE``:
    a backend asks for its embedder by spec alone, so the environment is how a deployment
    picks a GPU or a batch size for every index at once.
    """
    from indexplug_sentence_transformers import paths as paths_mod
    from indexplug_sentence_transformers.embedder import (
        DEFAULT_BATCH_SIZE,
        PROGRESS_MIN,
        SentenceTransformerEmbedder,
    )

    unknown = sorted(str(k) for k in options if k not in _OPTIONS)
    if unknown:
        raise InvalidOption(
            unknown[0], f"unknown sentence-transformers option(s): {', '.join(unknown)}"
        )
    model, in_spec = split_path(model)
    given = options.get("path")
    if given is not None and not isinstance(given, str):
        raise InvalidOption(
            "path", f"sentence-transformers option path must be text, got {given!r}"
        )
    path = in_spec if in_spec is not None else given
    if path is None:
        path = os.environ.get("INDEXPLUG_ST_PATH") or "fp32"
    try:
        parsed = paths_mod.parse_path(path)
        if in_spec is not None and given is not None and paths_mod.parse_path(given) != parsed:
            raise paths_mod.PathSpecError(
                f"the spec says @{in_spec} but option path is {given!r}; give one of them"
            )
    except paths_mod.PathSpecError as exc:
        raise InvalidOption("path", f"sentence-transformers option {exc}") from None
    device = options.get("device") or os.environ.get("INDEXPLUG_ST_DEVICE") or None
    # a value given is checked, 0 included (it must not fall back to the default unnoticed)
    batch = options.get("batch_size", os.environ.get("INDEXPLUG_ST_BATCH_SIZE") or None)
    max_len = options.get("max_seq_length")
    return SentenceTransformerEmbedder(
        model,
        device=str(device) if device else None,
        batch_size=_count("batch_size", batch, 1) if batch is not None else DEFAULT_BATCH_SIZE,
        max_seq_length=_count("max_seq_length", max_len, 1) if max_len is not None else None,
        progress_min=_count("progress_min", options.get("progress_min", PROGRESS_MIN), 0),
        query_dtype=str(
            options.get("query_dtype") or os.environ.get("INDEXPLUG_ST_QUERY_DTYPE") or "auto"
        ),
        path=path,
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
