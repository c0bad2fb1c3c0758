"""IndexplugRetriever with the real llama-index-core, on sqlite-fts5 and chroma (``guard``), over
passages written by indexplug itself (not by the vector store)."""

from __future__ import annotations

import indexplug
import pytest
from indexplug_llamaindex import IndexplugRetriever, MetadataRefused, UnsupportedFilter
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import MetadataMode
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)
from llamaindex_ticker import ticking

OTTERS = indexplug.Passage.create(
    "Otters hold hands while sleeping.",
    "file:///o.md",
    start=10,
    end=43,
    key="doc-otters",
    # user keys with the names the adapter once wrote over: they come back as written
    metadata={"source": "field notes", "start": "dawn", "end": "dusk", "rank": "A", "year": 2019},
)
LAVA = indexplug.Passage.create(
    "Volcanoes erupt molten lava.", "file:///v.md", metadata={"year": 2023, "topic": "geology"}
)
BASALT = indexplug.Passage.create(
    "Lava cools into basalt.", "file:///v.md", start=29, metadata={"year": 2020, "topic": "geology"}
)


@pytest.fixture
def backend(guard: indexplug.Guard) -> indexplug.Guard:
    out = guard.add("notes", [OTTERS, LAVA, BASALT])
    assert isinstance(out, indexplug.Indexed) and out.added == 3
    return guard


def test_hits_become_nodes_with_user_metadata_untouched(backend: indexplug.Guard) -> None:
    found = IndexplugRetriever(backend, "notes", similarity_top_k=1).retrieve(
        "otters holding hands"
    )
    assert len(found) == 1
    node = found[0].node
    assert node.get_content().startswith("Otters") and found[0].score is not None
    assert node.node_id == OTTERS.id
    assert {k: v for k, v in node.metadata.items() if k != "indexplug"} == dict(OTTERS.metadata)
    own = node.metadata["indexplug"]
    assert own["uri"] == "file:///o.md" and (own["start"], own["end"]) == (10, 43)
    assert own["passage_id"] == OTTERS.id and own["key"] == "doc-otters" and own["rank"] == 1
    assert own["untrusted"] is True and own["score_scale"] == backend.score_scale.name
    # the key is the passage's document; a passage without a key is of its uri
    assert node.ref_doc_id == "doc-otters"
    assert node.source_node.node_id == "doc-otters"  # type: ignore[union-attr]
    lava = IndexplugRetriever(backend, "notes", similarity_top_k=1).retrieve("volcanoes erupt")
    assert lava[0].node.node_id == LAVA.id and lava[0].node.ref_doc_id == "file:///v.md"


def test_adapter_fields_are_out_of_the_llm_and_embed_views(backend: indexplug.Guard) -> None:
    node = IndexplugRetriever(backend, "notes", similarity_top_k=1).retrieve("otters")[0].node
    assert "indexplug" in node.excluded_llm_metadata_keys
    assert "indexplug" in node.excluded_embed_metadata_keys
    for mode in (MetadataMode.LLM, MetadataMode.EMBED):
        content = node.get_content(metadata_mode=mode)
        assert "source: field notes" in content and "rank: A" in content
        for word in ("indexplug", "score_scale", "untrusted", "file:///o.md", OTTERS.id):
            assert word not in content


def test_similarity_top_k_and_its_older_name(backend: indexplug.Guard) -> None:
    assert len(IndexplugRetriever(backend, "notes", similarity_top_k=1).retrieve("lava")) == 1
    assert len(IndexplugRetriever(backend, "notes", top_k=2).retrieve("lava")) == 2
    assert IndexplugRetriever(backend, "notes", top_k=3).similarity_top_k == 3
    with pytest.raises(indexplug.InvalidRequest, match="similarity_top_k"):
        IndexplugRetriever(backend, "notes", similarity_top_k=1, top_k=2)


def test_filters_as_metadata_filters_or_indexplug_json(backend: indexplug.Guard) -> None:
    geology_after_2021 = MetadataFilters(
        filters=[
            MetadataFilter(key="topic", value="geology"),
            MetadataFilter(key="year", operator=FilterOperator.GTE, value=2021),
        ],
        condition=FilterCondition.AND,
    )
    r = IndexplugRetriever(backend, "notes", similarity_top_k=5, filters=geology_after_2021)
    assert [n.node.node_id for n in r.retrieve("lava")] == [LAVA.id]
    r = IndexplugRetriever(backend, "notes", similarity_top_k=5, filters={"year": {"$lt": 2021}})
    assert {n.node.node_id for n in r.retrieve("lava basalt otters")} <= {OTTERS.id, BASALT.id}
    assert BASALT.id in {n.node.node_id for n in r.retrieve("lava basalt")}
    with pytest.raises(UnsupportedFilter):
        IndexplugRetriever(
            backend,
            "notes",
            filters=MetadataFilters(
                filters=[MetadataFilter(key="topic", operator="text_match", value="geo")]
            ),
        )


def test_no_match_is_empty_and_failures_raise(backend: indexplug.Guard) -> None:
    if backend.name == "sqlite-fts5":  # a dense backend always finds its nearest passages
        assert IndexplugRetriever(backend, "notes").retrieve("quantum chromodynamics") == []
    none_pass = IndexplugRetriever(backend, "notes", filters={"year": 1900})
    assert none_pass.retrieve("lava") == []
    assert IndexplugRetriever(backend, "nothing-here").retrieve("otters") == []
    with pytest.raises(indexplug.IndexEmptyError):
        IndexplugRetriever(backend, "nothing-here", empty_is_error=True).retrieve("x")
    with pytest.raises(indexplug.InvalidIndexName):
        IndexplugRetriever(backend, "../etc")


def test_query_engine_with_mock_llm(backend: indexplug.Guard) -> None:
    retriever = IndexplugRetriever(backend, "notes", similarity_top_k=1)
    engine = RetrieverQueryEngine.from_args(retriever, llm=MockLLM())
    response = engine.query("why do otters hold hands")
    prompt = str(response)  # MockLLM answers with the prompt it was given
    assert "Otters hold hands while sleeping." in prompt and "source: field notes" in prompt
    assert "score_scale" not in prompt and "untrusted" not in prompt
    assert response.source_nodes[0].node.node_id == OTTERS.id


@pytest.mark.asyncio
async def test_aretrieve_awaits_the_guard_and_leaves_the_loop_free(
    backend: indexplug.Guard,
) -> None:
    retriever = IndexplugRetriever(backend, "notes", similarity_top_k=2, filters={"year": 2019})
    async with ticking() as ticks:
        before = ticks.count
        found = await retriever.aretrieve("otters")
    assert [n.node.node_id for n in found] == [OTTERS.id]
    assert ticks.count > before
    assert await IndexplugRetriever(backend, "nothing-here").aretrieve("otters") == []
    with pytest.raises(indexplug.IndexEmptyError):
        await IndexplugRetriever(backend, "nothing-here", empty_is_error=True).aretrieve("x")


def test_a_passage_with_its_own_indexplug_key_is_not_overwritten(guard: indexplug.Guard) -> None:
    mine = indexplug.Passage.create(
        "Owls hunt at night.", "file:///owls.md", metadata={"indexplug": "x"}
    )
    guard.add("owls", [mine])
    with pytest.raises(MetadataRefused, match="will not overwrite"):
        IndexplugRetriever(guard, "owls").retrieve("owls")


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
    with pytest.raises(indexplug.IndexFailedError, match="socket closed") as info:
        r.retrieve("otters")
    assert info.value.outcome.code == "INDEX_FAILED"  # type: ignore[attr-defined]


def test_guard_is_the_one_name_and_backend_still_works_deprecated(
    backend: indexplug.Guard,
) -> None:
    """Every adapter calls the indexplug.Guard it wraps ``guard``; the retriever's older
    ``backend=`` keyword and attribute keep working, with a DeprecationWarning."""
    r = IndexplugRetriever(guard=backend, index="notes", similarity_top_k=1)
    assert r.guard is backend and len(r.retrieve("otters")) == 1
    with pytest.warns(DeprecationWarning, match="guard="):
        old = IndexplugRetriever(backend=backend, index="notes", similarity_top_k=1)
    assert old.guard is backend and len(old.retrieve("otters")) == 1
    with pytest.warns(DeprecationWarning, match="guard="):
        assert old.backend is backend
    with pytest.raises(TypeError, match=r"guard=\.\.\. only"):
        IndexplugRetriever(backend, "notes", backend=backend)
    with pytest.raises(TypeError, match="guard="):
        IndexplugRetriever(index="notes")
