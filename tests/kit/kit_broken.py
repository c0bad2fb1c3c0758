"""Deliberately broken backends: each is the reference backend with one rule broken.

They exist to show the conformance kit has teeth: ``test_teeth.py`` runs the whole kit against
each and asserts it fails exactly the checks of the rule broken, with a reason that names it.
Several break rules the guard already polices (a bare list, an empty ``SEARCHED``, a raise):
the kit must then fail with the guard's reason.  The others break rules only the kit can see
(state across calls, honesty under deadlines and outages, fidelity of what comes back).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from indexplug import (
    Capabilities,
    Deadline,
    IndexStatus,
    NoMatch,
    Passage,
    Readiness,
    Removed,
    Searched,
)
from indexplug.protocols import BackendContext
from indexplug.testing.reference import ReferenceBackend, _Index


class BareListOnNoMatch(ReferenceBackend):
    """Returns ``[]`` when nothing matched (the classic "empty list means nothing found")."""

    def search(self, index: str, query: str, **kw: Any) -> Any:
        out = super().search(index, query, **kw)
        return [] if isinstance(out, NoMatch) else out


class EmptySearched(ReferenceBackend):
    """Answers ``SEARCHED`` with no hits instead of ``NO_MATCH``."""

    def search(self, index: str, query: str, **kw: Any) -> Any:
        out = super().search(index, query, **kw)
        if isinstance(out, NoMatch):
            return Searched(
                index=index,
                backend=self.name,
                hits=[],
                searched=out.searched,
                scale=self.score_scale,
            )
        return out


class RaisesOnMissingIndex(ReferenceBackend):
    """``status`` of an index that does not exist raises, like an unguarded file open."""

    def status(self, index: str, *, deadline: Deadline) -> Any:
        if self._index(index) is None:
            raise FileNotFoundError(f"{index}.json")
        return super().status(index, deadline=deadline)


class MislabelsEmpty(ReferenceBackend):
    """Says ``NO_MATCH`` (searched=0) for an index that holds nothing."""

    def search(self, index: str, query: str, **kw: Any) -> Any:
        out = super().search(index, query, **kw)
        if out.code == "INDEX_EMPTY":
            return NoMatch(index=index, backend=self.name, searched=0)
        return out


class IgnoresBudget(ReferenceBackend):
    """Never holds a write to ``max_bytes``."""

    def add(
        self, index: str, passages: Sequence[Passage], *, max_bytes: int | None, deadline: Deadline
    ) -> Any:
        return super().add(index, passages, max_bytes=None, deadline=deadline)


class ServesTampered(ReferenceBackend):
    """Defeats the guard's integrity check: a passage read back is re-addressed from whatever
    text is stored now, so its id always matches its (altered) content."""

    def search(self, index: str, query: str, **kw: Any) -> Any:
        out = super().search(index, query, **kw)
        if not isinstance(out, Searched):
            return out
        hits = []
        for h in out.hits:
            p = h.passage
            fresh = Passage.create(
                p.text,
                p.source.uri,
                start=p.start,
                end=p.end,
                source=p.source,
                document_sha256=p.document_sha256,
                metadata=p.metadata,
            )
            hits.append(h.model_copy(update={"passage": fresh}))
        return out.model_copy(update={"hits": hits})


class ServesKeptCopies(ReferenceBackend):
    """Keeps every passage it served and serves that copy again, whatever its storage holds
    now (a cache that never looks back at the store): an altered passage goes unnoticed."""

    def search(self, index: str, query: str, **kw: Any) -> Any:
        out = super().search(index, query, **kw)
        if not isinstance(out, Searched):
            return out
        kept: dict[str, Passage] = self.__dict__.setdefault("_served", {})
        hits = [
            h.model_copy(update={"passage": kept.setdefault(h.passage.id, h.passage)})
            for h in out.hits
        ]
        return out.model_copy(update={"hits": hits})


class IgnoresDeadlines(ReferenceBackend):
    """Never looks at its deadline; fast enough that the guard never catches it."""

    def _timeout(self, index: str, deadline: Deadline, where: str) -> None:
        return None


class LeaksOnHostileQuery(ReferenceBackend):
    """Passes the query to a query language unescaped, and its parser raises on syntax."""

    def search(self, index: str, query: str, **kw: Any) -> Any:
        if any(c in query for c in '"*^:()') or "NEAR" in query:
            raise ValueError(f"fts5: syntax error near {query[:10]!r}")
        return super().search(index, query, **kw)


class _NoLock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


class LosesUnderConcurrency(ReferenceBackend):
    """Claims concurrent writers, but holds no lock and writes by read-copy-replace, so
    concurrent adds overwrite each other's work."""

    def __init__(self, home: Any = None) -> None:
        super().__init__(home)
        self._lock = _NoLock()  # type: ignore[assignment]

    def _write(self, index: str, ix: _Index, new: Sequence[Passage]) -> None:
        snapshot = list(ix.passages.values())
        time.sleep(0.002)  # the window in which another writer's work is lost
        fresh = _Index(max_bytes=ix.max_bytes)
        for p in [*snapshot, *new]:
            fresh.put(p)
        self._indexes[index] = fresh
        self._save(index, fresh)


class ReadyWhenNot(ReferenceBackend):
    """Its readiness check always says ready, even when its server is gone."""

    def readiness(self) -> Readiness:
        return Readiness.yes()


class ForgetsRemoval(ReferenceBackend):
    """Reports removals (and counts them in status) but leaves the passages in the index."""

    def __init__(self, home: Any = None) -> None:
        super().__init__(home)
        self._gone: set[tuple[str, str]] = set()

    def remove(self, index: str, ids: Sequence[str], *, deadline: Deadline) -> Any:
        if out := self._timeout(index, deadline, "before removing"):
            return out
        with self._lock:
            ix = self._index(index)
            present = [
                i
                for i in ids
                if ix is not None and i in ix.passages and (index, i) not in self._gone
            ]
            self._gone.update((index, i) for i in present)
        return Removed(
            index=index,
            backend=self.name,
            removed=len(present),
            removed_ids=present,
            missing_ids=[i for i in ids if i not in present],
        )

    def status(self, index: str, *, deadline: Deadline) -> Any:
        out = super().status(index, deadline=deadline)
        if isinstance(out, IndexStatus) and out.exists:
            n = sum(1 for name, _ in self._gone if name == index)
            return out.model_copy(update={"passages": out.passages - n})
        return out


class LosesOnReopen(ReferenceBackend):
    """Claims persistence, but keeps everything in memory."""

    def __init__(self, home: Any = None) -> None:
        super().__init__(None)
        self.capabilities = self.capabilities.model_copy(update={"persistence": True})


class DropsMetadata(ReferenceBackend):
    """Returns passages without their metadata, under a digest recomputed to match.  The
    passage is then intact as far as the guard can tell; only comparing with what was added
    can show the loss."""

    def search(self, index: str, query: str, **kw: Any) -> Any:
        out = super().search(index, query, **kw)
        if not isinstance(out, Searched):
            return out
        hits = []
        for h in out.hits:
            bare = h.passage.model_copy(update={"metadata": {}})
            resealed = bare.model_copy(update={"digest": bare.expected_digest()})
            hits.append(h.model_copy(update={"passage": resealed}))
        return out.model_copy(update={"hits": hits})


class NoCapabilities(ReferenceBackend):
    """Correct, but claims nothing: each capability's check must say NOT_CLAIMED, not pass."""

    def __init__(self, home: Any = None) -> None:
        super().__init__(home)
        self.capabilities = Capabilities(deletion=False)


def factory(cls: type[ReferenceBackend]) -> Any:
    """A backend factory ``(BackendContext) -> backend`` for :func:`run_card`."""

    def make(ctx: BackendContext) -> ReferenceBackend:
        return cls(ctx.home)

    make.__name__ = cls.__name__
    return make


class ResealsOnRead(ReferenceBackend):
    """Recomputes the digest of every passage it returns, from the stored record as it is
    now: a record altered behind its back then looks intact to the guard.  Only comparing
    with what was added shows the change."""

    def search(self, index: str, query: str, **kw: Any) -> Any:
        out = super().search(index, query, **kw)
        if not isinstance(out, Searched):
            return out
        hits = [
            h.model_copy(
                update={
                    "passage": h.passage.model_copy(update={"digest": h.passage.expected_digest()})
                }
            )
            for h in out.hits
        ]
        return out.model_copy(update={"hits": hits})


class SkipsLostRows(ReferenceBackend):
    """Claims separate records, but ranks only the passages whose records are still there
    and calls an index with none left empty: rows deleted behind its postings pass for "no
    match" or "empty" instead of a failure."""

    def search(self, index: str, query: str, **kw: Any) -> Any:
        with self._lock:
            ix = self._index(index)
            if ix is not None:
                for post in ix.postings.values():
                    for pid in [p for p in post if p not in ix.passages]:
                        del post[pid]
                for term in [t for t, post in ix.postings.items() if not post]:
                    del ix.postings[term]
        return super().search(index, query, **kw)
