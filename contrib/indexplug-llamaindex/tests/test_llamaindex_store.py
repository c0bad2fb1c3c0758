"""IndexplugVectorStore with the real llama-index-core, on sqlite-fts5 and chroma (``guard``)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import indexplug
import pytest
from indexplug_llamaindex import (
    IndexplugVectorStore,
    MetadataRefused,
    MissingCapability,
    NodeRefused,
    UnsupportedFilter,
    UnsupportedQuery,
)
from llama_index.core import Document, StorageContext, VectorStoreIndex
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.llms import MockLLM
from llama_index.core.schema import (
    ImageNode,
    MetadataMode,
    NodeRelationship,
    RelatedNodeInfo,
    TextNode,
)
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
)
from llamaindex_ticker import ticking

F = FilterOperator
ADAPTER_WORDS = ("passage_id", "score_scale", "untrusted", "indexplug", "rank")


def make_node(nid: str, text: str, doc: str, **metadata: Any) -> TextNode:
    node = TextNode(id_=nid, text=text, metadata=metadata)
    node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=doc)
    return node


def nodes() -> list[TextNode]:
    return [
        make_node(
            "a",
            "Fact one: otters hold hands while sleeping.",
            "doc-otters",
            animal="otter",
            year=2019,
            tags=["water", "mammal"],
            weight=4.5,
            note="cute",
        ),
        make_node(
            "b",
            "Fact two: sea otters use rocks as tools.",
            "doc-otters",
            animal="otter",
            year=2021,
            tags=["water", "tools"],
            weight=30.0,
        ),
        make_node(
            "c",
            "Fact three: volcanoes erupt molten lava.",
            "doc-volcano",
            topic="geology",
            year=2023,
            tags=["fire"],
            note="",
        ),
        make_node(
            "d", "Fact four: lava cools into basalt.", "doc-volcano", topic="geology", year=2020
        ),
    ]


@pytest.fixture
def store(guard: indexplug.Guard) -> IndexplugVectorStore:
    s = IndexplugVectorStore(guard, "notes")
    assert s.add(nodes()) == ["a", "b", "c", "d"]
    return s


def ids(result_nodes: Any) -> set[str]:
    return {n.node_id for n in result_nodes}


def ask(store: IndexplugVectorStore, text: str = "fact", k: int = 10, **kw: Any) -> Any:
    return store.query(VectorStoreQuery(query_str=text, similarity_top_k=k, **kw))


def one(key: str, op: FilterOperator, value: Any) -> MetadataFilters:
    return MetadataFilters(filters=[MetadataFilter(key=key, operator=op, value=value)])


FILTER_CASES: list[tuple[str, MetadataFilters, set[str]]] = [
    ("EQ", one("animal", F.EQ, "otter"), {"a", "b"}),
    ("NE", one("animal", F.NE, "otter"), {"c", "d"}),
    ("GT", one("year", F.GT, 2020), {"b", "c"}),
    ("GTE", one("year", F.GTE, 2020), {"b", "c", "d"}),
    ("LT", one("year", F.LT, 2020), {"a"}),
    ("LTE", one("year", F.LTE, 2020), {"a", "d"}),
    ("GT-float", one("weight", F.GT, 5.0), {"b"}),
    ("IN", one("year", F.IN, [2019, 2023]), {"a", "c"}),
    ("NIN", one("animal", F.NIN, ["otter"]), {"c", "d"}),
    ("CONTAINS", one("tags", F.CONTAINS, "water"), {"a", "b"}),
    ("ANY", one("tags", F.ANY, ["tools", "fire"]), {"b", "c"}),
    ("ALL", one("tags", F.ALL, ["water", "mammal"]), {"a"}),
    ("IS_EMPTY", one("note", F.IS_EMPTY, None), {"b", "c", "d"}),
    (
        "AND",
        MetadataFilters(
            filters=[
                MetadataFilter(key="animal", value="otter"),
                MetadataFilter(key="year", operator=F.GT, value=2020),
            ]
        ),
        {"b"},
    ),
    (
        "OR",
        MetadataFilters(
            filters=[
                MetadataFilter(key="year", value=2019),
                MetadataFilter(key="topic", value="geology"),
            ],
            condition=FilterCondition.OR,
        ),
        {"a", "c", "d"},
    ),
    (
        "NOT",
        MetadataFilters(
            filters=[
                MetadataFilter(key="year", operator=F.LT, value=2020),
                MetadataFilter(key="topic", value="geology"),
            ],
            condition=FilterCondition.NOT,
        ),
        {"b"},
    ),
    (
        "nested",
        MetadataFilters(
            filters=[
                MetadataFilter(key="topic", value="geology"),
                MetadataFilters(
                    filters=[
                        MetadataFilter(key="year", operator=F.LT, value=2021),
                        MetadataFilter(key="tags", operator=F.CONTAINS, value="fire"),
                    ],
                    condition=FilterCondition.OR,
                ),
            ]
        ),
        {"c", "d"},
    ),
]


@pytest.mark.parametrize(
    ("name", "filters", "expected"), FILTER_CASES, ids=[c[0] for c in FILTER_CASES]
)
def test_each_filter_operator_and_condition(
    store: IndexplugVectorStore, name: str, filters: MetadataFilters, expected: set[str]
) -> None:
    assert ids(ask(store, filters=filters).nodes) == expected
    assert ids(store.get_nodes(filters=filters)) == expected


SCALAR_CASES = [c for c in FILTER_CASES if c[0] not in ("CONTAINS", "ANY", "ALL", "nested")]


@pytest.mark.parametrize(
    ("name", "filters", "expected"), SCALAR_CASES, ids=[c[0] for c in SCALAR_CASES]
)
def test_on_scalar_fields_the_meaning_is_llamaindex_own(
    name: str, filters: MetadataFilters, expected: set[str]
) -> None:
    """LlamaIndex's in-memory filter (the reference its SimpleVectorStore uses) selects the
    same nodes as the cases above, where no field is a list."""
    from llama_index.core.vector_stores.utils import build_metadata_filter_fn

    metadata = {n.node_id: n.metadata for n in nodes()}
    keep = build_metadata_filter_fn(lambda nid: metadata[nid], filters)
    assert {nid for nid in metadata if keep(nid)} == expected


@pytest.mark.parametrize(
    "filters",
    [
        one("note", F.TEXT_MATCH, "cu"),
        one("note", F.TEXT_MATCH_INSENSITIVE, "CU"),
        one("animal", F.EQ, None),
        one("animal", F.EQ, ["otter"]),
        one("year", F.IN, 2019),
        MetadataFilters(filters=[MetadataFilters(filters=[])]),
    ],
)
def test_filters_without_an_exact_translation_are_refused(
    store: IndexplugVectorStore, filters: MetadataFilters
) -> None:
    with pytest.raises(UnsupportedFilter) as info:
        ask(store, filters=filters)
    assert isinstance(info.value, ValueError) and info.value.field == "filters"


def test_indexplug_filter_json_passes_through(store: IndexplugVectorStore) -> None:
    assert ids(store.get_nodes(filters={"year": {"$gte": 2021}})) == {"b", "c"}  # type: ignore[arg-type]


def test_similarity_top_k_node_ids_and_doc_ids(store: IndexplugVectorStore) -> None:
    assert len(ask(store, k=2).nodes) == 2
    assert len(ask(store, k=1).nodes) == 1
    assert ids(ask(store, node_ids=["a", "c"]).nodes) == {"a", "c"}
    assert ids(ask(store, doc_ids=["doc-volcano"]).nodes) == {"c", "d"}
    assert ids(ask(store, node_ids=[]).nodes) == {"a", "b", "c", "d"}  # as_retriever() sends []
    both = ask(store, node_ids=["a", "c"], filters=one("year", F.GT, 2020))
    assert ids(both.nodes) == {"c"}
    result = ask(store, "otters hold hands while sleeping", k=1)
    assert result.ids == ["a"] and result.similarities and len(result.similarities) == 1


def test_nodes_round_trip_with_ref_doc_id_and_relationships(store: IndexplugVectorStore) -> None:
    written = {n.node_id: n for n in nodes()}
    got = store.get_nodes(node_ids=["c", "a", "zz"])
    assert [n.node_id for n in got] == ["c", "a"]
    for node in got:
        assert node == written[node.node_id]  # text, metadata, relationships, everything
    hit = ask(store, "otters hold hands while sleeping", k=1).nodes[0]
    assert hit.ref_doc_id == "doc-otters"
    assert hit.source_node.node_id == "doc-otters"  # type: ignore[union-attr]
    user = {k: v for k, v in hit.metadata.items() if k != "indexplug"}
    assert user == written["a"].metadata
    assert hit.metadata["indexplug"]["rank"] == 1 and hit.metadata["indexplug"]["untrusted"]


def test_adapter_fields_never_reach_the_llm_or_the_embedder(store: IndexplugVectorStore) -> None:
    hit = ask(store, "otters hold hands while sleeping", k=1).nodes[0]
    assert set(hit.metadata["indexplug"]) >= {"passage_id", "rank", "score_scale", "untrusted"}
    for mode in (MetadataMode.LLM, MetadataMode.EMBED):
        content = hit.get_content(metadata_mode=mode)
        assert "animal: otter" in content and "otters hold hands" in content
        assert not any(word in content for word in ADAPTER_WORDS), content
    assert "score_scale" in hit.get_content(metadata_mode=MetadataMode.ALL)


def test_adding_a_node_again_replaces_it(store: IndexplugVectorStore) -> None:
    new = make_node("a", "Fact one, revised: otters float on their backs.", "doc-otters", year=1)
    assert store.add([new]) == ["a"]
    got = store.get_nodes(node_ids=["a"])
    assert len(got) == 1 and got[0] == new
    assert ids(store.get_nodes()) == {"a", "b", "c", "d"}
    assert ids(ask(store, "sleeping hands", filters=one("year", F.EQ, 2019)).nodes) == set()


def test_a_node_twice_in_one_add_keeps_the_last(guard: indexplug.Guard) -> None:
    store = IndexplugVectorStore(guard, "notes")
    first = make_node("x", "Fact: the first version.", "doc-x")
    last = make_node("x", "Fact: the last version.", "doc-x")
    assert store.add([first, last]) == ["x", "x"]
    assert store.get_nodes() == [last]


def test_delete_by_ref_doc_id_removes_every_node_of_the_document(
    store: IndexplugVectorStore,
) -> None:
    store.delete("doc-otters")
    assert ids(store.get_nodes()) == {"c", "d"}
    assert ids(ask(store).nodes) == {"c", "d"}
    store.delete("doc-nothing")
    assert ids(store.get_nodes()) == {"c", "d"}


def test_delete_nodes_and_clear(store: IndexplugVectorStore) -> None:
    store.delete_nodes(node_ids=["a", "c"], filters=one("topic", F.EQ, "geology"))
    assert ids(store.get_nodes()) == {"a", "b", "d"}
    store.delete_nodes(node_ids=["b"])
    assert ids(store.get_nodes()) == {"a", "d"}
    store.clear()
    assert store.get_nodes() == [] and ask(store).nodes == []


def test_a_document_round_trips_and_is_its_own_source(store: IndexplugVectorStore) -> None:
    doc = Document(text="Fact five: penguins swim well.", id_="doc-birds", metadata={"n": [1, 2]})
    store.add([doc])
    got = store.get_nodes(node_ids=["doc-birds"])
    assert got == [doc] and isinstance(got[0], Document)
    store.delete("doc-birds")
    assert store.get_nodes(node_ids=["doc-birds"]) == []


def test_metadata_it_cannot_keep_as_is_is_refused(guard: indexplug.Guard) -> None:
    store = IndexplugVectorStore(guard, "notes")
    for metadata, key in [
        ({"indexplug": 1}, "indexplug"),
        ({"indexplug.node_id": "x"}, "indexplug.node_id"),
        ({"tags": {"a", "b"}}, "tags"),
        ({"nan": float("nan")}, "nan"),
        ({"deep": [1, {"raw": b"x"}]}, "deep"),
    ]:
        with pytest.raises(MetadataRefused) as info:
            store.add([TextNode(id_="x", text="some text", metadata=metadata)])
        assert info.value.key == key and isinstance(info.value, ValueError)
    with pytest.raises(NodeRefused):
        store.add([TextNode(id_="x", text="   ")])
    with pytest.raises(NodeRefused, match="ImageNode"):
        store.add([ImageNode(id_="x", text="a picture")])
    assert store.get_nodes() == []


def test_queries_it_cannot_answer_are_refused(store: IndexplugVectorStore) -> None:
    # (a query by embedding and MMR: test_llamaindex_vectors.py)
    with pytest.raises(UnsupportedQuery):
        store.query(VectorStoreQuery(similarity_top_k=2))
    with pytest.raises(UnsupportedQuery):
        store.query(VectorStoreQuery(query_str="x", mode=VectorStoreQueryMode.SPARSE))


def test_an_empty_store_answers_an_empty_result(guard: indexplug.Guard) -> None:
    store = IndexplugVectorStore(guard, "empty")
    assert ask(store).nodes == [] and store.get_nodes() == []
    assert store.query_outcome(VectorStoreQuery(query_str="x")).code == "INDEX_EMPTY"


def test_vector_store_index_retriever_and_query_engine(guard: indexplug.Guard) -> None:
    store = IndexplugVectorStore(guard, "notes")
    index = VectorStoreIndex.from_vector_store(store, embed_model=MockEmbedding(embed_dim=8))
    index.insert_nodes(nodes())
    index.insert(Document(text="Fact five: penguins cannot fly but swim well.", id_="doc-birds"))

    retriever = index.as_retriever(similarity_top_k=2)
    found = retriever.retrieve("otters hold hands while sleeping")
    assert len(found) == 2 and found[0].node.node_id == "a"
    assert found[0].node.ref_doc_id == "doc-otters" and found[0].score is not None

    filtered = index.as_retriever(similarity_top_k=5, filters=one("topic", F.EQ, "geology"))
    assert ids(n.node for n in filtered.retrieve("lava")) == {"c", "d"}

    engine = index.as_query_engine(llm=MockLLM(), similarity_top_k=1)
    response = engine.query("penguins swim")
    assert response.source_nodes[0].node.ref_doc_id == "doc-birds"
    prompt = str(response)  # MockLLM answers with the prompt it was given
    assert "penguins cannot fly" in prompt
    assert not any(word in prompt for word in ADAPTER_WORDS), prompt

    index.delete_ref_doc("doc-birds")
    assert "doc-birds" not in {n.ref_doc_id for n in store.get_nodes()}


@pytest.mark.asyncio
async def test_async_forms_do_not_block_the_event_loop(guard: indexplug.Guard) -> None:
    store = IndexplugVectorStore(guard, "notes")
    async with ticking() as ticks:
        before = ticks.count
        assert await store.async_add(nodes()) == ["a", "b", "c", "d"]
        after_add = ticks.count
        result = await store.aquery(
            VectorStoreQuery(query_str="fact", similarity_top_k=10, filters=one("year", F.GT, 2020))
        )
        after_query = ticks.count
        got = await store.aget_nodes(node_ids=["b"])
        await store.adelete("doc-volcano")
        left = await store.aget_nodes()
        await store.adelete_nodes(node_ids=["a"])
        final = await store.aget_nodes(filters=one("animal", F.EQ, "otter"))
    assert ids(result.nodes) == {"b", "c"}
    assert [n.node_id for n in got] == ["b"]
    assert ids(left) == {"a", "b"} and ids(final) == {"b"}
    assert after_add > before and after_query > after_add  # the loop ran while they waited


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_corrupted_sqlite_file_raises_index_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INDEXPLUG_HOME", str(tmp_path))
    store = IndexplugVectorStore.from_backend("sqlite-fts5", "notes")
    store.add(nodes())
    store.client.close()
    files = list(tmp_path.rglob("notes.sqlite"))
    assert len(files) == 1
    files[0].write_bytes(b"this is not a database" * 512)
    broken = IndexplugVectorStore.from_backend("sqlite-fts5", "notes")
    with pytest.raises(indexplug.IndexFailedError) as info:
        ask(broken)
    assert info.value.outcome.code == "INDEX_FAILED"  # type: ignore[attr-defined]
    with pytest.raises(indexplug.IndexFailedError):
        broken.add(nodes())


@pytest.mark.asyncio
async def test_a_closed_port_chroma_server_raises_index_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INDEXPLUG_HOME", str(tmp_path))
    store = IndexplugVectorStore.from_backend(
        "chroma",
        "notes",
        {
            "mode": "server",
            "host": "127.0.0.1",
            "port": _free_port(),
            "embedder": "hashing:default",
        },
        deadline_s=10,
    )
    with pytest.raises(indexplug.IndexUnavailableError):
        ask(store)
    with pytest.raises(indexplug.IndexUnavailableError):
        await store.aquery(VectorStoreQuery(query_str="fact"))
    with pytest.raises(indexplug.IndexUnavailableError):
        await store.async_add(nodes())


def test_a_backend_without_keys_is_refused_for_writes(tmp_path: Path) -> None:
    class NoKeys:
        name = "nokeys"
        capabilities = indexplug.Capabilities()

    store = IndexplugVectorStore(indexplug.Guard(NoKeys()), "notes")  # type: ignore[arg-type]
    with pytest.raises(MissingCapability, match="keys"):
        store.add(nodes())


def test_from_config_opens_an_index_of_indexplug_toml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INDEXPLUG_HOME", str(tmp_path))
    config = tmp_path / "indexplug.toml"
    config.write_text('[indexes.notes]\nbackend = "sqlite-fts5"\n', "utf-8")
    store = IndexplugVectorStore.from_config("notes", config)
    store.add(nodes())
    assert ids(ask(store, doc_ids=["doc-otters"]).nodes) == {"a", "b"}


def test_the_store_is_a_llamaindex_vector_store(store: IndexplugVectorStore) -> None:
    from llama_index.core.vector_stores.types import BasePydanticVectorStore

    assert isinstance(store, BasePydanticVectorStore)
    assert store.stores_text and not store.is_embedding_query
    assert store.client is not None and store.class_name() == "IndexplugVectorStore"
    index = VectorStoreIndex(
        nodes(),
        storage_context=StorageContext.from_defaults(vector_store=store),
        embed_model=MockEmbedding(embed_dim=8),
    )
    assert ids(index.as_retriever(similarity_top_k=10).retrieve("fact")) == {"a", "b", "c", "d"}
