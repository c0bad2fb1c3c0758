"""indexplug embedders backed by sentence-transformers (``sentence-transformers:MODEL``)."""

from indexplug_sentence_transformers.embedder import (
    EmbedderUnavailable,
    SentenceTransformerEmbedder,
)
from indexplug_sentence_transformers.models import ModelSource, resolve_model

__all__ = ["EmbedderUnavailable", "ModelSource", "SentenceTransformerEmbedder", "resolve_model"]
