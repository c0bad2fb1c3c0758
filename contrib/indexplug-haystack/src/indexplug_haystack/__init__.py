"""Haystack 2.x integration for indexplug: a DocumentStore and a retriever component over any
indexplug index (see docs/adapters/haystack.md)."""

from indexplug_haystack.codec import ForeignRecord, MetadataRefused
from indexplug_haystack.document_store import IndexplugDocumentStore
from indexplug_haystack.embedder import haystack_embedder
from indexplug_haystack.embedding_retriever import IndexplugEmbeddingRetriever
from indexplug_haystack.retriever import IndexplugRetriever
from indexplug_haystack.vectors import NoVectors

__all__ = [
    "ForeignRecord",
    "IndexplugDocumentStore",
    "IndexplugEmbeddingRetriever",
    "IndexplugRetriever",
    "MetadataRefused",
    "NoVectors",
    "haystack_embedder",
]
