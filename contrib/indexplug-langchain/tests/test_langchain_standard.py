"""LangChain's own standard suites, unmodified, on sqlite-fts5 (lexical), chroma (dense,
embedded) and a real Elasticsearch node (BM25 for the retriever, kNN for the vector store):
with the model-free ``hashing:default`` embedder, and with the real all-MiniLM-L6-v2
(``indexplug-sentence-transformers[minilm]``, which the ``adapters`` tox env installs: these
classes are never skipped, so a missing model fails them rather than passing them by).

Each class provides only what the base classes ask of a subclass: the retriever's constructor,
its parameters and a query example; an empty vector store per test (filling to ``k`` on a
lexical backend, as the suite expects of a dense store).  No standard test is
overridden, skipped or deselected (``test_no_overrides_DO_NOT_OVERRIDE`` checks it).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import indexplug
import pytest
from indexplug_elastic.testing.fixtures import delete_prefixed, options_for
from indexplug_langchain import IndexplugRetriever, IndexplugVectorStore
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import VectorStore
from langchain_tests.integration_tests import (
    RetrieversIntegrationTests,
    VectorStoreIntegrationTests,
)

SQLITE: tuple[str, dict[str, Any]] = ("sqlite-fts5", {})
CHROMA: tuple[str, dict[str, Any]] = ("chroma", {"embedder": "hashing:default"})
CHROMA_MINILM: tuple[str, dict[str, Any]] = (
    "chroma",
    {"embedder": "sentence-transformers:all-MiniLM-L6-v2"},
)
ELASTIC: tuple[str, dict[str, Any]] = ("elastic", {})
ELASTIC_KNN: tuple[str, dict[str, Any]] = (
    "elastic",
    {"embedder": "hashing:default", "mode": "knn"},
)

FACTS = [
    "Sea otters hold hands while they sleep so they do not drift apart.",
    "Otters use stones as tools to crack open shellfish.",
    "A group of otters resting in the water is called a raft.",
    "River otters can hold their breath for up to eight minutes.",
    "Otters have the densest fur of any animal.",
    "Volcanoes erupt molten lava and ash.",
    "Honeybees dance to tell the hive where flowers are.",
]


class _Retriever(RetrieversIntegrationTests):
    """An index of seven facts, five about otters, built once per class."""

    backend: ClassVar[tuple[str, dict[str, Any]]]
    guard: ClassVar[indexplug.Guard]

    @pytest.fixture(autouse=True, scope="class")
    @classmethod
    def _facts(
        cls, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
    ) -> Iterator[None]:
        home: Path = tmp_path_factory.mktemp("retriever-home")
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("INDEXPLUG_HOME", str(home))
            name, options = cls.backend
            prefix = ""
            if name == "elastic":  # the session's node, under this class's own index prefix
                cluster = request.getfixturevalue("_es_single_session")
                prefix = f"t{uuid.uuid4().hex[:10]}-"
                options = {**options, "hosts": cluster.urls, "prefix": prefix}
            guard = indexplug.open_backend(name, options)
            passages = [
                indexplug.Passage.create(t, f"file:///facts/{n}.md", key=f"fact-{n}")
                for n, t in enumerate(FACTS)
            ]
            assert isinstance(guard.add("facts", passages), indexplug.Indexed)
            cls.guard = guard
            yield
            guard.close()
            if prefix:
                delete_prefixed(cluster, prefix)

    @property
    def retriever_constructor(self) -> type[BaseRetriever]:
        retriever: type[BaseRetriever] = IndexplugRetriever
        return retriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"guard": self.guard, "index": "facts"}

    @property
    def retriever_query_example(self) -> str:
        return "what do otters do"


class TestRetrieverSqlite(_Retriever):
    backend = SQLITE


class TestRetrieverChroma(_Retriever):
    backend = CHROMA


class TestRetrieverChromaMiniLM(_Retriever):
    backend = CHROMA_MINILM


class TestRetrieverElastic(_Retriever):
    backend = ELASTIC


class _Store(VectorStoreIntegrationTests):
    backend: ClassVar[tuple[str, dict[str, Any]]]

    @pytest.fixture
    def vectorstore(self, _home: Path, request: pytest.FixtureRequest) -> Iterator[VectorStore]:
        """An empty store in this test's own indexplug home.  The suite is written for dense
        stores, where every document is among the ``k`` nearest (``similarity_search("bar",
        k=2)`` is expected to answer "bar" then "foo"); a lexical backend ranks only the
        documents sharing a term with the query, so the store is asked to fill to ``k``
        (``fill_to_k=True``, which changes nothing on a dense backend).  The suite's
        embeddings are the store's: chroma embeds with them, sqlite-fts5 never calls them; the
        MiniLM class leaves them out, so chroma embeds with its configured model.  Elastic runs
        on the session's node, under this test's own index prefix."""
        name, options = self.backend
        options = options_for(request, name, options)
        embedding = None if self.backend is CHROMA_MINILM else self.get_embeddings()
        store = IndexplugVectorStore.from_backend(
            name, "standard", options, embedding=embedding, fill_to_k=True
        )
        try:
            yield store
        finally:
            store.guard.close()


class TestVectorStoreSqlite(_Store):
    backend = SQLITE


class TestVectorStoreChroma(_Store):
    backend = CHROMA


class TestVectorStoreChromaMiniLM(_Store):
    backend = CHROMA_MINILM


class TestVectorStoreElastic(_Store):
    backend = ELASTIC_KNN
