"""LangChain's indexing API over the store, as a user runs it: ``index()`` / ``aindex()`` with
LangChain's own ``InMemoryRecordManager``, in ``incremental`` and ``full`` cleanup modes, on
sqlite-fts5, embedded chroma (``hashing:default``) and a real Elasticsearch node (conftest's
``FLOW_BACKENDS``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import indexplug
import pytest
from indexplug.errors import InvalidRequest
from indexplug.outcomes import Scanned
from indexplug_langchain import IndexplugVectorStore
from langchain_core.documents import Document
from langchain_core.indexing import InMemoryRecordManager, aindex, index

DOCS = [
    Document(page_content="Otters hold hands while sleeping.", metadata={"source": "otters.md"}),
    Document(page_content="Otters crack shellfish with stones.", metadata={"source": "otters.md"}),
    Document(page_content="A raft of otters floats together.", metadata={"source": "otters.md"}),
    Document(page_content="Volcanoes erupt molten lava.", metadata={"source": "volcano.md"}),
    Document(page_content="Espresso has a crema on top.", metadata={"source": "coffee.md"}),
]
"""A source's documents are next to each other: incremental cleanup, run per batch, removes
what a batch's sources no longer hold, so a source must not span two batches (LangChain's
documented behaviour)."""


class _CountingGuard:
    """The guard, counting the passages each write sends (the calls go through unchanged)."""

    def __init__(self, guard: indexplug.Guard) -> None:
        self._guard = guard
        self.writes: list[int] = []

    def add(self, index: str, passages: list[indexplug.Passage], **kw: Any) -> Any:
        self.writes.append(len(passages))
        return self._guard.add(index, passages, **kw)

    async def aadd(self, index: str, passages: list[indexplug.Passage], **kw: Any) -> Any:
        self.writes.append(len(passages))
        return await self._guard.aadd(index, passages, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._guard, name)


@pytest.fixture
def counted(
    flow_backend: tuple[str, dict[str, Any]],
) -> Iterator[tuple[IndexplugVectorStore, _CountingGuard]]:
    guard = indexplug.open_backend(*flow_backend)
    spy = _CountingGuard(guard)
    try:
        yield IndexplugVectorStore(spy, "indexed"), spy  # type: ignore[arg-type]
    finally:
        guard.close()


def _stored(vs: IndexplugVectorStore) -> set[str]:
    page = vs.guard.scan(vs.index, limit=1000)
    assert isinstance(page, Scanned), page
    return {p.text for p in page.passages}


def _manager() -> InMemoryRecordManager:
    manager = InMemoryRecordManager(namespace="indexplug/test")
    manager.create_schema()
    return manager


def test_index_incremental_twice_writes_nothing_the_second_time(
    counted: tuple[IndexplugVectorStore, _CountingGuard],
) -> None:
    vs, spy = counted
    manager = _manager()
    first = index(
        DOCS,
        manager,
        vs,
        key_encoder="sha256",
        cleanup="incremental",
        source_id_key="source",
        batch_size=3,
    )
    assert first == {"num_added": 5, "num_updated": 0, "num_skipped": 0, "num_deleted": 0}
    assert spy.writes == [3, 2]  # batch_size reaches the backend
    assert _stored(vs) == {d.page_content for d in DOCS}

    second = index(
        DOCS,
        manager,
        vs,
        key_encoder="sha256",
        cleanup="incremental",
        source_id_key="source",
        batch_size=3,
    )
    assert second == {"num_added": 0, "num_updated": 0, "num_skipped": 5, "num_deleted": 0}
    assert spy.writes == [3, 2]  # the second run wrote nothing

    # one document of otters.md changes: its old version goes, nothing else is touched
    raft = Document(page_content="A raft of otters drifts.", metadata={"source": "otters.md"})
    changed = [*DOCS[:2], raft, *DOCS[3:]]
    third = index(
        changed, manager, vs, key_encoder="sha256", cleanup="incremental", source_id_key="source"
    )
    assert third == {"num_added": 1, "num_updated": 0, "num_skipped": 4, "num_deleted": 1}
    assert _stored(vs) == {d.page_content for d in changed}
    hits = vs.similarity_search("raft otters drifts", k=1)
    assert hits[0].page_content == "A raft of otters drifts."


def test_index_full_cleanup_deletes_what_is_gone(
    counted: tuple[IndexplugVectorStore, _CountingGuard],
) -> None:
    vs, spy = counted
    manager = _manager()
    assert index(DOCS, manager, vs, key_encoder="sha256", cleanup="full")["num_added"] == 5
    again = index(DOCS, manager, vs, key_encoder="sha256", cleanup="full")
    assert again == {"num_added": 0, "num_updated": 0, "num_skipped": 5, "num_deleted": 0}
    assert spy.writes == [5]

    kept = DOCS[3:]  # otters.md is gone
    result = index(kept, manager, vs, key_encoder="sha256", cleanup="full")
    assert result == {"num_added": 0, "num_updated": 0, "num_skipped": 2, "num_deleted": 3}
    assert _stored(vs) == {d.page_content for d in kept}
    assert len(manager.list_keys()) == 2


@pytest.mark.asyncio
async def test_aindex_incremental_and_full(
    counted: tuple[IndexplugVectorStore, _CountingGuard],
) -> None:
    vs, spy = counted
    manager = _manager()
    first = await aindex(
        DOCS, manager, vs, key_encoder="sha256", cleanup="incremental", source_id_key="source"
    )
    assert first["num_added"] == 5
    second = await aindex(
        DOCS, manager, vs, key_encoder="sha256", cleanup="incremental", source_id_key="source"
    )
    assert second == {"num_added": 0, "num_updated": 0, "num_skipped": 5, "num_deleted": 0}
    assert len(spy.writes) == 1
    gone = await aindex(DOCS[3:], manager, vs, key_encoder="sha256", cleanup="full")
    assert gone["num_deleted"] == 3
    assert _stored(vs) == {d.page_content for d in DOCS[3:]}


def test_batch_size_must_be_a_positive_integer(
    counted: tuple[IndexplugVectorStore, _CountingGuard],
) -> None:
    vs, spy = counted
    for bad in (0, -1, 2.5, "10", True):
        with pytest.raises(InvalidRequest, match="batch_size"):
            vs.add_documents(DOCS, batch_size=bad)
    with pytest.raises(InvalidRequest, match="no argument"):
        vs.add_documents(DOCS, batchsize=10)
    assert spy.writes == []
