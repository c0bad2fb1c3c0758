"""A dense indexplug backend on usearch (HNSW), written as an outside author would."""

from indexplug_usearch.backend import UsearchBackend

__all__ = ["UsearchBackend"]
