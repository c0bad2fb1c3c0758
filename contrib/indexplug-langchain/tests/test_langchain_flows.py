"""The flows LangChain users run, end to end, on sqlite-fts5, embedded chroma and a real
Elasticsearch node (conftest's ``FLOW_BACKENDS``), with a deterministic embedding model written
here (chroma embeds with it; sqlite-fts5 and elastic rank by BM25 and never call it):

* documents indexed with ``index()`` and LangChain's ``InMemoryRecordManager``, run again in
  ``incremental`` and in ``full`` cleanup mode (the second run writes nothing), then an edited
  source re-indexed;
* an LCEL chain, retriever | prompt | a fake LLM | parser, answering from what was indexed.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator
from typing import Any

import pytest
from indexplug_langchain import IndexplugVectorStore
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.indexing import InMemoryRecordManager, index
from langchain_core.language_models import FakeListLLM
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import PromptTemplate
from langchain_core.runnables import RunnableLambda, RunnablePassthrough

DIM = 64


class WordHashEmbeddings(Embeddings):
    """A deterministic model: each word adds 1 to one of 64 dimensions, then unit length."""

    def __init__(self) -> None:
        self.calls = 0

    def _embed(self, text: str) -> list[float]:
        self.calls += 1
        vec = [0.0] * DIM
        for word in text.lower().split():
            word = word.strip(".,?!")
            vec[int(hashlib.sha256(word.encode()).hexdigest(), 16) % DIM] += 1.0
        norm = math.sqrt(sum(v * v for v in vec)) or 1.0
        return [v / norm for v in vec]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._embed(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._embed(text)


SOURCES = {
    "otters.md": [
        "Sea otters hold hands while they sleep.",
        "Otters crack shellfish with stones.",
    ],
    "coffee.md": ["Espresso is brewed under pressure and topped with crema."],
    "volcano.md": ["Volcanoes erupt molten lava and ash."],
}


def _docs(sources: dict[str, list[str]]) -> list[Document]:
    return [
        Document(page_content=text, metadata={"source": name})
        for name, texts in sources.items()
        for text in texts
    ]


@pytest.fixture
def store(flow_backend: tuple[str, dict[str, Any]]) -> Iterator[IndexplugVectorStore]:
    embedding = WordHashEmbeddings()
    name, options = flow_backend
    vs = IndexplugVectorStore.from_backend(name, "flow", options, embedding=embedding)
    try:
        yield vs
    finally:
        vs.guard.close()


def _manager() -> InMemoryRecordManager:
    manager = InMemoryRecordManager(namespace="indexplug/flow")
    manager.create_schema()
    return manager


def _stored(vs: IndexplugVectorStore) -> list[str]:
    page = vs.guard.scan(vs.index, limit=100)
    return sorted(p.text for p in getattr(page, "passages", []))


@pytest.mark.parametrize("cleanup", ["incremental", "full"])
def test_index_twice_writes_nothing_the_second_time(
    store: IndexplugVectorStore, cleanup: Any
) -> None:
    manager = _manager()
    docs = _docs(SOURCES)
    first = index(
        docs, manager, store, cleanup=cleanup, source_id_key="source", key_encoder="sha256"
    )
    assert first == {"num_added": 4, "num_updated": 0, "num_skipped": 0, "num_deleted": 0}
    before = _stored(store)
    calls = getattr(store.embeddings, "calls", 0)

    again = index(
        docs, manager, store, cleanup=cleanup, source_id_key="source", key_encoder="sha256"
    )
    assert again == {"num_added": 0, "num_updated": 0, "num_skipped": 4, "num_deleted": 0}
    assert _stored(store) == before
    assert getattr(store.embeddings, "calls", 0) == calls  # nothing was embedded again

    # an edited source: its new text is written and its old one removed
    edited = {**SOURCES, "coffee.md": ["Espresso is brewed under pressure; crema on top."]}
    third = index(
        _docs(edited), manager, store, cleanup=cleanup, source_id_key="source", key_encoder="sha256"
    )
    assert third == {"num_added": 1, "num_updated": 0, "num_skipped": 3, "num_deleted": 1}
    assert _stored(store) == sorted(d.page_content for d in _docs(edited))


def test_an_lcel_chain_answers_from_the_indexed_documents(store: IndexplugVectorStore) -> None:
    index(
        _docs(SOURCES),
        _manager(),
        store,
        cleanup="incremental",
        source_id_key="source",
        key_encoder="sha256",
    )
    retriever = store.as_retriever(search_kwargs={"k": 2})
    prompt = PromptTemplate.from_template("Context:\n{context}\n\nQuestion: {question}\nAnswer:")
    seen: list[str] = []

    def spy(value: Any) -> Any:
        seen.append(value.to_string())
        return value

    joined = RunnableLambda(lambda docs: "\n".join(d.page_content for d in docs))
    chain = (
        {
            "context": retriever | joined,
            "question": RunnablePassthrough(),
        }
        | prompt
        | RunnableLambda(spy)
        | FakeListLLM(responses=["They hold hands."])
        | StrOutputParser()
    )
    assert chain.invoke("why do otters hold hands while they sleep") == "They hold hands."
    [shown] = seen
    assert "Sea otters hold hands while they sleep." in shown
    assert "Volcanoes" not in shown and "Espresso" not in shown
    # the same chain over several questions at once
    assert chain.batch(["otters", "crema"]) == ["They hold hands.", "They hold hands."]
