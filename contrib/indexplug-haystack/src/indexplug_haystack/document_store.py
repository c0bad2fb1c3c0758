"""A Haystack 2.x ``DocumentStore`` over any indexplug index.

One document is one passage keyed by the document id (see :mod:`indexplug_haystack.codec`),
so ids are caller keys: writing an id again is an upsert in the backend, ``delete_documents``
removes by key.  Every answer of the index that is not a result (a failure, a timeout, a
backend that is unavailable) raises the typed :class:`indexplug.OutcomeError` subclass; an empty
store is an empty list and a count of 0, as Haystack expects.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, NoReturn

import indexplug
from haystack import default_from_dict, default_to_dict
from haystack.core.errors import SerializationError
from haystack.core.serialization import component_from_dict, component_to_dict, import_class_by_name
from haystack.dataclasses import Document
from haystack.document_stores.errors import DuplicateDocumentError
from haystack.document_stores.types import DuplicatePolicy
from haystack.errors import FilterError
from indexplug import Guard, Passage
from indexplug.errors import InvalidRequest, OutcomeError
from indexplug.filters import operators
from indexplug.outcomes import Got, Indexed, IndexStatus, Removed, Scanned

from indexplug_haystack import vectors
from indexplug_haystack.codec import (
    check_documents,
    check_key,
    is_key,
    next_sequence,
    sequence,
    to_document,
    to_passage,
)
from indexplug_haystack.embedder import haystack_embedder
from indexplug_haystack.extended import ExtendedOperations
from indexplug_haystack.filters import Plan, residual, translate

STORE_MODULE = "haystack_integrations.document_stores.indexplug"


def renamed(data: dict[str, Any], old_module: str, cls: type) -> dict[str, Any]:
    """``data`` with the type name a pipeline saved before the move to ``haystack_integrations``
    used (``old_module.Class``) read as the class's current name; any other name is left as it
    is, for Haystack to accept or refuse."""
    if data.get("type") == f"{old_module}.{cls.__name__}":
        return {**data, "type": f"{cls.__module__}.{cls.__name__}"}
    return data


"""Where Haystack finds the store (see :mod:`haystack_integrations.document_stores.indexplug`)."""

_GET_CHUNK = 10_000
_SCAN_PAGE = 500


def raise_outcome(outcome: Any) -> NoReturn:
    """Raise the typed :class:`indexplug.OutcomeError` for an answer that is not a result."""
    indexplug.raise_for_outcome(outcome)
    raise OutcomeError(outcome)


class IndexplugDocumentStore(ExtendedOperations):
    """Haystack documents in index ``index`` of an indexplug backend.

    Give the backend one of three ways: ``backend`` (a name, ``"sqlite-fts5"`` by default) with
    ``options``; ``guard``, an open :class:`indexplug.Guard` (such a store cannot be serialised
    with :meth:`to_dict`); or ``config_index``, an index named in ``indexplug.toml``
    (``config_path``, else the file indexplug finds).  ``deadline_s`` bounds each read (the
    guard's default otherwise); ``max_bytes`` caps the index on its first write.

    ``text_embedder`` and ``document_embedder`` (give both or neither): the Haystack embedder
    components of the user's model.  A dense backend (chroma) embeds written documents with
    the document embedder and queries with the text embedder, and records the model with the
    index (:mod:`indexplug_haystack.embedder`); without them it embeds with its configured
    model.  A lexical backend never calls them.  A document's own ``embedding`` is stored with
    it; with the embedder pair, on a backend that claims ``vectors``, it is the vector
    stored and searched (:mod:`indexplug_haystack.vectors`).  With ``guard=``, the guard must
    have been opened with the pair
    (``indexplug.open_backend(name, options, embedder=haystack_embedder(text, document))``).

    The extended operations (``delete_all_documents``, ``delete_by_filter``,
    ``update_by_filter``, the counts and the metadata-field queries) are
    :class:`~indexplug_haystack.extended.ExtendedOperations`.
    """

    # Haystack loads saved pipelines' classes only from trusted modules (``haystack``,
    # ``haystack_integrations``...): the store's public home is the integrations namespace,
    # so ``to_dict`` names it there and ``Pipeline.loads`` needs no ``allowed_modules``.
    __module__ = STORE_MODULE

    def __init__(
        self,
        index: str = "haystack",
        *,
        backend: str | None = None,
        options: dict[str, Any] | None = None,
        guard: Guard | None = None,
        config_index: str | None = None,
        config_path: str | None = None,
        deadline_s: float | None = None,
        max_bytes: int | None = None,
        text_embedder: Any = None,
        document_embedder: Any = None,
    ) -> None:
        given = sum(x is not None for x in (backend, guard, config_index))
        if given > 1:
            raise ValueError("give one of backend (with options), guard or config_index")
        if (text_embedder is None) != (document_embedder is None):
            raise ValueError(
                "give text_embedder and document_embedder together (queries and documents "
                "must be embedded by the same model)"
            )
        self.text_embedder = text_embedder
        self.document_embedder = document_embedder
        embedder = (
            None if text_embedder is None else haystack_embedder(text_embedder, document_embedder)
        )
        self.backend = backend
        self.options = dict(options or {})
        self.config_index = config_index
        self.config_path = config_path
        self.deadline_s = deadline_s
        self.max_bytes = max_bytes
        self._from_guard = guard is not None
        if guard is not None:
            self.guard: Guard = guard
            self.index = index
        elif config_index is not None:
            from indexplug.config import open_index

            target = open_index(config_index, config_path or None, embedder=embedder)
            self.guard = target.guard
            self.index = target.index
            if self.max_bytes is None:
                self.max_bytes = target.max_bytes
        else:
            self.backend = backend or "sqlite-fts5"
            self.guard = indexplug.open_backend(self.backend, self.options, embedder=embedder)
            self.index = index
        indexplug.validate_index_name(self.index)
        if embedder is not None and self._from_guard and self.guard.capabilities.dense:
            opened = self.guard.embedder
            if opened is None or (
                getattr(opened, "source", None) != embedder.source and opened.name != embedder.name
            ):
                raise InvalidRequest(
                    f"the {self.guard.name} backend embeds, and the guard was opened without "
                    f"these embedders ({embedder.name}): it would embed with another model. "
                    "Give backend= and options=, or open the guard with "
                    "embedder=haystack_embedder(text_embedder, document_embedder)",
                    field="document_embedder",
                )

    # -- serialisation -------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The store's settings (not its documents), for a pipeline's YAML."""
        if self._from_guard:
            raise SerializationError(
                "an IndexplugDocumentStore made from a guard cannot be serialised: make it "
                "with backend= and options=, or config_index="
            )
        return default_to_dict(
            self,
            index=self.index,
            backend=self.backend if self.config_index is None else None,
            options=self.options if self.config_index is None else None,
            config_index=self.config_index,
            config_path=self.config_path,
            deadline_s=self.deadline_s,
            max_bytes=self.max_bytes,
            text_embedder=_component_dict(self.text_embedder, "text_embedder"),
            document_embedder=_component_dict(self.document_embedder, "document_embedder"),
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> IndexplugDocumentStore:
        data = renamed(data, "indexplug_haystack.document_store", cls)
        params = data.get("init_parameters", {})
        for key in ("text_embedder", "document_embedder"):
            if isinstance(params.get(key), dict):
                params[key] = _component(params[key], key)
        return default_from_dict(cls, data)

    # -- planning (shared by the sync and async forms) -------------------------------------
    def _plan(self, filters: dict[str, Any] | None) -> Plan:
        plan = translate(filters)
        if plan.pushdown is not None:
            served = frozenset(getattr(self.guard.capabilities, "filter_operators", frozenset()))
            if not operators(plan.pushdown) <= served:
                # the backend cannot run it: read everything, Haystack's meaning decides
                plan = Plan(None, False, plan.may_raise)
        return plan

    def _check_scan(self) -> None:
        if not getattr(self.guard.capabilities, "scan", False):
            raise InvalidRequest(
                f"backend {self.guard.name!r} cannot list its passages (no scan capability), "
                "which filter_documents needs",
                field="op",
            )

    def _check_keys(self) -> None:
        if not getattr(self.guard.capabilities, "keys", False):
            raise InvalidRequest(
                f"backend {self.guard.name!r} does not claim the 'keys' capability: Haystack "
                "document ids are indexplug caller keys, so documents cannot be written or "
                "deleted by id there (use sqlite-fts5, chroma or colbert)",
                field="keys",
            )

    @staticmethod
    def _select(
        passages: Sequence[Passage], filters: dict[str, Any] | None, plan: Plan
    ) -> list[Document]:
        ordered = sorted(passages, key=lambda p: (sequence(p), p.id))
        docs = [to_document(p) for p in ordered]
        if plan.exact:
            return docs
        return [d for d in docs if residual(filters, d)]

    def _prepare_write(
        self, documents: Any, policy: DuplicatePolicy
    ) -> tuple[list[Document], DuplicatePolicy]:
        docs = list(check_documents(documents))
        self._check_keys()
        if policy == DuplicatePolicy.NONE:
            policy = DuplicatePolicy.FAIL
        for d in docs:
            check_key(d.id)
        chosen: dict[str, Document] = {}
        for d in docs:
            if d.id in chosen:
                if policy == DuplicatePolicy.FAIL:
                    raise DuplicateDocumentError(f"ID '{d.id}' is given twice in one write.")
                if policy == DuplicatePolicy.SKIP:
                    continue
                del chosen[d.id]  # OVERWRITE: the last one wins, in its place
            chosen[d.id] = d
        return list(chosen.values()), policy

    def _to_write(
        self, docs: list[Document], policy: DuplicatePolicy, existing: set[str]
    ) -> list[Passage]:
        if policy == DuplicatePolicy.FAIL and existing:
            ids = ", ".join(sorted(existing)[:5])
            raise DuplicateDocumentError(f"ID(s) already exist: {ids}.")
        if policy == DuplicatePolicy.SKIP:
            docs = [d for d in docs if d.id not in existing]
        first = next_sequence(len(docs))
        return [to_passage(d, first + i) for i, d in enumerate(docs)]

    def _added(self, outcome: Any, passages: list[Passage]) -> int:
        if not isinstance(outcome, Indexed):
            raise_outcome(outcome)
        return len(passages)

    @staticmethod
    def _existing(outcome: Any, asked: list[str]) -> set[str]:
        if not isinstance(outcome, Got):
            raise_outcome(outcome)
        return set(asked) - set(outcome.missing_keys)

    @staticmethod
    def _count(outcome: Any) -> int:
        if not isinstance(outcome, IndexStatus):
            raise_outcome(outcome)
        return outcome.passages if outcome.exists else 0

    # -- the DocumentStore protocol -------------------------------------------------------
    def count_documents(self) -> int:
        """How many documents the index holds (its passages: one per document)."""
        return self._count(self.guard.status(self.index, deadline_s=self.deadline_s))

    def filter_documents(self, filters: dict[str, Any] | None = None) -> list[Document]:
        """The documents that pass ``filters`` (Haystack's syntax), in the order written."""
        plan = self._plan(filters)
        self._check_scan()
        return self._select(list(self._scan(plan)), filters, plan)

    def write_documents(
        self, documents: list[Document], policy: DuplicatePolicy = DuplicatePolicy.NONE
    ) -> int:
        """Write ``documents``; ``NONE`` is ``FAIL`` (``DuplicateDocumentError``, nothing
        written), ``SKIP`` keeps what is stored, ``OVERWRITE`` replaces it (an upsert)."""
        docs, policy = self._prepare_write(documents, policy)
        existing: set[str] = set()
        if policy != DuplicatePolicy.OVERWRITE:
            for chunk in _chunks([d.id for d in docs], _GET_CHUNK):
                out = self.guard.get(self.index, keys=chunk, deadline_s=self.deadline_s)
                existing |= self._existing(out, chunk)
        passages = self._to_write(docs, policy, existing)
        if not passages:
            return 0
        for outcome in vectors.write(self, docs, passages):
            self._added(outcome, passages)
        return len(passages)

    def delete_documents(self, document_ids: list[str]) -> None:
        """Delete the documents with these ids (ids not stored are ignored)."""
        self._check_keys()
        keys = [k for k in dict.fromkeys(document_ids) if is_key(k)]
        for chunk in _chunks(keys, _GET_CHUNK):
            out = self.guard.remove(self.index, keys=chunk)
            if not isinstance(out, Removed):
                raise_outcome(out)

    # -- async forms (the guard's coroutines: the event loop is never blocked) -------------
    async def count_documents_async(self) -> int:
        return self._count(await self.guard.astatus(self.index, deadline_s=self.deadline_s))

    async def filter_documents_async(self, filters: dict[str, Any] | None = None) -> list[Document]:
        plan = self._plan(filters)
        self._check_scan()
        passages = [p async for p in self._ascan(plan)]
        return self._select(passages, filters, plan)

    async def write_documents_async(
        self, documents: list[Document], policy: DuplicatePolicy = DuplicatePolicy.NONE
    ) -> int:
        docs, policy = self._prepare_write(documents, policy)
        existing: set[str] = set()
        if policy != DuplicatePolicy.OVERWRITE:
            for chunk in _chunks([d.id for d in docs], _GET_CHUNK):
                out = await self.guard.aget(self.index, keys=chunk, deadline_s=self.deadline_s)
                existing |= self._existing(out, chunk)
        passages = self._to_write(docs, policy, existing)
        if not passages:
            return 0
        for outcome in await vectors.awrite(self, docs, passages):
            self._added(outcome, passages)
        return len(passages)

    async def delete_documents_async(self, document_ids: list[str]) -> None:
        self._check_keys()
        keys = [k for k in dict.fromkeys(document_ids) if is_key(k)]
        for chunk in _chunks(keys, _GET_CHUNK):
            out = await self.guard.aremove(self.index, keys=chunk)
            if not isinstance(out, Removed):
                raise_outcome(out)

    # -- reading every passage --------------------------------------------------------------
    def _scan(self, plan: Plan) -> Iterator[Passage]:
        for page in self.guard.scan_all(
            self.index, filters=plan.pushdown, page=_SCAN_PAGE, deadline_s=self.deadline_s
        ):
            if not isinstance(page, Scanned):
                raise_outcome(page)
            yield from page.passages

    async def _ascan(self, plan: Plan) -> AsyncIterator[Passage]:
        async for page in self.guard.ascan_all(
            self.index, filters=plan.pushdown, page=_SCAN_PAGE, deadline_s=self.deadline_s
        ):
            if not isinstance(page, Scanned):
                raise_outcome(page)
            for p in page.passages:
                yield p


def _component_dict(component: Any, name: str) -> dict[str, Any] | None:
    """A component as a pipeline's YAML holds it (None stays None)."""
    return None if component is None else component_to_dict(component, name)


def _component(data: dict[str, Any], name: str) -> Any:
    """The component a :func:`_component_dict` describes (its class imported by name, as
    Haystack loads a pipeline's components)."""
    if not isinstance(data.get("type"), str):
        raise SerializationError(f"{name} has no 'type' naming its component class")
    return component_from_dict(import_class_by_name(data["type"]), data, name)


def _chunks(items: list[str], size: int) -> Iterator[list[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


__all__ = ["FilterError", "IndexplugDocumentStore", "raise_outcome"]
