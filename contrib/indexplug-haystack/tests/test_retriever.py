"""The retriever component: scores, the adapter's fields, filters, pipelines, failures."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import indexplug
import pytest
from haystack import Pipeline
from haystack.dataclasses import Document
from haystack.errors import FilterError
from indexplug_haystack import IndexplugDocumentStore, IndexplugRetriever

DOCS = [
    Document(
        id="otters",
        content="Sea otters hold hands while they sleep.",
        meta={"topic": "otters", "source": "mine", "rank": "user", "year": 2019},
    ),
    Document(
        id="beavers",
        content="Beavers build dams; otters visit them.",
        meta={"topic": "beavers", "year": 2021, "when": "2021-05-01"},
    ),
    Document(id="owls", content="Owls hunt at night.", meta={"topic": "owls", "year": 2023}),
]


def make_store(backend: str) -> IndexplugDocumentStore:
    options = {"embedder": "hashing:default"} if backend == "chroma" else {}
    store = IndexplugDocumentStore("hs", backend=backend, options=options)
    store.write_documents(DOCS)
    return store


BACKENDS = ["sqlite-fts5", "chroma"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_hits_carry_score_and_namespaced_fields_without_clobbering(backend: str) -> None:
    docs = IndexplugRetriever(make_store(backend), top_k=2).run("otters hold hands")["documents"]
    assert 1 <= len(docs) <= 2 and docs[0].id == "otters"
    first = docs[0]
    assert first.score is not None
    assert first.content == DOCS[0].content
    assert {k: v for k, v in first.meta.items() if k != "indexplug"} == DOCS[0].meta
    fields = first.meta["indexplug"]
    assert fields["rank"] == 1 and fields["untrusted"] is True
    assert len(fields["passage_id"]) == 64 and fields["score_scale"]
    assert first.meta["source"] == "mine" and first.meta["rank"] == "user"


@pytest.mark.parametrize("backend", BACKENDS)
def test_top_k_and_filters(backend: str) -> None:
    retriever = IndexplugRetriever(make_store(backend), top_k=3)
    assert len(retriever.run("otters", top_k=1)["documents"]) == 1
    only = retriever.run(
        "otters", filters={"field": "meta.topic", "operator": "==", "value": "beavers"}
    )["documents"]
    assert [d.id for d in only] == ["beavers"]
    # an ordering on an ISO date is checked on the hits, exactly
    dated = retriever.run(
        "otters",
        filters={
            "operator": "AND",
            "conditions": [
                {"field": "meta.year", "operator": ">", "value": 2020},
                {"field": "meta.topic", "operator": "!=", "value": "owls"},
            ],
        },
    )["documents"]
    assert [d.id for d in dated] == ["beavers"]
    with pytest.raises(FilterError):
        retriever.run("otters", filters={"field": "meta.year", "operator": ">", "value": "x"})


def test_filter_policy_merge_keeps_the_init_filters() -> None:
    store = make_store("sqlite-fts5")
    init = {"field": "meta.topic", "operator": "!=", "value": "otters"}
    merge = IndexplugRetriever(store, filters=init, filter_policy="merge")
    replace = IndexplugRetriever(store, filters=init)
    runtime = {"field": "meta.year", "operator": "<=", "value": 2021}
    assert [d.id for d in merge.run("otters", filters=runtime)["documents"]] == ["beavers"]
    got = {d.id for d in replace.run("otters", filters=runtime)["documents"]}
    assert got == {"otters", "beavers"}


def test_no_match_and_an_empty_store_are_empty_lists() -> None:
    retriever = IndexplugRetriever(make_store("sqlite-fts5"))
    assert retriever.run("zebras")["documents"] == []
    empty = IndexplugRetriever(IndexplugDocumentStore("nothing", backend="sqlite-fts5"))
    assert empty.run("otters")["documents"] == []
    # the typed answer stays reachable: an empty index is not "no match"
    assert empty.outcome("otters").code == "INDEX_EMPTY"
    assert retriever.outcome("zebras").code == "NO_MATCH"
    assert retriever.outcome("otters").code == "SEARCHED"


def test_bad_top_k_is_refused() -> None:
    retriever = IndexplugRetriever(make_store("sqlite-fts5"))
    with pytest.raises(ValueError):
        retriever.run("otters", top_k=-1)
    assert retriever.run("otters", top_k=0) == {"documents": []}
    with pytest.raises(ValueError):
        IndexplugRetriever(retriever.document_store, top_k=-1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_pipeline_serialised_and_loaded_again_runs_the_same(backend: str) -> None:
    pipe = Pipeline()
    pipe.add_component("retriever", IndexplugRetriever(make_store(backend), top_k=2))
    first = pipe.run({"retriever": {"query": "otters"}})["retriever"]["documents"]
    assert first and first[0].meta["indexplug"]["rank"] == 1
    data = pipe.to_dict()
    params = data["components"]["retriever"]["init_parameters"]
    assert params["document_store"]["init_parameters"]["backend"] == backend
    # Haystack loads only classes of modules the caller trusts: name the adapter's
    again = Pipeline.from_dict(data, allowed_modules=["indexplug_haystack"])
    assert again.to_dict() == data
    second = again.run({"retriever": {"query": "otters"}})["retriever"]["documents"]
    assert [(d.id, d.score) for d in second] == [(d.id, d.score) for d in first]
    loaded = Pipeline.loads(pipe.dumps(), allowed_modules=["indexplug_haystack"])
    third = loaded.run({"retriever": {"query": "otters"}})["retriever"]["documents"]
    assert [d.id for d in third] == [d.id for d in first]


def test_run_async_answers_as_run() -> None:
    retriever = IndexplugRetriever(make_store("sqlite-fts5"), top_k=2)
    sync = retriever.run("otters")["documents"]
    out: dict[str, Any] = asyncio.run(retriever.run_async("otters"))
    assert out["documents"] == sync


def test_a_corrupted_index_raises_the_typed_error_not_an_empty_list() -> None:
    store = IndexplugDocumentStore("broken", backend="sqlite-fts5")
    store.write_documents(DOCS)
    path = Path(store.guard.status("broken").details["path"])  # type: ignore[union-attr]
    store.guard.close()
    for extra in ("-wal", "-shm"):
        Path(f"{path}{extra}").unlink(missing_ok=True)
    path.write_bytes(b"garbage, not SQLite " * 512)
    retriever = IndexplugRetriever(IndexplugDocumentStore("broken", backend="sqlite-fts5"))
    with pytest.raises(indexplug.IndexFailedError) as err:
        retriever.run("otters")
    assert err.value.code == "INDEX_FAILED"


def test_a_filter_checked_on_the_hits_asks_for_more_until_top_k_pass() -> None:
    retriever = IndexplugRetriever(make_store("sqlite-fts5"), top_k=1)
    newer = {"field": "meta.year", "operator": ">", "value": 2020}
    # the best hit for the query (otters, 2019) fails the filter: the search is widened
    assert retriever.run("otters hold hands", top_k=1)["documents"][0].id == "otters"
    docs = retriever.run("otters hold hands", filters=newer)["documents"]
    assert [d.id for d in docs] == ["beavers"]
    assert docs[0].meta["indexplug"]["rank"] == 2


def test_haystacks_document_writer_indexes_into_the_store() -> None:
    from haystack.components.writers import DocumentWriter
    from haystack.document_stores.types import DuplicatePolicy

    store = IndexplugDocumentStore("hs", backend="sqlite-fts5")
    indexing = Pipeline()
    indexing.add_component("writer", DocumentWriter(store, policy=DuplicatePolicy.OVERWRITE))
    data = indexing.to_dict()
    loaded = Pipeline.from_dict(data, allowed_modules=["indexplug_haystack"])
    written = loaded.run({"writer": {"documents": DOCS}})["writer"]["documents_written"]
    assert written == len(DOCS)
    again = loaded.run({"writer": {"documents": DOCS[:1]}})["writer"]["documents_written"]
    assert again == 1 and store.count_documents() == len(DOCS)
    assert store.filter_documents({"field": "id", "operator": "==", "value": "otters"}) == DOCS[:1]
