"""indexplug embedders backed by sentence-transformers (``sentence-transformers:MODEL``).

The names below are imported when first used: discovery imports this package for its
``plugin`` module and must not pay for the backend (or its libraries) until one is opened.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from indexplug_sentence_transformers.embedder import (
        EmbedderUnavailable,
        SentenceTransformerEmbedder,
    )
    from indexplug_sentence_transformers.models import ModelSource, resolve_model

__all__ = ["EmbedderUnavailable", "ModelSource", "SentenceTransformerEmbedder", "resolve_model"]

_WHERE = {
    "EmbedderUnavailable": "indexplug_sentence_transformers.embedder",
    "ModelSource": "indexplug_sentence_transformers.models",
    "SentenceTransformerEmbedder": "indexplug_sentence_transformers.embedder",
    "resolve_model": "indexplug_sentence_transformers.models",
}
"""Each name exported and the module defining it, imported on first use (PEP 562)."""


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(import_module(_WHERE[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
