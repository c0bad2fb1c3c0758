"""The operations of Haystack's extended document store suite (``DocumentStoreBaseExtendedTests``
and its optional mixins), sync and async, with the meaning of Haystack's ``InMemoryDocumentStore``.

Each one reads the passages a filter selects (the exact part of the filter runs in the backend,
the rest is checked with Haystack's own ``document_matches_filter``, as in ``filter_documents``)
and then answers from them or acts on them:

* ``delete_by_filter`` removes those passages by passage id and answers how many the backend
  removed; ``delete_all_documents`` removes every passage, or with ``recreate_index=True`` drops
  the index (the next write creates it again, with the store's backend settings);
* ``update_by_filter`` merges ``meta`` into each selected document and writes it back under its
  id, keeping its place in the write order (the merged meta passes the same checks as a write);
* ``count_documents_by_filter``, ``count_unique_metadata_by_filter``,
  ``get_metadata_fields_info``, ``get_metadata_field_min_max`` and
  ``get_metadata_field_unique_values`` count and list what the selected documents hold.

Nothing is estimated: every answer comes from the passages read back.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from haystack.dataclasses import Document
from indexplug import Guard, Passage
from indexplug.errors import InvalidRequest
from indexplug.outcomes import Indexed, IndexStatus, Removed

from indexplug_haystack.codec import MetadataRefused, sequence, to_document, to_passage

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from indexplug_haystack.filters import Plan

_REMOVE_CHUNK = 10_000


class _Store(Protocol):
    """What the operations need of the store (:class:`IndexplugDocumentStore`)."""

    guard: Guard
    index: str
    deadline_s: float | None
    max_bytes: int | None

    def _plan(self, filters: dict[str, Any] | None) -> Plan: ...
    def _check_scan(self) -> None: ...
    def _check_keys(self) -> None: ...
    def _scan(self, plan: Plan) -> Iterator[Passage]: ...
    def _ascan(self, plan: Plan) -> AsyncIterator[Passage]: ...


def _raise(outcome: Any) -> Any:
    from indexplug_haystack.document_store import raise_outcome

    raise_outcome(outcome)


def _selected(
    passages: Iterable[Passage], filters: dict[str, Any] | None, plan: Plan
) -> list[tuple[Passage, Document]]:
    """The passages (in write order) whose documents pass ``filters``, with those documents."""
    from indexplug_haystack.filters import residual

    ordered = sorted(passages, key=lambda p: (sequence(p), p.id))
    pairs = [(p, to_document(p)) for p in ordered]
    if plan.exact:
        return pairs
    return [(p, d) for p, d in pairs if residual(filters, d)]


def _field(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise ValueError(f"a metadata field must be a non-empty string, got {name!r}")
    return name.removeprefix("meta.")


def _hashable(value: Any) -> Any:
    """A value usable in a set, telling lists, tuples and dicts apart (as Haystack's
    in-memory store does)."""
    if isinstance(value, list):
        return ("list", tuple(_hashable(v) for v in value))
    if isinstance(value, tuple):
        return ("tuple", tuple(_hashable(v) for v in value))
    if isinstance(value, dict):
        return ("dict", frozenset((_hashable(k), _hashable(v)) for k, v in value.items()))
    return value


def _check_meta(meta: Any) -> dict[str, Any]:
    if not isinstance(meta, dict):
        raise ValueError(f"meta must be a dict, got {type(meta).__name__}")
    return meta


def _check_filters(filters: Any) -> dict[str, Any]:
    """A filter for the operations that change documents: a dict (``{}`` selects every
    document, as in Haystack's in-memory store)."""
    if not isinstance(filters, dict):
        raise ValueError(f"filters must be a dict, got {type(filters).__name__}")
    return filters


def _count_unique(docs: Sequence[Document], metadata_fields: Sequence[str]) -> dict[str, int]:
    result: dict[str, int] = {}
    for name in metadata_fields:
        key = _field(name)
        values = {_hashable(d.meta[key]) for d in docs if key in d.meta and d.meta[key] is not None}
        result[key] = len(values)
    return result


def _fields_info(docs: Sequence[Document]) -> dict[str, dict[str, str]]:
    kinds: dict[str, str] = {}
    for d in docs:
        for key, value in d.meta.items():
            if value is None:
                continue
            if isinstance(value, bool):
                kinds[key] = "boolean"
            elif isinstance(value, int):
                kinds[key] = "int"
            elif isinstance(value, float):
                kinds[key] = "float"
            else:
                kinds[key] = "keyword"
    return {k: {"type": v} for k, v in kinds.items()}


def _min_max(docs: Sequence[Document], metadata_field: str) -> dict[str, Any]:
    key = _field(metadata_field)
    values = [
        d.meta[key]
        for d in docs
        if d.meta.get(key) is not None and isinstance(d.meta[key], (int, float, str))
    ]
    if not values:
        return {"min": None, "max": None}
    try:
        return {"min": min(values), "max": max(values)}
    except TypeError:  # numbers and strings together have no order
        return {"min": None, "max": None}


def _unique_values(
    docs: Sequence[Document], metadata_field: str, search_term: str | None, from_: int, size: int
) -> tuple[list[Any], int]:
    key = _field(metadata_field)
    if type(from_) is not int or from_ < 0 or type(size) is not int or size < 0:
        raise ValueError(f"from_ and size must be integers of 0 or more, got {from_!r}, {size!r}")
    unique: dict[tuple[str, Any], Any] = {}
    for d in docs:
        value = d.meta.get(key)
        if value is not None:
            unique.setdefault((type(value).__name__, _hashable(value)), value)
    if search_term:
        term = search_term.lower()
        unique = {k: v for k, v in unique.items() if term in str(v).lower()}
    ordered = sorted(unique, key=lambda k: (str(unique[k]), k[0]))
    return [unique[k] for k in ordered[from_ : from_ + size]], len(ordered)


def _updated(pairs: Sequence[tuple[Passage, Document]], meta: dict[str, Any]) -> list[Passage]:
    """The passages that store each selected document with ``meta`` merged in, in its place
    in the write order; every one is built (and checked) before anything is written."""
    out: list[Passage] = []
    for passage, doc in pairs:
        merged = {**doc.meta, **meta}
        updated = Document(
            id=doc.id,
            content=doc.content,
            blob=doc.blob,
            meta=merged,
            embedding=doc.embedding,
            sparse_embedding=doc.sparse_embedding,
        )
        try:
            out.append(to_passage(updated, sequence(passage)))
        except MetadataRefused as exc:
            raise MetadataRefused(f"update_by_filter: {exc}") from exc
    return out


def _unkeyed(pairs: Sequence[tuple[Passage, Document]]) -> list[str]:
    """Passage ids of selected passages written without a key (outside the adapter): their
    update is written under the document id, so the keyless original is removed after it."""
    return [p.id for p, _ in pairs if p.key is None]


def _removed(outcome: Any) -> int:
    if not isinstance(outcome, Removed):
        _raise(outcome)
    return int(outcome.removed)


def _chunks(items: list[str]) -> Iterable[list[str]]:
    for i in range(0, len(items), _REMOVE_CHUNK):
        yield items[i : i + _REMOVE_CHUNK]


def _dropped(outcome: Any) -> None:
    if not isinstance(outcome, IndexStatus):
        _raise(outcome)


def _check_drop(store: _Store) -> None:
    if not callable(getattr(store.guard.backend, "op_drop", None)):
        raise InvalidRequest(
            f"backend {store.guard.name!r} cannot drop an index; use "
            "delete_all_documents(recreate_index=False)",
            field="recreate_index",
        )


class ExtendedOperations:
    """Haystack's extended store operations, sync and async (mixed into the store)."""

    # -- selecting -----------------------------------------------------------------------
    def _matching(self: _Store, filters: dict[str, Any] | None) -> list[tuple[Passage, Document]]:
        plan = self._plan(filters)
        self._check_scan()
        return _selected(self._scan(plan), filters, plan)

    async def _amatching(
        self: _Store, filters: dict[str, Any] | None
    ) -> list[tuple[Passage, Document]]:
        plan = self._plan(filters)
        self._check_scan()
        return _selected([p async for p in self._ascan(plan)], filters, plan)

    def _docs(self, filters: dict[str, Any] | None) -> list[Document]:
        return [d for _, d in ExtendedOperations._matching(self, filters)]  # type: ignore[arg-type]

    async def _adocs(self, filters: dict[str, Any] | None) -> list[Document]:
        pairs = await ExtendedOperations._amatching(self, filters)  # type: ignore[arg-type]
        return [d for _, d in pairs]

    # -- deleting ------------------------------------------------------------------------
    def delete_all_documents(self, recreate_index: bool = False) -> None:
        """Delete every document.  ``recreate_index=True`` drops the index itself (its
        settings and recorded embedder go with it; the next write creates it again)."""
        store: _Store = self  # type: ignore[assignment]
        if recreate_index:
            _check_drop(store)
            _dropped(store.guard.drop(store.index, deadline_s=store.deadline_s))
            return
        ids = [p.id for p, _ in ExtendedOperations._matching(store, None)]
        for chunk in _chunks(ids):
            _removed(store.guard.remove(store.index, ids=chunk))

    async def delete_all_documents_async(self, recreate_index: bool = False) -> None:
        """:meth:`delete_all_documents` on the guard's coroutines."""
        store: _Store = self  # type: ignore[assignment]
        if recreate_index:
            _check_drop(store)
            _dropped(await store.guard.adrop(store.index, deadline_s=store.deadline_s))
            return
        pairs = await ExtendedOperations._amatching(store, None)
        for chunk in _chunks([p.id for p, _ in pairs]):
            _removed(await store.guard.aremove(store.index, ids=chunk))

    def delete_by_filter(self, filters: dict[str, Any]) -> int:
        """Delete the documents passing ``filters``; answers how many were deleted."""
        store: _Store = self  # type: ignore[assignment]
        ids = [p.id for p, _ in ExtendedOperations._matching(store, _check_filters(filters))]
        return sum(_removed(store.guard.remove(store.index, ids=c)) for c in _chunks(ids))

    async def delete_by_filter_async(self, filters: dict[str, Any]) -> int:
        """:meth:`delete_by_filter` on the guard's coroutines."""
        store: _Store = self  # type: ignore[assignment]
        pairs = await ExtendedOperations._amatching(store, _check_filters(filters))
        total = 0
        for chunk in _chunks([p.id for p, _ in pairs]):
            total += _removed(await store.guard.aremove(store.index, ids=chunk))
        return total

    # -- updating ------------------------------------------------------------------------
    def update_by_filter(self, filters: dict[str, Any], meta: dict[str, Any]) -> int:
        """Merge ``meta`` into the meta of every document passing ``filters`` (its other
        fields and its place in the write order kept); answers how many were updated."""
        store: _Store = self  # type: ignore[assignment]
        meta = _check_meta(meta)
        store._check_keys()
        pairs = ExtendedOperations._matching(store, _check_filters(filters))
        passages = _updated(pairs, meta)
        if passages:
            out = store.guard.add(store.index, passages, max_bytes=store.max_bytes)
            if not isinstance(out, Indexed):
                _raise(out)
        for chunk in _chunks(_unkeyed(pairs)):
            _removed(store.guard.remove(store.index, ids=chunk))
        return len(passages)

    async def update_by_filter_async(self, filters: dict[str, Any], meta: dict[str, Any]) -> int:
        """:meth:`update_by_filter` on the guard's coroutines."""
        store: _Store = self  # type: ignore[assignment]
        meta = _check_meta(meta)
        store._check_keys()
        pairs = await ExtendedOperations._amatching(store, _check_filters(filters))
        passages = _updated(pairs, meta)
        if passages:
            out = await store.guard.aadd(store.index, passages, max_bytes=store.max_bytes)
            if not isinstance(out, Indexed):
                _raise(out)
        for chunk in _chunks(_unkeyed(pairs)):
            _removed(await store.guard.aremove(store.index, ids=chunk))
        return len(passages)

    # -- counting and listing --------------------------------------------------------------
    def count_documents_by_filter(self, filters: dict[str, Any]) -> int:
        """How many documents pass ``filters``."""
        return len(self._docs(filters))

    async def count_documents_by_filter_async(self, filters: dict[str, Any]) -> int:
        """:meth:`count_documents_by_filter` on the guard's coroutines."""
        return len(await self._adocs(filters))

    def count_unique_metadata_by_filter(
        self, filters: dict[str, Any], metadata_fields: list[str]
    ) -> dict[str, int]:
        """For each field (with or without ``meta.``), how many distinct values other than
        ``None`` the documents passing ``filters`` hold."""
        return _count_unique(self._docs(filters), metadata_fields)

    async def count_unique_metadata_by_filter_async(
        self, filters: dict[str, Any], metadata_fields: list[str]
    ) -> dict[str, int]:
        """:meth:`count_unique_metadata_by_filter` on the guard's coroutines."""
        return _count_unique(await self._adocs(filters), metadata_fields)

    def get_metadata_fields_info(self) -> dict[str, dict[str, str]]:
        """Every meta field the documents hold, with its type (``keyword``, ``int``,
        ``float`` or ``boolean``, from the values stored; the last one written wins)."""
        return _fields_info(self._docs(None))

    async def get_metadata_fields_info_async(self) -> dict[str, dict[str, str]]:
        """:meth:`get_metadata_fields_info` on the guard's coroutines."""
        return _fields_info(await self._adocs(None))

    def get_metadata_field_min_max(self, metadata_field: str) -> dict[str, Any]:
        """``{"min": ..., "max": ...}`` of a field's numbers or strings (``None`` for both
        when no document holds one, or when they cannot be ordered together)."""
        return _min_max(self._docs(None), metadata_field)

    async def get_metadata_field_min_max_async(self, metadata_field: str) -> dict[str, Any]:
        """:meth:`get_metadata_field_min_max` on the guard's coroutines."""
        return _min_max(await self._adocs(None), metadata_field)

    def get_metadata_field_unique_values(
        self,
        metadata_field: str,
        search_term: str | None = None,
        from_: int = 0,
        size: int = 10,
        filters: dict[str, Any] | None = None,
    ) -> tuple[list[Any], int]:
        """A page of a field's distinct values (``1``, ``1.0``, ``True`` and ``"1"`` are
        four), ordered by their text, containing ``search_term`` (any case) if given, among
        the documents passing ``filters``; and how many there are in all."""
        return _unique_values(self._docs(filters), metadata_field, search_term, from_, size)

    async def get_metadata_field_unique_values_async(
        self,
        metadata_field: str,
        search_term: str | None = None,
        from_: int = 0,
        size: int = 10,
        filters: dict[str, Any] | None = None,
    ) -> tuple[list[Any], int]:
        """:meth:`get_metadata_field_unique_values` on the guard's coroutines."""
        docs = await self._adocs(filters)
        return _unique_values(docs, metadata_field, search_term, from_, size)
