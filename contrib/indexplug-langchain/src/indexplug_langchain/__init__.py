"""LangChain retriever over indexplug."""

from indexplug_langchain.retriever import IndexplugRetriever

__all__ = ["IndexplugRetriever"]
