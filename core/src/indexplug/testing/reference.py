"""A small, correct reference backend: in memory, optionally persisted as JSON.

It exists for two reasons.  The conformance kit's own tests need a backend that passes every
check, so that a family of deliberately broken variants (each a subclass breaking one rule) can
show the kit has teeth.  And a backend author can read it as a worked example of the contract:
every op checks its deadline, answers only typed outcomes, keeps the budget of the first write,
tells ``NO_MATCH`` from ``INDEX_EMPTY``, and carries the kit's hooks (``tamper``,
``make_unavailable``, ``restore``).

It also implements the whole data interface, as the worked example of each optional part:
``get`` (by id and by caller key), ``scan`` (id order, a cursor, filters), ``indexes``,
``op_drop``, caller keys with an atomic upsert (``Indexed.replaced``), and every filter
operator of :mod:`indexplug.filters`, served by :func:`indexplug.filters.matches` itself.

Scoring is a plain TF-IDF over lower-cased word tokens, on the scale ``reference_tfidf``; it is
meant to be obviously right, not good.  With ``home`` given, each index is one JSON file in it,
rewritten atomically (write then rename) after every change, so the backend can claim
persistence; without ``home`` it lives in memory only.  It is safe for concurrent threads (one
lock), not for several processes.
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from indexplug.budget import effective_max_bytes, over_budget
from indexplug.deadlines import Deadline
from indexplug.errors import InvalidRequest
from indexplug.filters import ALL_OPS, Filter, matches, parse_filter
from indexplug.hookspecs import hookimpl
from indexplug.names import validate_index_name
from indexplug.outcomes import (
    AddOutcome,
    GetOutcome,
    Got,
    Hit,
    Indexed,
    IndexEmpty,
    IndexesOutcome,
    IndexFailed,
    IndexInfo,
    IndexList,
    IndexStatus,
    IndexTimeout,
    IndexUnavailable,
    NoMatch,
    Removed,
    RemoveOutcome,
    Scanned,
    ScanOutcome,
    ScoreScale,
    Searched,
    SearchOutcome,
    StatusOutcome,
)
from indexplug.passages import Passage
from indexplug.protocols import BackendContext, BackendSpec, Capabilities, Readiness

__all__ = ["ReferenceBackend", "indexplug_backends", "tokens"]

SCALE = ScoreScale(
    name="reference_tfidf",
    higher_is_better=True,
    comparable_across_searches=False,
    meaning="Sum over query words of term frequency times log(1 + N/df); ties by insertion order.",
)
_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)
MAX_QUERY_TERMS = 256
CHECK_EVERY = 512
"""Loop iterations between deadline checks: cheap, and a long scan still stops promptly."""


def tokens(text: str) -> list[str]:
    """Lower-case runs of letters and digits (the same words FTS5's unicode61 would see)."""
    return _TOKEN.findall(text.lower())


@dataclass
class _Index:
    passages: dict[str, Passage] = field(default_factory=dict)
    """Insertion-ordered; the order breaks score ties, so results are deterministic."""
    postings: dict[str, dict[str, int]] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)
    by_key: dict[str, dict[str, None]] = field(default_factory=dict)
    """The ids of each caller key's passages (an insertion-ordered set per key)."""
    max_bytes: int | None = None

    @property
    def bytes_used(self) -> int:
        return sum(self.sizes.values())

    def put(self, p: Passage) -> None:
        old = self.passages.get(p.id)
        if old is not None:  # the same passage stored again: its record is replaced
            self.drop(p.id)
        self.passages[p.id] = p
        self.sizes[p.id] = _size(p)
        if p.key is not None:
            self.by_key.setdefault(p.key, {})[p.id] = None
        for term, n in _counts(p.text).items():
            self.postings.setdefault(term, {})[p.id] = n

    def drop(self, pid: str) -> None:
        p = self.passages.pop(pid)
        self.sizes.pop(pid, None)
        if p.key is not None:
            ids = self.by_key.get(p.key)
            if ids is not None:
                ids.pop(pid, None)
                if not ids:
                    del self.by_key[p.key]
        for term in _counts(p.text):
            post = self.postings.get(term)
            if post is not None:
                post.pop(pid, None)
                if not post:
                    del self.postings[term]


def _counts(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for t in tokens(text):
        out[t] = out.get(t, 0) + 1
    return out


def _size(p: Passage) -> int:
    """What a passage costs against the budget: its JSON form in bytes (exact, not estimated)."""
    return len(p.model_dump_json().encode("utf-8"))


def as_filter(filters: object) -> Filter | None:
    """What a backend is given in ``filters=`` as a parsed :data:`~indexplug.filters.Filter`:
    the guard hands a backend that claims operators the parsed filter, and one that claims
    only ``filters`` a ``{key: value}`` map of equalities (parsed here the same way)."""
    return parse_filter(filters)


class ReferenceBackend:
    """See the module docstring.  ``home=None`` keeps everything in memory."""

    name = "reference"
    description = "In-memory reference backend of the conformance kit (TF-IDF, optional JSON)."
    score_scale = SCALE

    def __init__(self, home: Path | str | None = None) -> None:
        self.home = Path(home) if home is not None else None
        self.capabilities = Capabilities(
            filters=True,
            filter_operators=ALL_OPS,
            get=True,
            scan=True,
            indexes=True,
            keys=True,
            deletion=True,
            persistence=self.home is not None,
            concurrent_writers=True,
            separate_records=True,
        )
        self._lock = threading.RLock()
        self._indexes: dict[str, _Index] = {}
        self._down: str | None = None

    # -- kit hooks ---------------------------------------------------------------------------
    def make_unavailable(self, reason: str = "simulated outage (make_unavailable)") -> None:
        """Conformance-kit hook: behave like a backend whose server went away."""
        self._down = reason

    def restore(self) -> None:
        """Conformance-kit hook: the server is back; the same instance must serve again."""
        self._down = None

    def tamper(self, index: str, passage_id: str, text: str) -> None:
        """Conformance-kit hook: alter a stored passage's text behind the backend's back.

        The id is kept, so the stored passage no longer matches its content address; the
        guard must then refuse to serve it.  The postings are left as they were, as a real
        index's would be after someone edited its storage.
        """
        with self._lock:
            ix = self._index(index)
            if ix is None or passage_id not in ix.passages:
                raise KeyError(f"no passage {passage_id[:12]} in index {index!r}")
            old = ix.passages[passage_id]
            ix.passages[passage_id] = Passage.from_stored(
                id=old.id,
                text=text,
                source=old.source,
                start=old.start,
                end=old.end,
                document_sha256=old.document_sha256,
                metadata=old.metadata,
                digest=old.digest,
                key=old.key,
            )
            self._save(index, ix)

    def tamper_record(self, index: str, passage_id: str, changes: Mapping[str, object]) -> None:
        """Conformance-kit hook: alter fields of a stored passage behind the backend's back
        (``text``, ``metadata``, ``licence``, ``provenance``, ``start``, ``end``, and
        ``digest``: ``None`` removes it), keeping its id and digest unless named, as someone
        editing the index's file would."""
        with self._lock:
            ix = self._index(index)
            if ix is None or passage_id not in ix.passages:
                raise KeyError(f"no passage {passage_id[:12]} in index {index!r}")
            old = ix.passages[passage_id]
            fields: dict[str, Any] = {
                "text": old.text,
                "start": old.start,
                "end": old.end,
                "metadata": dict(old.metadata),
            }
            fields.update({k: v for k, v in changes.items() if k in fields})
            source = old.source.model_copy(
                update={k: v for k, v in changes.items() if k in ("licence", "provenance")}
            )
            ix.passages[passage_id] = Passage.from_stored(
                id=old.id,
                source=source,
                document_sha256=old.document_sha256,
                digest=cast(str | None, changes.get("digest", old.digest)),
                key=old.key,
                **fields,
            )
            self._save(index, ix)

    def delete_rows(self, index: str, ids: Sequence[str]) -> None:
        """Conformance-kit hook: delete stored passages but not their postings, as a real
        index's rows might be deleted behind its full-text index."""
        with self._lock:
            ix = self._index(index)
            if ix is None:
                raise KeyError(f"no index {index!r}")
            for pid in ids:
                ix.passages.pop(pid, None)
            self._save(index, ix)

    # -- protocol ----------------------------------------------------------------------------
    def readiness(self) -> Readiness:
        return Readiness.no(self._down) if self._down else Readiness.yes()

    def close(self) -> None:
        with self._lock:
            self._indexes.clear()

    def _unavailable(self, index: str) -> IndexUnavailable | None:
        if self._down:
            return IndexUnavailable(index=index, backend=self.name, reason=self._down)
        return None

    def _inconsistent(self, index: str) -> IndexFailed:
        return IndexFailed(
            index=index,
            backend=self.name,
            reason="the postings name passages whose records are gone (deleted behind the "
            "index); rebuild it",
            error_type="Inconsistent",
        )

    def _timeout(self, index: str, deadline: Deadline, where: str) -> IndexTimeout | None:
        """``IndexTimeout`` once the deadline has passed: the answer would be late, and a late
        "nothing found" would pass for evidence of absence."""
        if deadline.expired():
            return IndexTimeout(
                index=index,
                backend=self.name,
                deadline_s=deadline.seconds,
                reason=f"the deadline passed {where}",
            )
        return None

    def add(
        self, index: str, passages: Sequence[Passage], *, max_bytes: int | None, deadline: Deadline
    ) -> AddOutcome:
        """Store the new passages; a keyed batch also replaces, in the same step under the
        lock, every earlier passage of its keys that it does not hold (an upsert: a reader
        sees the key's old passages or its new ones, never both and never neither)."""
        if out := self._unavailable(index) or self._timeout(index, deadline, "before adding"):
            return out
        with self._lock:
            ix = self._index(index) or _Index()
            new = [p for p in passages if p.id not in ix.passages]
            batch = {p.id for p in passages}
            keys = dict.fromkeys(p.key for p in passages if p.key is not None)
            stale = [pid for k in keys for pid in ix.by_key.get(k, {}) if pid not in batch]
            budget = effective_max_bytes(ix.max_bytes, max_bytes)
            if new:
                needed = (
                    ix.bytes_used
                    - sum(ix.sizes.get(pid, 0) for pid in stale)
                    + sum(_size(p) for p in new)
                )
                refused = over_budget(
                    index, self.name, needed=needed, max_bytes=budget, check="measured"
                )
                if refused is not None:
                    return refused
            if out := self._timeout(index, deadline, "before the write was applied"):
                return out
            if ix.max_bytes is None and max_bytes is not None:
                ix.max_bytes = max_bytes
            self._write(index, ix, new, stale)
            done = Indexed.of_batch(
                index=index,
                backend=self.name,
                ids=[p.id for p in passages],
                added_ids=[p.id for p in new],
                bytes_used=ix.bytes_used,
                max_bytes=budget,
            )
            return done.model_copy(update={"replaced": len(stale)}) if stale else done

    def _write(
        self, index: str, ix: _Index, new: Sequence[Passage], stale: Sequence[str] = ()
    ) -> None:
        """Apply a write (under the lock): remove the ``stale`` passages an upsert replaces,
        store ``new``, and persist it once; separate so that a broken variant can override
        just this step."""
        for pid in stale:
            ix.drop(pid)
        for p in new:
            ix.put(p)
        self._indexes[index] = ix
        self._save(index, ix)

    def search(
        self,
        index: str,
        query: str,
        *,
        top_k: int,
        deadline: Deadline,
        filters: Any = None,
    ) -> SearchOutcome:
        if out := self._unavailable(index) or self._timeout(index, deadline, "before searching"):
            return out
        flt = as_filter(filters)
        with self._lock:
            ix = self._index(index)
            if ix is None or (not ix.passages and not ix.postings):
                return IndexEmpty(index=index, backend=self.name)
            if not ix.passages:
                return self._inconsistent(index)
            n = len(ix.passages)
            terms = list(dict.fromkeys(tokens(query)))[:MAX_QUERY_TERMS]
            scores: dict[str, float] = {}
            steps = 0
            for term in terms:
                post = ix.postings.get(term)
                if not post:
                    continue
                idf = math.log(1 + n / len(post))
                for pid, tf in post.items():
                    steps += 1
                    if steps % CHECK_EVERY == 0 and (
                        out := self._timeout(index, deadline, "while scoring")
                    ):
                        return out
                    p = ix.passages.get(pid)
                    if p is None:
                        return self._inconsistent(index)
                    if flt is not None and not self._passes(flt, p.metadata):
                        continue
                    scores[pid] = scores.get(pid, 0.0) + tf * idf
            order = {pid: i for i, pid in enumerate(ix.passages)}
            best = sorted(scores, key=lambda pid: (-scores[pid], order[pid]))[:top_k]
            # from_stored: validating would reject a passage altered in storage with a
            # pydantic error; the guard is where that is caught and reported (INDEX_FAILED).
            hits = [
                Hit.from_stored(
                    rank=i,
                    score=scores[pid],
                    score_scale=SCALE.name,
                    passage=ix.passages[pid],
                )
                for i, pid in enumerate(best, start=1)
            ]
        if out := self._timeout(index, deadline, "while searching"):
            return out
        if not hits:
            return NoMatch(index=index, backend=self.name, searched=n)
        return Searched(index=index, backend=self.name, hits=hits, searched=n, scale=SCALE)

    def remove(self, index: str, ids: Sequence[str], *, deadline: Deadline) -> RemoveOutcome:
        if out := self._unavailable(index) or self._timeout(index, deadline, "before removing"):
            return out
        with self._lock:
            ix = self._index(index)
            present = [i for i in ids if ix is not None and i in ix.passages]
            if ix is not None and present:
                for pid in present:
                    ix.drop(pid)
                self._save(index, ix)
        return Removed.of_batch(index=index, backend=self.name, ids=ids, removed_ids=present)

    def status(self, index: str, *, deadline: Deadline) -> StatusOutcome:
        if out := self._unavailable(index) or self._timeout(index, deadline, "before status"):
            return out
        with self._lock:
            ix = self._index(index)
            if ix is None:
                return IndexStatus(index=index, backend=self.name, exists=False, passages=0)
            return IndexStatus(
                index=index,
                backend=self.name,
                exists=True,
                passages=len(ix.passages),
                bytes_used=ix.bytes_used,
                max_bytes=ix.max_bytes,
            )

    def _passes(self, flt: Filter, metadata: Mapping[str, Any]) -> bool:
        """Whether a passage passes a filter: :func:`indexplug.filters.matches`, the reference
        meaning itself; separate so that a broken variant can override just this step."""
        return matches(flt, metadata)

    def get(
        self, index: str, ids: Sequence[str], *, keys: Sequence[str] = (), deadline: Deadline
    ) -> GetOutcome:
        """The passages with these ids (in the order asked), then those of these keys; what is
        not there is listed as missing.  An index never written is no error: all missing."""
        if out := self._unavailable(index) or self._timeout(index, deadline, "before get"):
            return out
        with self._lock:
            ix = self._index(index)
            store = ix.passages if ix is not None else {}
            found = {pid: store[pid] for pid in ids if pid in store}
            by_key = ix.by_key if ix is not None else {}
            for k in keys:
                for pid in by_key.get(k, {}):
                    found.setdefault(pid, store[pid])
            return Got(
                index=index,
                backend=self.name,
                passages=list(found.values()),
                missing_ids=[pid for pid in ids if pid not in store],
                missing_keys=[k for k in keys if k not in by_key],
            )

    def scan(
        self,
        index: str,
        *,
        filters: Any,
        after: str | None,
        limit: int,
        deadline: Deadline,
    ) -> ScanOutcome:
        """Up to ``limit`` passages with an id above ``after`` that pass ``filters``, in id
        order; ``next_after`` is the last id when another passing one follows, else None."""
        if out := self._unavailable(index) or self._timeout(index, deadline, "before scan"):
            return out
        flt = as_filter(filters)
        with self._lock:
            ix = self._index(index)
            if ix is None:
                return Scanned(index=index, backend=self.name, passages=[], next_after=None)
            page: list[Passage] = []
            more = False
            for steps, pid in enumerate(sorted(ix.passages), start=1):
                if steps % CHECK_EVERY == 0 and (
                    out := self._timeout(index, deadline, "while scanning")
                ):
                    return out
                if after is not None and pid <= after:
                    continue
                p = ix.passages[pid]
                if flt is not None and not self._passes(flt, p.metadata):
                    continue
                if len(page) == limit:
                    more = True
                    break
                page.append(p)
        return Scanned(
            index=index,
            backend=self.name,
            passages=page,
            next_after=page[-1].id if more else None,
        )

    def indexes(self, *, deadline: Deadline) -> IndexesOutcome:
        """Every index this backend holds (in memory, and for a home, every index file in
        it), with its passage count."""
        if out := self._unavailable("") or self._timeout("", deadline, "before indexes"):
            return out
        with self._lock:
            names = set(self._indexes)
            if self.home is not None and self.home.is_dir():
                names.update(f.stem for f in self.home.glob("*.json"))
            infos = []
            for name in sorted(names):
                try:
                    validate_index_name(name)
                except InvalidRequest:
                    continue  # not an index of ours (a stray file)
                ix = self._index(name)
                if ix is not None:
                    infos.append(IndexInfo(name=name, passages=len(ix.passages)))
        return IndexList(index="", backend=self.name, indexes=infos)

    def op_drop(self, index: str, *, deadline: Deadline) -> StatusOutcome:
        """Delete the whole index (its file too); dropping one that does not exist is fine."""
        if out := self._unavailable(index) or self._timeout(index, deadline, "before drop"):
            return out
        with self._lock:
            self._indexes.pop(index, None)
            path = self._path(index)
            if path is not None:
                path.unlink(missing_ok=True)
        return IndexStatus(index=index, backend=self.name, exists=False, passages=0)

    # -- storage -----------------------------------------------------------------------------
    def _path(self, index: str) -> Path | None:
        return None if self.home is None else self.home / f"{index}.json"

    def _index(self, index: str) -> _Index | None:
        """The index from memory, else from its file (first use after a reopen)."""
        ix = self._indexes.get(index)
        if ix is not None:
            return ix
        path = self._path(index)
        if path is None or not path.exists():
            return None
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        ix = _Index(max_bytes=data.get("max_bytes"))
        for d in data["passages"]:
            ix.put(Passage.from_stored(**d))
        self._indexes[index] = ix
        return ix

    def _save(self, index: str, ix: _Index) -> None:
        path = self._path(index)
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {
            "max_bytes": ix.max_bytes,
            "passages": [p.model_dump(mode="json") for p in ix.passages.values()],
        }
        tmp = path.with_name(f".{path.name}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
        os.replace(tmp, path)


def _factory(ctx: BackendContext) -> ReferenceBackend:
    persist = str(ctx.options.get("persist", "true")).lower() not in ("0", "false", "no")
    return ReferenceBackend(ctx.home if persist else None)


@hookimpl
def indexplug_backends() -> list[BackendSpec]:
    """Lets the reference be registered as a plugin (``indexplug conformance reference``) by
    anyone who wants it listed; core does not register it by default."""
    return [
        BackendSpec(name="reference", factory=_factory, description=ReferenceBackend.description)
    ]
