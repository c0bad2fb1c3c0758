"""The two protocols a plugin implements: :class:`IndexBackend` and :class:`Embedder`.

They are :class:`typing.Protocol` classes, so a plugin needs no base class from us: any object
with these attributes and methods is a backend.  Backends never talk to callers directly; the
core calls them through :class:`indexplug.guard.Guard`, which enforces the contract
(typed outcomes, deadlines, readiness, hit checks) whatever the plugin does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from indexplug.deadlines import Deadline
from indexplug.outcomes import ScoreScale
from indexplug.passages import MetadataValue, Passage

if TYPE_CHECKING:
    from indexplug.filters import Filter
    from indexplug.outcomes import (
        AddOutcome,
        GetOutcome,
        IndexesOutcome,
        RemoveOutcome,
        ScanOutcome,
        SearchOutcome,
        StatusOutcome,
        VectorAddOutcome,
        VectorSearchOutcome,
    )

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    Vector = NDArray[np.float32]
    """One embedding: a float32 array (a token-granularity embedder answers one row per
    token)."""


def __getattr__(name: str) -> Any:
    # ``Vector`` needs numpy, which costs tens of milliseconds to import: made on first use,
    # so that the CLI's start-up (which never embeds on a sparse backend) does not pay for it.
    if name == "Vector":
        import numpy as np
        from numpy.typing import NDArray

        globals()["Vector"] = vector = NDArray[np.float32]
        return vector
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class Readiness(BaseModel):
    """Whether a backend or embedder can serve right now, and if not, why not."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ready: bool
    reason: str | None = None

    @classmethod
    def yes(cls) -> Readiness:
        """Ready.  One shared instance (the model is frozen): the guard answers this on every
        op while a plugin's last "ready" is fresh, and validating a new one costs about 3 µs
        (timeit), a percent of a fast search."""
        if cls is Readiness:
            return _READY
        return cls(ready=True)

    @classmethod
    def no(cls, reason: str) -> Readiness:
        return cls(ready=False, reason=reason)


_READY = Readiness(ready=True)


class Capabilities(BaseModel):
    """What a backend claims.  The conformance kit runs the checks for each claim and reports
    an unclaimed capability as *not claimed*, never as passed."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    filters: bool = False
    """Equality filters on metadata in ``search(filters=...)``: the backend is given a
    ``{key: scalar}`` map; every pair must hold, and a metadata list holds a value it
    contains.  A filter with other operators is refused for such a backend unless it claims
    them below."""
    filter_operators: frozenset[str] = frozenset()
    """The operators of :mod:`indexplug.filters` the backend serves natively (``$eq``, ``$in``,
    ``$gt`` ..., and ``$and`` / ``$or`` / ``$not``); a backend that claims any is given the
    parsed :data:`indexplug.filters.Filter` in ``search`` and ``scan``.  The guard refuses a
    filter that uses an operator not claimed (``BAD_REQUEST``), and checks every hit and
    scanned passage against the filter whatever the backend claims."""
    get: bool = False
    """``get(index, ids, *, keys, deadline)`` (:class:`Getter`) answers stored passages by id."""
    scan: bool = False
    """``scan(index, *, filters, after, limit, deadline)`` (:class:`Scanner`) pages through
    every passage in id order."""
    indexes: bool = False
    """``indexes(*, deadline)`` (:class:`IndexLister`) lists the backend's indexes."""
    keys: bool = False
    """Passages may carry a caller key (:attr:`indexplug.passages.Passage.key`), and ``get``
    and ``remove`` accept ``keys``: adding a passage whose key is held by other passages
    replaces them (an upsert), atomically for each key."""
    vectors: bool = False
    """The backend holds one vector per passage and serves the vector interface
    (:class:`VectorStore`): passages added with the caller's own vectors, a search by a query
    vector, and the stored vectors returned with the hits on request (for maximal marginal
    relevance).  The guard refuses a vector of the wrong dimension, one with NaN or infinity,
    and one stated to be of another embedder than the index's (``BAD_REQUEST``); a backend
    that does not claim it is refused every vector op (:class:`~indexplug.errors.NotSupported`,
    a ``BAD_REQUEST`` naming the capability)."""
    deletion: bool = True
    persistence: bool = False
    """Everything survives closing and reopening the backend."""
    concurrent_writers: bool = False
    """Several threads may add at once without loss or duplication."""
    multiprocess_writers: bool = False
    server: bool = False
    """The backend talks to a server that can be stopped (and must recover when it returns)."""
    dense: bool = False
    """Uses an embedder."""
    separate_records: bool = False
    """Keeps each passage's record apart from its search structure (rows behind a full-text
    index, records behind vectors), so the two could disagree; the kit's ``integrity.rows``
    check then holds the backend to answering ``INDEX_FAILED`` when they do (it needs a
    ``delete_rows(index, ids)`` hook)."""
    cooperative_deadlines: bool | frozenset[str] = False
    """Ops that stop by themselves at their deadline (e.g. SQLite's progress handler and busy
    timeout, or a server request whose timeout is what is left of the deadline): ``True`` for
    every op, or the names of those that do (``frozenset({"search"})``).  A claim, shown in
    ``backends`` and on report cards; it changes nothing in how the guard calls the backend:
    every op runs on a worker thread the guard can abandon at the deadline, and an answer
    that comes back past it is ``INDEX_TIMEOUT``.  The kit's deadline checks call every
    backend with a deadline already past and require ``INDEX_TIMEOUT``, so that a call the
    guard has given up on does not keep working."""


class Granularity(StrEnum):
    """What an embedder can produce: one vector per text, or one per token."""

    TEXT = "text"
    TOKEN = "token"


@runtime_checkable
class Embedder(Protocol):
    """Turns text into vectors.

    ``embed_documents`` returns one array per text: shape ``(dim,)`` for ``Granularity.TEXT`` and
    ``(tokens, dim)`` for ``Granularity.TOKEN``.  Vectors are L2-normalised float32, so a dot
    product is a cosine.  A backend asks for the granularity it needs, so one embedder serves a
    dense index and a late-interaction index alike.
    """

    name: str
    """The spec it was made from, ``PROVIDER:MODEL`` (recorded with every index built with it)."""
    dim: int
    granularities: frozenset[Granularity]

    def readiness(self) -> Readiness: ...

    def embed_documents(self, texts: Sequence[str], granularity: Granularity) -> list[Vector]: ...

    def embed_query(self, text: str, granularity: Granularity) -> Vector: ...


@runtime_checkable
class IndexBackend(Protocol):
    """What a backend plugin implements.

    Every op works on a named index (already validated by the guard), gets an absolute
    :class:`~indexplug.deadlines.Deadline`, and must return one of the outcomes allowed for it
    (see :data:`indexplug.outcomes.ALLOWED`).  Raising, returning anything else, or overrunning
    the deadline is caught by the guard and reported as a failure naming the backend.
    """

    name: str
    description: str
    score_scale: ScoreScale
    capabilities: Capabilities

    def readiness(self) -> Readiness: ...

    def add(
        self, index: str, passages: Sequence[Passage], *, max_bytes: int | None, deadline: Deadline
    ) -> AddOutcome: ...

    def search(
        self,
        index: str,
        query: str,
        *,
        top_k: int,
        deadline: Deadline,
        filters: Mapping[str, MetadataValue] | Filter | None = None,
    ) -> SearchOutcome: ...

    def remove(self, index: str, ids: Sequence[str], *, deadline: Deadline) -> RemoveOutcome: ...

    def status(self, index: str, *, deadline: Deadline) -> StatusOutcome: ...

    def close(self) -> None: ...


@runtime_checkable
class Droppable(Protocol):
    """Deletes a whole index (sensitive: the CLI, invoke and MCP gate it as they gate remove);
    called through :meth:`indexplug.guard.Guard.drop`, which holds the answer to
    ``IndexStatus`` with ``exists=False`` and ``passages=0`` (anything else is
    ``INDEX_FAILED``).  Answers that, or a failure."""

    def op_drop(self, index: str, *, deadline: Deadline) -> Any: ...


@runtime_checkable
class Optimizable(Protocol):
    """Compacts an index for faster searches.  Answers ``IndexStatus``, or a failure."""

    def op_optimize(self, index: str, *, deadline: Deadline) -> Any: ...


@runtime_checkable
class Rebuildable(Protocol):
    """Rebuilds an index from its live passages.  Answers ``IndexStatus``, ``OverBudget`` (a
    rebuild is held to the index's budget like any write), or a failure."""

    def op_rebuild(self, index: str, *, deadline: Deadline) -> Any: ...


@runtime_checkable
class Migratable(Protocol):
    """Moves an index written by an earlier version of its plugin to the layout the plugin
    writes now, so that no reader sees half of it; resumable, and nothing to do for an index
    already there.  Answers ``IndexStatus`` or a failure."""

    def op_migrate(self, index: str, *, deadline: Deadline) -> Any: ...


@runtime_checkable
class Reranker(Protocol):
    """Scores the caller's passages for a query without indexing them.  Answers ``Searched``
    (every passage, best first, each one of those given), ``NoMatch``, ``BadRequest`` or a
    failure."""

    def op_rerank(
        self, index: str, *, deadline: Deadline, query: str, passages: Sequence[Passage]
    ) -> Any: ...


@runtime_checkable
class Explainer(Protocol):
    """Says why a stored passage scores what it does for a query.  Answers ``Explained``,
    ``IndexEmpty``, ``BadRequest`` (no such passage) or a failure."""

    def op_explain(self, index: str, *, deadline: Deadline, query: str, passage_id: str) -> Any: ...


@runtime_checkable
class NeighbourSource(Protocol):
    """Gives the stored passages next to one passage of the same source, in document order.
    Answers ``Neighbours``, ``BadRequest`` (no such passage) or a failure."""

    def op_neighbours(
        self, index: str, *, deadline: Deadline, passage_id: str, before: int, after: int
    ) -> Any: ...


@runtime_checkable
class Getter(Protocol):
    """The stored passages with these ids, and those with these caller keys (a backend that
    claims ``keys``).  Answers ``Got`` (the ids and keys not found listed, never an error:
    for an index that does not exist, every one of them) or a failure."""

    def get(
        self, index: str, ids: Sequence[str], *, keys: Sequence[str], deadline: Deadline
    ) -> GetOutcome: ...


@runtime_checkable
class Scanner(Protocol):
    """One page of the index's passages in ascending id order, those with an id above
    ``after`` (a cursor from the previous page) and, with ``filters``, only those that match.
    ``next_after`` is the last id of the page when more may follow, None at the end.  Answers
    ``Scanned`` (an empty last page for an index that does not exist) or a failure."""

    def scan(
        self,
        index: str,
        *,
        filters: Any,
        after: str | None,
        limit: int,
        deadline: Deadline,
    ) -> ScanOutcome: ...


@runtime_checkable
class IndexLister(Protocol):
    """The backend's indexes, with their passage counts where cheap.  Answers ``IndexList``
    or a failure."""

    def indexes(self, *, deadline: Deadline) -> IndexesOutcome: ...


@runtime_checkable
class VectorStore(Protocol):
    """The vector interface of a backend that claims ``Capabilities.vectors``.

    Vectors are float32 arrays of the backend's embedder's dimension, L2-normalised and finite
    (the guard checks them and hands the backend its own copies).  ``embedder`` is the identity
    the caller's vectors are of (checked by the guard against :meth:`vector_space`): a backend
    answers ``BadRequest`` (field ``embedder``) when the index records another embedder, never
    mixing vectors of two models in one index.
    """

    def vector_space(self) -> tuple[str, int]:
        """The name and dimension of the embedder whose vectors this backend stores (its
        configured embedder, the one it records with every index it creates)."""
        ...

    def query_vector(self, text: str) -> Vector:
        """The vector the backend searches ``text`` by: its embedder's query vector (for a
        caller that ranks the hits itself, e.g. by maximal marginal relevance)."""
        ...

    def add_vectors(
        self,
        index: str,
        passages: Sequence[Passage],
        vectors: Sequence[Vector],
        *,
        embedder: str,
        max_bytes: int | None,
        deadline: Deadline,
    ) -> VectorAddOutcome:
        """``add``, with ``vectors[i]`` stored as passage ``i``'s vector instead of one the
        backend embeds (a passage already stored is *known*, its vector unchanged)."""
        ...

    def search_vector(
        self,
        index: str,
        vector: Vector,
        *,
        top_k: int,
        embedder: str,
        with_vectors: bool,
        deadline: Deadline,
        filters: Mapping[str, MetadataValue] | Filter | None = None,
    ) -> VectorSearchOutcome:
        """The ``top_k`` passages nearest ``vector``, on the backend's score scale; with
        ``with_vectors``, each hit carries its stored vector (:attr:`Hit.vector`)."""
        ...


class StatsSource(Protocol):
    """The backend's own figures for ``stats`` (segments, pages, shards, centroids, the last
    write time as ``last_write`` in Unix seconds): ``IndexStatus`` whose ``details`` hold them,
    or a failure.  ``stats`` computes the counts every backend has (from ``status`` and
    ``scan``) itself."""

    def op_stats(self, index: str, *, deadline: Deadline) -> Any: ...


EXTENSION_OPS: dict[str, type] = {
    "drop": Droppable,
    "optimize": Optimizable,
    "rebuild": Rebuildable,
    "migrate": Migratable,
    "rerank": Reranker,
    "explain": Explainer,
    "neighbours": NeighbourSource,
    "stats": StatsSource,
}
"""The optional ops a backend may offer (a method ``op_<name>``), each with its protocol; the
outcomes each may answer are in :data:`indexplug.outcomes.ALLOWED`, and the guard checks their
answers like those of any other op (:meth:`indexplug.guard.Guard.call_extra`)."""


@dataclass(frozen=True)
class BackendContext:
    """What a backend factory receives: where its files go, its settings, and embedders."""

    home: Path
    options: Mapping[str, Any] = field(default_factory=dict)
    embedder_factory: Callable[[str], Embedder] | None = None

    def embedder(self, spec: str) -> Embedder:
        if self.embedder_factory is None:
            raise LookupError("no embedder factory was given to this backend")
        return self.embedder_factory(spec)


@dataclass(frozen=True)
class BackendSpec:
    """A backend as a plugin registers it (returned by the ``indexplug_backends`` hook)."""

    name: str
    factory: Callable[[BackendContext], IndexBackend]
    description: str = ""


@dataclass(frozen=True)
class EmbedderSpec:
    """An embedder provider as a plugin registers it: ``factory(model, options)``."""

    provider: str
    factory: Callable[[str, Mapping[str, Any]], Embedder]
    description: str = ""
