"""The LangChain retriever, with the real langchain-core and real backends."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import indexplug
import pytest
from indexplug_langchain import NAMESPACE, IndexplugRetriever, ReservedMetadataKey
from langchain_core.documents import Document
from langchain_core.runnables import RunnableLambda


def _facts() -> list[indexplug.Passage]:
    rows: list[tuple[str, dict[str, Any]]] = [
        ("Otters hold hands while sleeping.", {"year": 2019, "source": "mine", "rank": "A"}),
        ("Otters crack shellfish with stones.", {"year": 2021, "start": "user", "end": 9}),
        ("Otters have very dense fur.", {"year": 2023, "tags": ["fur", "otters"]}),
        ("Volcanoes erupt molten lava.", {"year": 2022}),
    ]
    return [
        indexplug.Passage.create(t, f"file:///{n}.md", metadata=m, key=f"doc-{n}")
        for n, (t, m) in enumerate(rows)
    ]


@pytest.fixture
def backend() -> indexplug.Guard:
    b = indexplug.open_backend("sqlite-fts5")
    assert isinstance(b.add("notes", _facts()), indexplug.Indexed)
    return b


def test_hits_become_documents_and_chain(backend: indexplug.Guard) -> None:
    r = IndexplugRetriever(guard=backend, index="notes", k=2)
    docs = r.invoke("why do otters hold hands")
    assert docs[0].page_content.startswith("Otters hold hands")
    assert docs[0].id == "doc-0"
    ours = docs[0].metadata[NAMESPACE]
    assert ours["rank"] == 1 and ours["score_scale"] == "fts5_bm25" and ours["untrusted"] is True
    assert ours["key"] == "doc-0" and len(ours["passage_id"]) == 64

    def sources(ds: list[Document]) -> list[str]:
        return [d.metadata[NAMESPACE]["uri"] for d in ds]

    chain = r | RunnableLambda(sources)
    assert chain.invoke("lava") == ["file:///3.md"]


def test_user_metadata_is_never_overwritten(backend: indexplug.Guard) -> None:
    docs = IndexplugRetriever(guard=backend, index="notes", k=4).invoke("otters")
    by_id = {d.id: d for d in docs}
    assert {k: v for k, v in by_id["doc-0"].metadata.items() if k != NAMESPACE} == {
        "year": 2019,
        "source": "mine",
        "rank": "A",
    }
    assert by_id["doc-1"].metadata["start"] == "user" and by_id["doc-1"].metadata["end"] == 9
    assert by_id["doc-1"].metadata[NAMESPACE]["start"] == 0
    assert by_id["doc-2"].metadata["tags"] == ["fur", "otters"]
    by_id["doc-2"].metadata["tags"].append("mutable")  # a plain list, the caller's to change


def test_k_in_the_constructor_and_per_call(backend: indexplug.Guard) -> None:
    r = IndexplugRetriever(guard=backend, index="notes", k=3)
    assert len(r.invoke("otters")) == 3
    assert len(r.invoke("otters", k=1)) == 1
    assert len(r.invoke("otters", top_k=2)) == 2
    assert IndexplugRetriever(guard=backend, index="notes", top_k=1).k == 1
    with pytest.raises(ValueError, match="not both"):
        IndexplugRetriever(guard=backend, index="notes", k=1, top_k=2)


def test_filters_in_the_constructor_and_per_call(backend: indexplug.Guard) -> None:
    recent = IndexplugRetriever(guard=backend, index="notes", filters={"year": {"$gte": 2021}})
    assert {d.id for d in recent.invoke("otters")} == {"doc-1", "doc-2"}
    r = IndexplugRetriever(guard=backend, index="notes")
    assert [d.id for d in r.invoke("otters", filter={"tags": "fur"})] == ["doc-2"]
    assert [d.id for d in r.invoke("otters", filters={"year": {"$lt": 2020}})] == ["doc-0"]
    # a per-call filter replaces the constructor's
    assert [d.id for d in recent.invoke("otters", filters={"year": 2019})] == ["doc-0"]
    with pytest.raises(indexplug.InvalidRequest, match="no exact translation"):
        r.invoke("otters", filter=lambda d: True)
    with pytest.raises(indexplug.InvalidRequest, match="operator"):
        r.invoke("otters", filters={"year": {"$near": 3}})
    with pytest.raises(indexplug.InvalidRequest, match="search_type"):
        r.invoke("otters", search_type="mmr")


def test_no_match_is_an_empty_list_but_failures_raise(backend: indexplug.Guard) -> None:
    assert IndexplugRetriever(guard=backend, index="notes").invoke("quantum chromodynamics") == []
    assert IndexplugRetriever(guard=backend, index="nothing-here").invoke("otters") == []
    with pytest.raises(indexplug.IndexEmptyError):
        IndexplugRetriever(guard=backend, index="nothing-here", empty_is_error=True).invoke("x")


def test_a_reserved_key_stored_outside_the_adapter_is_refused_not_clobbered() -> None:
    b = indexplug.open_backend("sqlite-fts5")
    p = indexplug.Passage.create("Otters float.", "file:///x", metadata={NAMESPACE: "theirs"})
    b.add("raw", [p])
    with pytest.raises(ReservedMetadataKey, match="reserved"):
        IndexplugRetriever(guard=b, index="raw").invoke("otters")


@pytest.mark.asyncio
async def test_async_honours_k_and_filters(backend: indexplug.Guard) -> None:
    r = IndexplugRetriever(guard=backend, index="notes", k=3)
    assert len(await r.ainvoke("otters")) == 3
    assert len(await r.ainvoke("otters", k=1)) == 1
    docs = await r.ainvoke("otters", filters={"year": {"$gte": 2023}})
    assert [d.id for d in docs] == ["doc-2"]
    assert await IndexplugRetriever(guard=backend, index="nothing-here").ainvoke("otters") == []
    with pytest.raises(indexplug.IndexEmptyError):
        strict = IndexplugRetriever(guard=backend, index="nothing-here", empty_is_error=True)
        await strict.ainvoke("otters")


class _Slow:
    """sqlite-fts5 whose searches take ``delay`` seconds (a slow server, say)."""

    def __init__(self, inner: Any, delay: float) -> None:
        self._inner, self._delay = inner, delay

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def search(self, *args: Any, **kwargs: Any) -> Any:
        time.sleep(self._delay)
        return self._inner.search(*args, **kwargs)


async def _ticks_while(coro: Any) -> tuple[Any, int]:
    """What ``coro`` answers, and how often another task ran meanwhile (every 10 ms)."""
    done = asyncio.Event()
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while not done.is_set():
            await asyncio.sleep(0.01)
            ticks += 1

    async def run() -> Any:
        try:
            return await coro
        finally:
            done.set()

    answer, _ = await asyncio.gather(run(), ticker())
    return answer, ticks


@pytest.mark.asyncio
async def test_async_does_not_block_the_event_loop(backend: indexplug.Guard) -> None:
    slow = indexplug.Guard(_Slow(backend.backend, 0.5), plugin="sqlite-fts5")  # type: ignore[arg-type]
    r = IndexplugRetriever(guard=slow, index="notes", k=2, deadline_s=30)
    docs, ticks = await _ticks_while(r.ainvoke("otters"))
    assert len(docs) == 2
    # a blocked loop would let the ticker run once at most during the half-second search
    assert ticks >= 10


class _Down:
    name = "down"
    description = "never ready"
    score_scale = indexplug.ScoreScale(name="x")
    capabilities = indexplug.Capabilities()

    def readiness(self) -> indexplug.Readiness:
        return indexplug.Readiness.no("server at 127.0.0.1:1 refused the connection")


def test_unavailable_raises_a_typed_error() -> None:
    r = IndexplugRetriever(guard=indexplug.Guard(_Down()), index="notes")  # type: ignore[arg-type]
    with pytest.raises(indexplug.IndexUnavailableError, match="refused"):
        r.invoke("otters")


def _corrupt(home: Path, index: str) -> None:
    folder = home / "sqlite-fts5"
    for extra in folder.glob(f"{index}.sqlite-*"):
        extra.unlink()
    (folder / f"{index}.sqlite").write_bytes(b"not a database, " * 512)


@pytest.mark.asyncio
async def test_a_corrupted_index_raises_index_failed_sync_and_async(
    backend: indexplug.Guard, _home: Path
) -> None:
    backend.close()
    _corrupt(_home, "notes")
    r = IndexplugRetriever(guard=indexplug.open_backend("sqlite-fts5"), index="notes")
    with pytest.raises(indexplug.IndexFailedError, match="not an SQLite index") as sync:
        r.invoke("otters")
    assert (
        isinstance(sync.value.outcome, indexplug.IndexFailed) and sync.value.code == "INDEX_FAILED"
    )
    with pytest.raises(indexplug.IndexFailedError, match="not an SQLite index"):
        await r.ainvoke("otters")


def test_a_closed_port_raises_index_unavailable() -> None:
    r = IndexplugRetriever.from_backend(
        "chroma",
        "notes",
        {"mode": "server", "host": "127.0.0.1", "port": 1, "embedder": "hashing:default"},
        deadline_s=10,
    )
    with pytest.raises(indexplug.IndexUnavailableError, match="did not answer") as err:
        r.invoke("otters")
    assert isinstance(err.value.outcome, indexplug.IndexUnavailable) and err.value.outcome.message


def test_from_config_opens_an_indexplug_toml_index(
    backend: indexplug.Guard, tmp_path: Path
) -> None:
    config = tmp_path / "indexplug.toml"
    config.write_text('[indexes.notes]\nbackend = "sqlite-fts5"\n', "utf-8")
    r = IndexplugRetriever.from_config("notes", config, k=1)
    assert [d.id for d in r.invoke("lava")] == ["doc-3"]


def test_guard_is_the_one_name_and_backend_still_works_deprecated() -> None:
    """Every adapter calls the indexplug.Guard it wraps ``guard``; the retriever's older
    ``backend=`` keyword and attribute keep working, with a DeprecationWarning."""
    guard = indexplug.open_backend("sqlite-fts5")
    guard.add("named", [indexplug.Passage.create("Otters hold hands.", "mem://o", key="o")])
    r = IndexplugRetriever(guard=guard, index="named", k=1)
    assert r.guard is guard and [d.id for d in r.invoke("otters")] == ["o"]
    with pytest.warns(DeprecationWarning, match="guard="):
        old = IndexplugRetriever(backend=guard, index="named", k=1)
    assert old.guard is guard and [d.id for d in old.invoke("otters")] == ["o"]
    with pytest.warns(DeprecationWarning, match="guard="):
        assert old.backend is guard
    with pytest.raises(ValueError, match=r"guard=\.\.\. only"):
        IndexplugRetriever(guard=guard, backend=guard, index="named")
    guard.close()
