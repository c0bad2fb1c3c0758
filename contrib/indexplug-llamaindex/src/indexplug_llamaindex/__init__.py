"""LlamaIndex over indexplug: a retriever and a vector store, any backend, typed failures."""

from indexplug_llamaindex.embedder import llamaindex_embedder
from indexplug_llamaindex.filters import UnsupportedFilter, translate
from indexplug_llamaindex.hybrid import NoHybrid
from indexplug_llamaindex.nodes import MetadataRefused, NodeRefused
from indexplug_llamaindex.retriever import IndexplugRetriever
from indexplug_llamaindex.store import IndexplugVectorStore, MissingCapability, UnsupportedQuery
from indexplug_llamaindex.vectors import NoVectors

__all__ = [
    "IndexplugRetriever",
    "IndexplugVectorStore",
    "MetadataRefused",
    "MissingCapability",
    "NoHybrid",
    "NoVectors",
    "NodeRefused",
    "UnsupportedFilter",
    "UnsupportedQuery",
    "llamaindex_embedder",
    "translate",
]
