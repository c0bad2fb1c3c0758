"""The adapter where Haystack looks for integrations: ``haystack_integrations.document_stores.
indexplug`` and ``haystack_integrations.components.retrievers.indexplug``, so that a saved
pipeline loads with Haystack's default trusted modules; ``indexplug_haystack`` keeps working."""

from __future__ import annotations

import indexplug_haystack
import pytest
from haystack import Document, Pipeline
from haystack.components.writers import DocumentWriter
from haystack.core.component.component import ComponentMeta
from haystack.core.errors import DeserializationError
from haystack_integrations.components.retrievers.indexplug import IndexplugRetriever
from haystack_integrations.document_stores.indexplug import IndexplugDocumentStore


def test_both_import_paths_give_the_same_classes() -> None:
    assert indexplug_haystack.IndexplugDocumentStore is IndexplugDocumentStore
    assert indexplug_haystack.IndexplugRetriever is IndexplugRetriever
    assert IndexplugDocumentStore.__module__ == "haystack_integrations.document_stores.indexplug"
    assert IndexplugRetriever.__module__ == "haystack_integrations.components.retrievers.indexplug"


def test_every_public_component_lives_where_haystack_trusts_it() -> None:
    """Each store or component the adapter exports serialises under ``haystack_integrations``
    (a component added later without that home would need ``allowed_modules`` to load)."""
    checked = []
    for name in indexplug_haystack.__all__:
        obj = getattr(indexplug_haystack, name)
        if isinstance(obj, ComponentMeta) or (isinstance(obj, type) and "Store" in name):
            assert obj.__module__.startswith("haystack_integrations."), name
            checked.append(name)
    assert {"IndexplugDocumentStore", "IndexplugRetriever"} <= set(checked)


def _pipeline(store: IndexplugDocumentStore) -> Pipeline:
    pipe = Pipeline()
    pipe.add_component("retriever", IndexplugRetriever(store, top_k=2))
    return pipe


@pytest.mark.parametrize("via", ["haystack_integrations", "indexplug_haystack"])
def test_saved_pipeline_loads_without_allowed_modules(via: str) -> None:
    cls = IndexplugDocumentStore
    if via == "indexplug_haystack":
        cls = indexplug_haystack.IndexplugDocumentStore
    store = cls("saved", backend="sqlite-fts5")
    store.write_documents([Document(id="owl", content="Owls hunt at night.", meta={"year": 2023})])
    text = _pipeline(store).dumps()
    assert "haystack_integrations.components.retrievers.indexplug.IndexplugRetriever" in text
    assert "haystack_integrations.document_stores.indexplug.IndexplugDocumentStore" in text
    assert "indexplug_haystack" not in text

    again = Pipeline.loads(text)  # Haystack's default allowlist only
    newer = {"field": "meta.year", "operator": ">=", "value": 2020}
    out = again.run({"retriever": {"query": "owls", "filters": newer}})["retriever"]["documents"]
    assert [d.id for d in out] == ["owl"]
    assert again.dumps() == text


def test_a_writer_pipeline_with_the_store_loads_too() -> None:
    store = IndexplugDocumentStore("written", backend="sqlite-fts5")
    pipe = Pipeline()
    pipe.add_component("write", DocumentWriter(document_store=store))
    again = Pipeline.loads(pipe.dumps())
    again.run({"write": {"documents": [Document(id="a", content="after loading")]}})
    assert [d.id for d in store.filter_documents()] == ["a"]


def test_an_untrusted_module_is_still_refused() -> None:
    """The allowlist itself is untouched: a made-up module outside it is refused."""
    store = IndexplugDocumentStore("refused", backend="sqlite-fts5")
    text = (
        _pipeline(store)
        .dumps()
        .replace(
            "haystack_integrations.components.retrievers.indexplug.IndexplugRetriever",
            "not_trusted_anywhere.IndexplugRetriever",
        )
    )
    with pytest.raises(DeserializationError):
        Pipeline.loads(text)


def test_a_pipeline_saved_under_the_old_names_still_loads() -> None:
    """YAML written before the move names ``indexplug_haystack``: it loads as it did, with that
    module allowed, and runs."""
    store = IndexplugDocumentStore("older", backend="sqlite-fts5")
    store.write_documents([Document(id="owl", content="Owls hunt at night.")])
    text = (
        _pipeline(store)
        .dumps()
        .replace(
            "haystack_integrations.components.retrievers.indexplug.IndexplugRetriever",
            "indexplug_haystack.retriever.IndexplugRetriever",
        )
        .replace(
            "haystack_integrations.document_stores.indexplug.IndexplugDocumentStore",
            "indexplug_haystack.document_store.IndexplugDocumentStore",
        )
    )
    again = Pipeline.loads(text, allowed_modules=["indexplug_haystack"])
    out = again.run({"retriever": {"query": "owls"}})["retriever"]["documents"]
    assert [d.id for d in out] == ["owl"]
