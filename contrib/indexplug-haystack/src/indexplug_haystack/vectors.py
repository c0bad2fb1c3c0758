"""Haystack documents' own embeddings, on a backend that claims indexplug's ``vectors``
capability (chroma, usearch).

A store given the user's embedder pair (``text_embedder``, ``document_embedder``) stores a
written document's ``embedding`` as its vector (``Guard.add_vectors``), stated to be of that
pair's model, rather than embedding the document again: the usual Haystack pipeline (the
document embedder before the ``DocumentWriter``, the text embedder before
:class:`~indexplug_haystack.embedding_retriever.IndexplugEmbeddingRetriever`) searches the
vectors its own model made, once.  One of another length, or an index that records another
model, is refused (``BAD_REQUEST``), never compared.  Without the pair, nothing says which
model made a document's embedding, so it is kept in the document's record (and given back)
but not searched: the backend embeds the text with its own embedder, as on a backend without
the ``vectors`` capability.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from indexplug import Passage
from indexplug.errors import NotSupported

if TYPE_CHECKING:
    from haystack.dataclasses import Document

    from indexplug_haystack.document_store import IndexplugDocumentStore


class NoVectors(NotSupported):
    """An embedding retriever over a backend that does not claim the ``vectors`` capability
    (a lexical one: sqlite-fts5)."""

    def __init__(self, backend: str, operation: str) -> None:
        super().__init__(backend, "vectors", operation)


def stated_embedder(store: IndexplugDocumentStore) -> str | None:
    """The identity of the vectors a store's documents and queries carry: its embedder pair's
    (as the backend was opened with it), else None (the index's own)."""
    if store.text_embedder is None:
        return None
    given = getattr(store.guard, "embedder", None)
    return None if given is None else str(given.name)


def split_by_embedding(
    store: IndexplugDocumentStore, docs: list[Document], passages: list[Passage]
) -> tuple[list[Passage], list[Passage], list[Any]]:
    """The passages to add as they are, and those to add with their documents' embeddings
    (with those embeddings), for a store with an embedder pair over a backend that claims
    vectors; all as they are otherwise."""
    if store.text_embedder is None or not getattr(store.guard.capabilities, "vectors", False):
        return passages, [], []
    embedding: dict[str | None, Any] = {d.id: d.embedding for d in docs if d.embedding is not None}
    plain = [p for p in passages if p.key not in embedding]
    embedded = [p for p in passages if p.key in embedding]
    return plain, embedded, [embedding[p.key] for p in embedded]


def write(
    store: IndexplugDocumentStore, docs: list[Document], passages: list[Passage]
) -> list[Any]:
    """Add ``passages``, those whose documents carry embeddings with them; the outcomes."""
    plain, embedded, vectors = split_by_embedding(store, docs, passages)
    outcomes = []
    if embedded:
        outcomes.append(
            store.guard.add_vectors(
                store.index,
                embedded,
                vectors,
                embedder=stated_embedder(store),
                max_bytes=store.max_bytes,
            )
        )
    if plain:
        outcomes.append(store.guard.add(store.index, plain, max_bytes=store.max_bytes))
    return outcomes


async def awrite(
    store: IndexplugDocumentStore, docs: list[Document], passages: list[Passage]
) -> list[Any]:
    """:func:`write` through the guard's coroutines."""
    plain, embedded, vectors = split_by_embedding(store, docs, passages)
    outcomes = []
    if embedded:
        outcomes.append(
            await store.guard.aadd_vectors(
                store.index,
                embedded,
                vectors,
                embedder=stated_embedder(store),
                max_bytes=store.max_bytes,
            )
        )
    if plain:
        outcomes.append(await store.guard.aadd(store.index, plain, max_bytes=store.max_bytes))
    return outcomes
