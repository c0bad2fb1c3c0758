"""The indexplug document store where Haystack looks for integrations, so that a saved
pipeline naming it loads with Haystack's default trusted modules (``indexplug_haystack`` is the
same store under its own name)."""

from indexplug_haystack.codec import ForeignRecord, MetadataRefused
from indexplug_haystack.document_store import IndexplugDocumentStore
from indexplug_haystack.embedder import haystack_embedder

__all__ = ["ForeignRecord", "IndexplugDocumentStore", "MetadataRefused", "haystack_embedder"]
