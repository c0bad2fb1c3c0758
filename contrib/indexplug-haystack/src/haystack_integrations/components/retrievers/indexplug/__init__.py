"""The indexplug retrievers where Haystack looks for integrations, so that a saved pipeline
naming them loads with Haystack's default trusted modules (``indexplug_haystack`` holds the same
retrievers under its own name)."""

from indexplug_haystack.embedding_retriever import IndexplugEmbeddingRetriever
from indexplug_haystack.retriever import IndexplugRetriever

__all__ = ["IndexplugEmbeddingRetriever", "IndexplugRetriever"]
