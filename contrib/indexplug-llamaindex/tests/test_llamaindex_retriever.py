"""The LlamaIndex retriever, with the real llama-index-core and a real backend."""

from __future__ import annotations

import indexplug
import pytest
from indexplug_llamaindex import IndexplugRetriever
from llama_index.core.query_engine import RetrieverQueryEngine  # noqa: F401  (imports cleanly)


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


def test_hits_become_nodes(backend) -> None:  # type: ignore[no-untyped-def]
    nodes = IndexplugRetriever(backend, "notes", top_k=2).retrieve("otters holding hands")
    assert nodes[0].node.get_content().startswith("Otters")
    assert nodes[0].score is not None and nodes[0].node.metadata["source"] == "file:///o.md"
    assert (
        nodes[0].node.node_id
        == indexplug.Passage.create("Otters hold hands while sleeping.", "file:///o.md").id
    )


def test_no_match_is_empty_and_failures_raise(backend) -> None:  # type: ignore[no-untyped-def]
    assert IndexplugRetriever(backend, "notes").retrieve("quantum chromodynamics") == []
    with pytest.raises(indexplug.IndexEmptyError):
        IndexplugRetriever(backend, "nothing-here").retrieve("otters")
    with pytest.raises(indexplug.InvalidIndexName):
        IndexplugRetriever(backend, "../etc")


def test_a_raising_backend_surfaces_as_index_failed() -> None:
    class Broken:
        name = "broken"
        description = "raises"
        score_scale = indexplug.ScoreScale(name="x")
        capabilities = indexplug.Capabilities()

        def readiness(self):  # type: ignore[no-untyped-def]
            return indexplug.Readiness.yes()

        def search(self, *a, **k):  # type: ignore[no-untyped-def]
            raise ConnectionError("socket closed")

    r = IndexplugRetriever(indexplug.Guard(Broken()), "notes")  # type: ignore[arg-type]
    with pytest.raises(indexplug.IndexFailedError, match="socket closed"):
        r.retrieve("otters")
