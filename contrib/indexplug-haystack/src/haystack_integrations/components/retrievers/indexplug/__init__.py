"""The indexplug retriever where Haystack looks for integrations, so that a saved pipeline
naming it loads with Haystack's default trusted modules (``indexplug_haystack`` is the same
retriever under its own name)."""

from indexplug_haystack.retriever import IndexplugRetriever

__all__ = ["IndexplugRetriever"]
