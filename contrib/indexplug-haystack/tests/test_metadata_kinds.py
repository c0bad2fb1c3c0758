"""Nested and date metadata, as Haystack's ``InMemoryDocumentStore`` keeps it: nested dicts and
lists are stored, ``datetime``/``date``/``time`` values come back as they were and Haystack's
date comparisons filter on them; tuples come back as lists (JSON's form); a value that is not
JSON and not a date is refused naming the key.  On sqlite-fts5, embedded chroma and elastic."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest
from haystack.dataclasses import Document
from haystack.document_stores.in_memory import InMemoryDocumentStore
from indexplug_haystack import IndexplugDocumentStore, IndexplugRetriever, MetadataRefused

META = {
    "author": {"name": "Ada", "roles": ["writer", {"since": dt.date(2019, 3, 1)}]},
    "published": dt.datetime(2024, 5, 1, 9, 30, tzinfo=dt.UTC),
    "opens": dt.time(8, 15),
    "year": 2024,
}


@pytest.fixture
def store(flow_backend: tuple[str, dict[str, Any]]) -> Iterator[IndexplugDocumentStore]:
    backend, options = flow_backend
    store = IndexplugDocumentStore("kinds", backend=backend, options=options)
    yield store
    store.guard.close()


def _docs() -> list[Document]:
    older = {**META, "published": dt.datetime(2020, 1, 1, tzinfo=dt.UTC), "year": 2020}
    return [
        Document(id="new", content="Otters sleep holding hands.", meta=META),
        Document(id="old", content="Otters crack shellfish.", meta=older),
    ]


@pytest.mark.parametrize(
    "filters",
    [
        {"field": "meta.published", "operator": ">=", "value": "2023-01-01T00:00:00+00:00"},
        {"field": "meta.published", "operator": "==", "value": "2024-05-01T11:30:00+02:00"},
        {"field": "meta.author.name", "operator": "==", "value": "Ada"},
        {"field": "meta.year", "operator": "<", "value": 2022},
    ],
)
def test_nested_and_dated_meta_is_stored_and_filtered_as_in_memory(
    store: IndexplugDocumentStore, filters: dict[str, object]
) -> None:
    reference = InMemoryDocumentStore()
    reference.write_documents(_docs())
    store.write_documents(_docs())
    assert store.filter_documents() == reference.filter_documents()
    [back] = store.filter_documents({"field": "id", "operator": "==", "value": "new"})
    assert repr(sorted(back.meta.items())) == repr(sorted(META.items()))  # dates, not strings
    assert [d.id for d in store.filter_documents(filters)] == [
        d.id for d in reference.filter_documents(filters)
    ]
    found = IndexplugRetriever(store, top_k=2).run("otters", filters=filters)["documents"]
    assert {d.id for d in found} == {d.id for d in reference.filter_documents(filters)}


def test_a_value_that_is_not_json_nor_a_date_is_refused_naming_the_key(
    store: IndexplugDocumentStore,
) -> None:
    with pytest.raises(MetadataRefused, match=r"meta\['tags'\].*set"):
        store.write_documents([Document(id="x", content="x", meta={"tags": {"a"}})])
    with pytest.raises(MetadataRefused, match=r"meta\['deep'\].b.*bytes"):
        store.write_documents([Document(id="x", content="x", meta={"deep": {"b": b"raw"}})])
    assert store.count_documents() == 0
