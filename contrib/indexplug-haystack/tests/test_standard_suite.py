"""Haystack's own DocumentStore tests, sync and async, unmodified, on sqlite-fts5 and chroma.

Only the ``document_store`` fixture is given, plus ``test_write_documents``, which Haystack's
base class leaves to each store (it raises ``NotImplementedError`` until overridden, because the
default policy is the store's choice): here ``NONE`` means ``FAIL``, as in Haystack's own
in-memory store.  The same holds for ``test_write_documents_async``.
"""

from __future__ import annotations

import pytest
from haystack.dataclasses import Document
from haystack.document_stores.errors import DuplicateDocumentError
from haystack.document_stores.types import DocumentStore
from haystack.testing.document_store import DocumentStoreBaseTests
from haystack.testing.document_store_async import (
    AsyncDocumentStore,
    CountDocumentsAsyncTest,
    DeleteDocumentsAsyncTest,
    FilterDocumentsAsyncTest,
    WriteDocumentsAsyncTest,
)
from indexplug_haystack import IndexplugDocumentStore


class _DefaultPolicy:
    def test_write_documents(self, document_store: DocumentStore) -> None:
        docs = [Document(id="1")]
        assert document_store.write_documents(docs) == 1
        with pytest.raises(DuplicateDocumentError):
            document_store.write_documents(docs)
        assert document_store.filter_documents() == docs


class TestSqliteFts5(_DefaultPolicy, DocumentStoreBaseTests):
    @pytest.fixture
    def document_store(self) -> IndexplugDocumentStore:
        return IndexplugDocumentStore("haystack", backend="sqlite-fts5")


class TestChroma(_DefaultPolicy, DocumentStoreBaseTests):
    @pytest.fixture
    def document_store(self) -> IndexplugDocumentStore:
        return IndexplugDocumentStore(
            "haystack", backend="chroma", options={"embedder": "hashing:default"}
        )


class _DefaultPolicyAsync:
    @pytest.mark.asyncio
    async def test_write_documents_async(self, document_store: AsyncDocumentStore) -> None:
        docs = [Document(id="1")]
        assert await document_store.write_documents_async(docs) == 1
        with pytest.raises(DuplicateDocumentError):
            await document_store.write_documents_async(docs)
        assert await document_store.filter_documents_async() == docs


class _AsyncSuite(
    _DefaultPolicyAsync,
    CountDocumentsAsyncTest,
    DeleteDocumentsAsyncTest,
    FilterDocumentsAsyncTest,
    WriteDocumentsAsyncTest,
):
    """Haystack's async store tests (count, write, delete, filter: the async forms of the
    base suite's classes)."""


class TestSqliteFts5Async(_AsyncSuite):
    @pytest.fixture
    def document_store(self) -> IndexplugDocumentStore:
        return IndexplugDocumentStore("haystack", backend="sqlite-fts5")


class TestChromaAsync(_AsyncSuite):
    @pytest.fixture
    def document_store(self) -> IndexplugDocumentStore:
        return IndexplugDocumentStore(
            "haystack", backend="chroma", options={"embedder": "hashing:default"}
        )
