"""Deliberately broken backends: each is the reference backend with one rule broken.

They exist to show the conformance kit has teeth: ``test_teeth.py`` runs the whole kit against
each and asserts it fails exactly the checks of the rule broken, with a reason that names it.
Several break rules the guard already polices (a bare list, an empty ``SEARCHED``, a raise):
the kit must then fail with the guard's reason.  The others break rules only the kit can see
(state across calls, honesty under deadlines and outages, fidelity of what comes back).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
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
from indexplug.filters import ALL_OPS, And, Condition, Filter, Not, Or, matches
from indexplug.outcomes import Got, IndexFailed, IndexList, Scanned
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
                key=p.key,
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

    def _write(
        self, index: str, ix: _Index, new: Sequence[Passage], stale: Sequence[str] = ()
    ) -> None:
        snapshot = [p for p in ix.passages.values() if p.id not in set(stale)]
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
    """Correct, but claims nothing (and offers no ``op_drop``): each capability's check must
    say NOT_CLAIMED, not pass."""

    op_drop = None  # type: ignore[assignment]

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


class FillsMissingDigests(ReferenceBackend):
    """Serves a stored passage that has no digest from get and scan with one computed afresh
    from the record as it is now (search stays honest): an edit stripped of its digest then
    passes the guard's check on those paths, and export writes it out as genuine."""

    @staticmethod
    def _sealed(p: Passage) -> Passage:
        return p if p.digest is not None else p.model_copy(update={"digest": p.expected_digest()})

    def get(self, index: str, ids: Sequence[str], **kw: Any) -> Any:
        out = super().get(index, ids, **kw)
        if not isinstance(out, Got):
            return out
        return out.model_copy(update={"passages": [self._sealed(p) for p in out.passages]})

    def scan(self, index: str, **kw: Any) -> Any:
        out = super().scan(index, **kw)
        if not isinstance(out, Scanned):
            return out
        return out.model_copy(update={"passages": [self._sealed(p) for p in out.passages]})


class KeepsDigestInTamperHook(ReferenceBackend):
    """Correct, but its ``tamper_record`` hook ignores ``digest``: the kit must not pass
    ``integrity.digest`` on an edit that kept its digest (which fails for another reason)."""

    def tamper_record(self, index: str, passage_id: str, changes: Mapping[str, object]) -> None:
        super().tamper_record(
            index, passage_id, {k: v for k, v in changes.items() if k != "digest"}
        )


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


# -- the data interface (issue 27): each breaks one rule of get, scan, indexes, drop, keys or
# operator filters


class GetOmitsMissing(ReferenceBackend):
    """Leaves the ids it did not find out of ``missing_ids`` (the guard sees it)."""

    def get(self, index: str, ids: Sequence[str], **kw: Any) -> Any:
        out = super().get(index, ids, **kw)
        return out.model_copy(update={"missing_ids": []}) if isinstance(out, Got) else out


class GetFailsOnMissingIndex(ReferenceBackend):
    """Answers a failure for an index never written, where everything asked is missing."""

    def get(self, index: str, ids: Sequence[str], **kw: Any) -> Any:
        if self._index(index) is None:
            return IndexFailed(index=index, backend=self.name, reason=f"no such index {index}")
        return super().get(index, ids, **kw)


class GetLosesKeyById(ReferenceBackend):
    """Passages read back by id come without their caller key, resealed so the guard cannot
    tell (read back by key, they keep it)."""

    def get(self, index: str, ids: Sequence[str], **kw: Any) -> Any:
        out = super().get(index, ids, **kw)
        if not isinstance(out, Got):
            return out
        wanted = set(ids)
        ps = []
        for p in out.passages:
            if p.id in wanted and p.key is not None:
                bare = p.model_copy(update={"key": None})
                p = bare.model_copy(update={"digest": bare.expected_digest()})
            ps.append(p)
        return out.model_copy(update={"passages": ps})


class GetOmitsMissingKeys(ReferenceBackend):
    """Leaves the keys no passage has out of ``missing_keys`` (the guard sees it)."""

    def get(self, index: str, ids: Sequence[str], **kw: Any) -> Any:
        out = super().get(index, ids, **kw)
        return out.model_copy(update={"missing_keys": []}) if isinstance(out, Got) else out


class ScanSkipsPage(ReferenceBackend):
    """Following a cursor, skips a page: the ids it answers are in order and its cursor is
    its last id, so only comparing with what was added shows the loss."""

    def scan(self, index: str, *, after: str | None, limit: int, **kw: Any) -> Any:
        if after is not None:
            skipped = super().scan(index, after=after, limit=limit, **kw)
            if not isinstance(skipped, Scanned) or skipped.next_after is None:
                return Scanned(index=index, backend=self.name, passages=[], next_after=None)
            after = skipped.next_after
        return super().scan(index, after=after, limit=limit, **kw)


class ScanRepeatsCursor(ReferenceBackend):
    """Takes the cursor as inclusive, so each page repeats the last passage of the one
    before (the guard sees ids not above the cursor)."""

    def scan(self, index: str, *, after: str | None, **kw: Any) -> Any:
        if after is not None:
            after = after[:-1]  # a hair below the cursor: its own id comes again
        return super().scan(index, after=after, **kw)


class IndexesOmitsOne(ReferenceBackend):
    """Lists every index but the last."""

    def indexes(self, *, deadline: Deadline) -> Any:
        out = super().indexes(deadline=deadline)
        if isinstance(out, IndexList) and out.indexes:
            return out.model_copy(update={"indexes": out.indexes[:-1]})
        return out


class DropKeepsPassages(ReferenceBackend):
    """Answers that the index is gone, and deletes nothing."""

    def op_drop(self, index: str, *, deadline: Deadline) -> Any:
        return IndexStatus(index=index, backend=self.name, exists=False, passages=0)


class UpsertKeepsOld(ReferenceBackend):
    """Adds a key's new passages and never removes its old ones."""

    def _write(
        self, index: str, ix: _Index, new: Sequence[Passage], stale: Sequence[str] = ()
    ) -> None:
        super()._write(index, ix, new, ())


class UpsertNotAtomic(ReferenceBackend):
    """Replaces a key's passages in two steps, letting readers in between: first the old
    ones go, then the new ones come (a reader sees neither version whole)."""

    def _write(
        self, index: str, ix: _Index, new: Sequence[Passage], stale: Sequence[str] = ()
    ) -> None:
        if stale:
            super()._write(index, ix, (), stale)
            self._lock.release()  # held once, by add
            try:
                time.sleep(0.005)
            finally:
                self._lock.acquire()
        super()._write(index, ix, new, ())


class NeIgnoresLists(ReferenceBackend):
    """Treats ``$ne`` as passing whenever the field holds a list (the guard sees passages
    that fail the filter)."""

    def _passes(self, flt: Filter, metadata: Mapping[str, Any]) -> bool:
        return matches(_ne_on_lists_passes(flt, metadata), metadata)


def _ne_on_lists_passes(flt: Filter, metadata: Mapping[str, Any]) -> Filter:
    """``flt`` with every ``$ne`` on a list-valued field replaced by ``$exists`` of a field
    no passage has set to false (which always holds)."""
    if isinstance(flt, Condition):
        if flt.op == "$ne" and isinstance(metadata.get(flt.field), list):
            return Condition("\x01always", "$exists", False)
        return flt
    if isinstance(flt, Not):
        return Not(_ne_on_lists_passes(flt.item, metadata))
    items = tuple(_ne_on_lists_passes(i, metadata) for i in flt.items)
    return And(items) if isinstance(flt, And) else Or(items)


class NullIsNotMissing(ReferenceBackend):
    """Holds ``$eq null`` only for a field stored as null, not for one that is missing or an
    empty list (it returns too few, which only comparing with the reference shows)."""

    def _passes(self, flt: Filter, metadata: Mapping[str, Any]) -> bool:
        if isinstance(flt, Condition) and flt.op == "$eq" and flt.value is None:
            return flt.field in metadata and metadata[flt.field] is None
        if isinstance(flt, Not):
            return not self._passes(flt.item, metadata)
        if isinstance(flt, And):
            return all(self._passes(i, metadata) for i in flt.items)
        if isinstance(flt, Or):
            return any(self._passes(i, metadata) for i in flt.items)
        return matches(flt, metadata)


class ClaimsUnknownOperator(ReferenceBackend):
    """Claims a filter operator indexplug.filters does not define."""

    def __init__(self, home: Any = None) -> None:
        super().__init__(home)
        self.capabilities = self.capabilities.model_copy(
            update={"filter_operators": ALL_OPS | {"$regex"}}
        )


class AsyncSearchKeepsOneHit(ReferenceBackend):
    """Has its own coroutine ``asearch`` (the guard awaits it on the event loop), which
    answers only the best hit where the blocking ``search`` answers them all."""

    async def asearch(
        self, index: str, query: str, *, top_k: int, deadline: Deadline, filters: Any = None
    ) -> Any:
        out = self.search(index, query, top_k=top_k, deadline=deadline, filters=filters)
        if isinstance(out, Searched) and len(out.hits) > 1:
            return out.model_copy(update={"hits": out.hits[:1]})
        return out


# -- stats: a count that disagrees with scan


class StatsCountsRemoved(ReferenceBackend):
    """Offers ``op_stats`` whose passage count still includes removed passages (a stale
    counter); only ``stats.counts`` asks it and compares with a scan."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.gone: dict[str, int] = {}

    def remove(self, index: str, ids: Sequence[str], **kw: Any) -> Any:
        out = super().remove(index, ids, **kw)
        self.gone[index] = self.gone.get(index, 0) + int(getattr(out, "removed", 0) or 0)
        return out

    def op_stats(self, index: str, *, deadline: Deadline) -> Any:
        out = super().status(index, deadline=deadline)
        extra = self.gone.get(index, 0)
        if extra and getattr(out, "exists", False):
            return out.model_copy(update={"passages": out.passages + extra})
        return out
