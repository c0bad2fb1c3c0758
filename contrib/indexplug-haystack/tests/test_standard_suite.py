"""Haystack's own DocumentStore tests: the extended suite and every optional mixin it ships,
sync and async, unmodified, on sqlite-fts5, chroma and a real Elasticsearch node
(``DocumentStoreBaseExtendedTests``: the base suite plus ``delete_all_documents``,
``delete_by_filter``, ``update_by_filter``; then the counts and the metadata-field queries).

The base suite's ``test_write_documents`` is left to each store by Haystack (the default policy
is the store's choice); it is given here as in ``test_standard_suite.py``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from haystack.dataclasses import Document
from haystack.document_stores.errors import DuplicateDocumentError
from haystack.document_stores.types import DocumentStore
from haystack.testing.document_store import (
    CountDocumentsByFilterTest,
    CountUniqueMetadataByFilterTest,
    DocumentStoreBaseExtendedTests,
    GetMetadataFieldMinMaxTest,
    GetMetadataFieldsInfoTest,
    GetMetadataFieldUniqueValuesTest,
)
from haystack.testing.document_store_async import (
    AsyncDocumentStore,
    CountDocumentsAsyncTest,
    CountDocumentsByFilterAsyncTest,
    CountUniqueMetadataByFilterAsyncTest,
    DeleteAllAsyncTest,
    DeleteByFilterAsyncTest,
    DeleteDocumentsAsyncTest,
    FilterDocumentsAsyncTest,
    GetMetadataFieldMinMaxAsyncTest,
    GetMetadataFieldsInfoAsyncTest,
    GetMetadataFieldUniqueValuesAsyncTest,
    UpdateByFilterAsyncTest,
    WriteDocumentsAsyncTest,
)
from haystack_integrations.document_stores.indexplug import IndexplugDocumentStore
from indexplug_elastic.testing.fixtures import options_for

BACKENDS = {"sqlite-fts5": {}, "chroma": {"embedder": "hashing:default"}, "elastic": {}}


class _DefaultPolicy:
    def test_write_documents(self, document_store: DocumentStore) -> None:
        docs = [Document(id="1")]
        assert document_store.write_documents(docs) == 1
        with pytest.raises(DuplicateDocumentError):
            document_store.write_documents(docs)
        assert document_store.filter_documents() == docs


class _DefaultPolicyAsync:
    @pytest.mark.asyncio
    async def test_write_documents_async(self, document_store: AsyncDocumentStore) -> None:
        docs = [Document(id="1")]
        assert await document_store.write_documents_async(docs) == 1
        with pytest.raises(DuplicateDocumentError):
            await document_store.write_documents_async(docs)
        assert await document_store.filter_documents_async() == docs


class _Store:
    @pytest.fixture(params=sorted(BACKENDS))
    def document_store(self, request: pytest.FixtureRequest) -> Iterator[IndexplugDocumentStore]:
        options = options_for(request, request.param, BACKENDS[request.param])
        store = IndexplugDocumentStore("extended", backend=request.param, options=options)
        yield store
        store.guard.close()


class TestExtended(
    _Store,
    _DefaultPolicy,
    DocumentStoreBaseExtendedTests,
    CountDocumentsByFilterTest,
    CountUniqueMetadataByFilterTest,
    GetMetadataFieldsInfoTest,
    GetMetadataFieldMinMaxTest,
    GetMetadataFieldUniqueValuesTest,
):
    """Every sync test Haystack ships for a document store."""


class TestExtendedAsync(
    _Store,
    _DefaultPolicyAsync,
    CountDocumentsAsyncTest,
    DeleteDocumentsAsyncTest,
    FilterDocumentsAsyncTest,
    WriteDocumentsAsyncTest,
    DeleteAllAsyncTest,
    DeleteByFilterAsyncTest,
    UpdateByFilterAsyncTest,
    CountDocumentsByFilterAsyncTest,
    CountUniqueMetadataByFilterAsyncTest,
    GetMetadataFieldsInfoAsyncTest,
    GetMetadataFieldMinMaxAsyncTest,
    GetMetadataFieldUniqueValuesAsyncTest,
):
    """Every async test Haystack ships for a document store."""
