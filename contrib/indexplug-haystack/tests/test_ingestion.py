"""Haystack ingestion as a user runs it: ``DocumentSplitter`` with an overlap into a
``DocumentWriter``, then retrieval, on sqlite-fts5, embedded chroma (``hashing:default``) and
elastic (conftest's ``FLOW_BACKENDS``)."""

from __future__ import annotations

from typing import Any

from haystack import Pipeline
from haystack.components.preprocessors import DocumentSplitter
from haystack.components.writers import DocumentWriter
from haystack.dataclasses import Document
from haystack.document_stores.in_memory import InMemoryDocumentStore
from indexplug_haystack import IndexplugDocumentStore, IndexplugRetriever

TEXT = (
    "Sea otters hold hands while they sleep so they do not drift apart. "
    "They crack shellfish open with stones they keep in a pouch of skin. "
    "A group of otters resting together on the water is called a raft. "
    "Volcanoes erupt molten lava and ash high into the sky. "
    "Espresso is brewed under pressure and topped with a golden crema."
)


def _ingest(store: object) -> dict[str, object]:
    pipe = Pipeline()
    pipe.add_component("split", DocumentSplitter(split_by="word", split_length=12, split_overlap=4))
    pipe.add_component("write", DocumentWriter(document_store=store))  # type: ignore[arg-type]
    pipe.connect("split.documents", "write.documents")
    return pipe.run({"split": {"documents": [Document(content=TEXT, meta={"file": "a.txt"})]}})


def test_overlapping_splits_are_written_and_retrieved(
    flow_backend: tuple[str, dict[str, Any]],
) -> None:
    backend, options = flow_backend
    store = IndexplugDocumentStore("ingest", backend=backend, options=options)
    reference = InMemoryDocumentStore()
    written = _ingest(store)["write"]
    assert written == _ingest(reference)["write"]
    assert isinstance(written, dict) and written["documents_written"] > 2

    # what was stored is what the in-memory store holds, the tuples read back as lists
    ours = {d.id: d for d in store.filter_documents()}
    theirs = {d.id: d for d in reference.filter_documents()}
    assert ours.keys() == theirs.keys()
    overlaps = 0
    for doc_id, doc in ours.items():
        expected = theirs[doc_id]
        assert doc.content == expected.content
        for entry in expected.meta.get("_split_overlap", []):
            assert isinstance(entry["range"], tuple)
            entry["range"] = list(entry["range"])
            overlaps += 1
        assert doc.meta == expected.meta
    assert overlaps > 0

    # and the split documents are retrievable in a pipeline
    query = Pipeline()
    query.add_component("retrieve", IndexplugRetriever(document_store=store, top_k=2))
    found = query.run({"retrieve": {"query": "golden crema espresso"}})["retrieve"]["documents"]
    assert found and "crema" in found[0].content
    assert found[0].meta["file"] == "a.txt"
    assert all(type(e["range"]) is list for e in found[0].meta["_split_overlap"])


def test_tuples_anywhere_in_meta_come_back_as_lists() -> None:
    store = IndexplugDocumentStore("tuples", backend="sqlite-fts5")
    meta = {"span": (1, 2), "deep": {"pairs": [(3, 4), ("a", (5,))]}, "plain": [1, 2]}
    store.write_documents([Document(id="t", content="tuples in meta", meta=meta)])
    [back] = store.filter_documents()
    assert back.meta == {"span": [1, 2], "deep": {"pairs": [[3, 4], ["a", [5]]]}, "plain": [1, 2]}
    assert type(back.meta["span"]) is list
    assert meta["span"] == (1, 2)  # the caller's document is left as it was
