"""LlamaIndex retriever over indexplug."""

from indexplug_llamaindex.retriever import IndexplugRetriever

__all__ = ["IndexplugRetriever"]
