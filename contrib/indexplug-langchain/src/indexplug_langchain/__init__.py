"""LangChain over indexplug: a retriever and a vector store, with typed failures."""

from indexplug_langchain._convert import (
    NAMESPACE,
    NoRelevanceScale,
    ReservedMetadataKey,
    UnstorableMetadata,
)
from indexplug_langchain.embedder import langchain_embedder
from indexplug_langchain.retriever import IndexplugRetriever
from indexplug_langchain.vectors import NoVectors
from indexplug_langchain.vectorstore import IndexplugVectorStore

__all__ = [
    "NAMESPACE",
    "IndexplugRetriever",
    "IndexplugVectorStore",
    "NoRelevanceScale",
    "NoVectors",
    "ReservedMetadataKey",
    "UnstorableMetadata",
    "langchain_embedder",
]
