"""What an engine is: the contract between the colbert backend and one late-interaction engine.

The backend owns everything an engine should not have to get right again: the index folder and
its settings file, which engine and embedder an index was built with, the write lock, budgets,
deadlines and outcomes.  An engine owns the data in its own sub-folder (``<index>/<engine>/``) and
how it is searched.  A write is two-phase so the backend can enforce the budget rules the same
way for every engine: :meth:`EngineIndex.prepare` (slow work such as embedding, no lock, nothing
written) reports a *projected* size; :meth:`EngineIndex.stage_add` writes files that are not yet
visible and reports the *measured* size; the backend then commits or aborts the
:class:`PendingWrite`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from indexplug.deadlines import Deadline
from indexplug.filters import Filter
from indexplug.passages import Passage
from indexplug.protocols import Readiness


class DeadlineExceeded(Exception):
    """Raised by an engine between stages when its deadline has passed (-> ``IndexTimeout``)."""

    def __init__(self, stage: str) -> None:
        super().__init__(f"the deadline passed before {stage}")
        self.stage = stage


def check_deadline(deadline: Deadline, stage: str) -> None:
    """Stop before ``stage`` if the deadline has passed; engines call this between stages."""
    if deadline.expired():
        raise DeadlineExceeded(stage)


class EngineNotInstalled(Exception):
    """The engine's module or its libraries cannot be imported; the message says what to do."""


class EmbedderUnavailable(Exception):
    """The embedder an index needs cannot be loaded or is not ready (-> ``IndexUnavailable``)."""


class IncompatibleIndex(Exception):
    """The index on disk cannot be served as configured (another embedder, another engine,
    a damaged or foreign store); the message is the reason reported as ``IndexFailed``."""


@dataclass(frozen=True)
class Prepared:
    """A batch ready to stage: the engine's encoded form and its projected on-disk cost."""

    passages: list[Passage]
    projected_bytes: int
    payload: Any = None
    """Engine-private (the native engine: each passage's token vectors)."""


class PendingWrite(Protocol):
    """Files written but not yet visible.  Exactly one of commit/abort is called."""

    def bytes_after(self, extra: int = 0) -> int:
        """The index's measured on-disk size if committed (``extra``: bytes the backend adds)."""
        ...

    def commit(self) -> None: ...

    def abort(self) -> None: ...


@dataclass(frozen=True)
class Staged:
    """What :meth:`EngineIndex.stage_add` staged: the ids added, the ids of the earlier
    passages of the batch's caller keys it removes (in the same write), and the write."""

    added: list[str]
    replaced: list[str]
    pending: PendingWrite


@dataclass(frozen=True)
class Ranked:
    """Search results before they become an outcome: ``(passage, score)`` best first."""

    hits: list[tuple[Passage, float]]
    searched: int
    query_tokens: int
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TokenMatchData:
    query_token: int
    passage_token: int
    similarity: float


@dataclass(frozen=True)
class Explained:
    passage: Passage
    score: float
    matches: list[TokenMatchData]
    query_tokens: list[str] | None
    passage_tokens: list[str] | None


class EngineIndex(Protocol):
    """One index as an engine serves it.  Reads may run from many threads at once; writes
    (``stage_*`` and committing what they return) run under the backend's write lock."""

    embedder_name: str
    """The embedder's canonical name (recorded with the index at its first write)."""
    dim: int

    def live_count(self) -> int: ...

    def known(self, ids: Sequence[str]) -> set[str]: ...

    def size_bytes(self) -> int: ...

    def prepare(self, passages: Sequence[Passage], deadline: Deadline) -> Prepared: ...

    def stage_add(
        self,
        prepared: Prepared,
        deadline: Deadline,
        *,
        keys: Collection[str] = (),
        keep: Collection[str] = (),
    ) -> Staged:
        """Stage the prepared passages that are still new (another writer may have added some
        since ``prepare``) and, in the same write, the removal of every stored passage of
        ``keys`` whose id is not in ``keep`` (the batch): an upsert by caller key that no
        reader sees half done."""
        ...

    def stage_remove(
        self, ids: Sequence[str], deadline: Deadline
    ) -> tuple[list[str], PendingWrite | None]: ...

    def stage_rebuild(self, deadline: Deadline) -> PendingWrite | None: ...

    def search(
        self, query: str, top_k: int, deadline: Deadline, filters: Filter | None = None
    ) -> Ranked:
        """The best ``top_k`` passages for ``query`` among those that pass ``filters``
        (:func:`indexplug.filters.matches` over the stored metadata, applied before ranking,
        so up to ``top_k`` passing passages come back whatever fails it)."""
        ...

    def stored(self, ids: Sequence[str]) -> dict[str, Passage]:
        """The live passages with these ids."""
        ...

    def of_keys(self, keys: Sequence[str]) -> dict[str, list[Passage]]:
        """The live passages of each caller key that has any."""
        ...

    def scan(
        self, after: str | None, limit: int, filters: Filter | None, deadline: Deadline
    ) -> tuple[list[Passage], bool]:
        """Up to ``limit`` live passages with an id above ``after`` that pass ``filters``, in
        ascending id order, and whether more may follow."""
        ...

    def rerank(self, query: str, passages: Sequence[Passage], deadline: Deadline) -> Ranked: ...

    def explain(self, query: str, passage_id: str, deadline: Deadline) -> Explained | None: ...

    def tamper(self, passage_id: str, text: str) -> None: ...

    def tamper_record(self, passage_id: str, changes: Mapping[str, Any]) -> None: ...

    def delete_rows(self, ids: Sequence[str]) -> None: ...

    def details(self) -> dict[str, Any]: ...

    def close(self) -> None: ...


class Engine(Protocol):
    """A late-interaction engine.  ``name`` is what the ``engine`` option selects and what is
    recorded with every index it builds (an index is only ever served by that engine)."""

    name: str
    options: frozenset[str]
    """The backend settings this engine understands."""
    default_embedder: str
    """The embedder of a new index when none is configured."""

    def readiness(self) -> Readiness: ...

    def open(self, folder: Path, embedder_spec: str) -> EngineIndex:
        """Open (or prepare to create) the index whose engine data lives in ``folder``.

        Raises :class:`EmbedderUnavailable` when the embedder cannot be had, and
        :class:`IncompatibleIndex` when the data there cannot be served with it.
        """
        ...

    def close(self) -> None: ...
