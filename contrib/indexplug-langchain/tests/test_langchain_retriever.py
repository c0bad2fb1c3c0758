"""The LangChain retriever, with the real langchain-core and a real backend."""

from __future__ import annotations

import indexplug
import pytest
from indexplug_langchain import IndexplugRetriever
from langchain_core.runnables import RunnableLambda


@pytest.fixture
def backend(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("INDEXPLUG_HOME", str(tmp_path))
    b = indexplug.open_backend("sqlite-fts5")
    b.add(
        "notes",
        [
            indexplug.Passage.create("Otters hold hands while sleeping.", "file:///o.md"),
            indexplug.Passage.create("Volcanoes erupt molten lava.", "file:///v.md"),
        ],
    )
    return b


def test_hits_become_documents_and_chain(backend) -> None:  # type: ignore[no-untyped-def]
    r = IndexplugRetriever(backend=backend, index="notes", top_k=2)
    docs = r.invoke("why do otters hold hands")
    assert docs[0].page_content.startswith("Otters")
    assert docs[0].metadata["rank"] == 1 and docs[0].metadata["score_scale"] == "fts5_bm25"
    assert docs[0].metadata["untrusted"] is True
    chain = r | RunnableLambda(lambda ds: [d.metadata["source"] for d in ds])
    assert chain.invoke("lava") == ["file:///v.md"]


def test_no_match_is_an_empty_list_but_failures_raise(backend) -> None:  # type: ignore[no-untyped-def]
    assert IndexplugRetriever(backend=backend, index="notes").invoke("quantum chromodynamics") == []
    with pytest.raises(indexplug.IndexEmptyError):
        IndexplugRetriever(backend=backend, index="nothing-here").invoke("otters")
    assert (
        IndexplugRetriever(backend=backend, index="nothing-here", empty_is_error=False).invoke("x")
        == []
    )


class _Down:
    name = "down"
    description = "never ready"
    score_scale = indexplug.ScoreScale(name="x")
    capabilities = indexplug.Capabilities()

    def readiness(self):  # type: ignore[no-untyped-def]
        return indexplug.Readiness.no("server at 127.0.0.1:1 refused the connection")


def test_unavailable_raises_a_typed_error() -> None:
    r = IndexplugRetriever(backend=indexplug.Guard(_Down()), index="notes")  # type: ignore[arg-type]
    with pytest.raises(indexplug.IndexUnavailableError, match="refused"):
        r.invoke("otters")
