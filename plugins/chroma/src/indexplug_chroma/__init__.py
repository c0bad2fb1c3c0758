"""indexplug's chroma backend (see :mod:`indexplug_chroma.backend`)."""

from indexplug_chroma.backend import ChromaBackend
from indexplug_chroma.settings import ChromaSettings

__all__ = ["ChromaBackend", "ChromaSettings"]
