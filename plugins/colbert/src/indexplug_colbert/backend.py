"""The colbert backend: late interaction behind the indexplug contract, engine chosen per index.

This module is engine-neutral.  It turns every op into exactly one outcome, and enforces the
rules an engine should not have to get right again:

* **one engine per index.**  ``index.json`` records the engine that built the index; any other
  engine refuses it (``IndexFailed``).  If the configured engine is not installed the backend is
  not ready (``IndexUnavailable`` with the reason for every op), unless ``fallback = "native"``
  allows the native engine, and then every answer says so (``degraded``; for outcomes without
  that field, ``status`` details and ``explain``'s ``degraded``).
* **one embedder per index.**  Recorded with the index at its first write; a backend configured
  with another answers ``IndexFailed`` naming both, since vectors of different embedders cannot
  be compared.  With no ``embedder`` setting the recorded one is used.
* **budgets** (:mod:`indexplug.budget`): the first write's ``max_bytes`` is kept in
  ``index.json``; a write is projected before anything is written and measured (staged files
  included) before it commits; a refusal leaves the index as it was.
* **deadlines**: checked before each stage (embedding, candidate generation, exact scoring,
  staging, commit); running past one answers ``IndexTimeout`` and commits nothing.
* **one writer at a time** per index (:mod:`.locking`); readers never wait.
* **the data interface** (both engines): ``get`` by id or caller key, ``scan`` in id order
  with a cursor, ``indexes`` with counts, ``op_drop``; every filter operator of
  :mod:`indexplug.filters`, evaluated with :func:`indexplug.filters.matches` itself over the
  stored metadata (so exact by construction) before ranking; caller keys with an upsert the
  engine commits in the same write as the new passages (no reader sees both or neither).
"""

from __future__ import annotations

import shutil
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from indexplug.budget import effective_max_bytes, over_budget
from indexplug.deadlines import Deadline
from indexplug.errors import InvalidRequest
from indexplug.filters import ALL_OPS, Filter, parse_filter
from indexplug.names import validate_index_name
from indexplug.outcomes import (
    AddOutcome,
    BadRequest,
    Degradation,
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
    OverBudget,
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
from indexplug.protocols import Capabilities, Embedder, Granularity, Readiness

from indexplug_colbert.engines import ENGINES, live_count, load_engine
from indexplug_colbert.engines.base import (
    DeadlineExceeded,
    EmbedderUnavailable,
    Engine,
    EngineIndex,
    EngineNotInstalled,
    IncompatibleIndex,
    Ranked,
    check_deadline,
)
from indexplug_colbert.locking import CROSS_PROCESS, write_lock
from indexplug_colbert.models import Explanation, TokenMatch
from indexplug_colbert.plugin import DESCRIPTION
from indexplug_colbert.records import RecordLost
from indexplug_colbert.settings import SETTINGS_FILE, BackendSettings, IndexFacts

SCALE = ScoreScale(
    name="maxsim",
    higher_is_better=True,
    comparable_across_searches=False,
    meaning=(
        "ColBERT MaxSim: for each query token the best cosine with any passage token, summed "
        "over query tokens; grows with query length, so comparable only within one search."
    ),
)
MAX_RERANK = 10_000
LOCKS = ".locks"
T = TypeVar("T")


class _Unavailable(Exception):
    """Raised inside an op to answer ``IndexUnavailable`` with this reason."""


@dataclass
class _Target:
    """One index, resolved for one op: where it is, what it was built with, who serves it."""

    name: str
    folder: Path
    facts: IndexFacts | None
    engine: Engine
    index: EngineIndex
    degraded: list[Degradation] = field(default_factory=list)


class ColbertBackend:
    """See the module docstring; settings are in :class:`~.settings.BackendSettings` and the
    engine's own (``NativeSettings`` for native)."""

    name = "colbert"
    description = DESCRIPTION
    score_scale = SCALE
    capabilities = Capabilities(
        filters=True,
        # filters are evaluated by indexplug.filters.matches itself over each passage's
        # stored metadata (both engines), so every operator is served exactly
        filter_operators=ALL_OPS,
        get=True,
        scan=True,
        indexes=True,
        keys=True,
        deletion=True,
        persistence=True,
        concurrent_writers=True,
        multiprocess_writers=CROSS_PROCESS,
        dense=True,
        # both engines keep each passage's record (a JSON line) apart from its vectors; a
        # vector whose record is gone is INDEX_FAILED (records.RecordLost)
        separate_records=True,
    )

    def __init__(
        self,
        home: Path,
        options: Mapping[str, Any] | None = None,
        embedder_factory: Callable[[str], Embedder] | None = None,
    ) -> None:
        self.home = Path(home)
        self.settings, self._engine_options = BackendSettings.split(dict(options or {}))
        self._embedder_factory = embedder_factory
        self._engines: dict[str, Engine] = {}
        self._engine_errors: dict[str, str] = {}
        self._open: dict[tuple[str, str, str], EngineIndex] = {}
        self._lock = threading.Lock()
        self._load(self.settings.engine)
        if self.settings.fallback:
            self._load(self.settings.fallback)

    # -- engines -------------------------------------------------------------------------
    def _load(self, name: str) -> None:
        """Instantiate engine ``name`` once; remember why if it cannot be."""
        if name in self._engines or name in self._engine_errors:
            return
        try:
            self._engines[name] = load_engine(name, self._options_for(name), self._embedder_factory)
        except EngineNotInstalled as exc:
            self._engine_errors[name] = str(exc)

    def _options_for(self, name: str) -> dict[str, Any]:
        """The settings meant for engine ``name``: all of them for the configured engine (so a
        misspelt one is an error), only those it knows for a fallback."""
        if name == self.settings.engine:
            return dict(self._engine_options)
        from indexplug_colbert.engines import engine_options

        known = engine_options(name)
        return {k: v for k, v in self._engine_options.items() if k in known}

    def _engine_state(self, name: str) -> tuple[Engine | None, str | None]:
        engine = self._engines.get(name)
        if engine is None:
            return None, self._engine_errors.get(name, f"the {name} engine is not loaded")
        try:
            r = engine.readiness()
        except Exception as exc:  # a raising readiness is a not-ready engine
            return None, f"the {name} engine's readiness check raised {type(exc).__name__}: {exc}"
        return (engine, None) if r.ready else (None, f"the {name} engine is not ready: {r.reason}")

    def _serving(self) -> tuple[Engine, list[Degradation]]:
        """The engine that answers now, and the degradation to report when it is a fallback."""
        engine, why = self._engine_state(self.settings.engine)
        if engine is not None:
            return engine, []
        fallback = self.settings.fallback
        if fallback and fallback != self.settings.engine:
            backup, why_not = self._engine_state(fallback)
            if backup is not None:
                reason = (
                    f"{why}; answered by the {fallback} engine instead (fallback = '{fallback}')"
                )
                part = f"engine:{self.settings.engine}"
                return backup, [Degradation(part=part, code="INDEX_UNAVAILABLE", reason=reason)]
            raise _Unavailable(f"{why}; the fallback failed too: {why_not}")
        raise _Unavailable(str(why))

    def readiness(self) -> Readiness:
        try:
            engine, _ = self._serving()
        except _Unavailable as exc:
            return Readiness.no(str(exc))
        spec = self.settings.embedder or getattr(engine, "default_embedder", None)
        if spec and self._embedder_factory is not None:
            try:
                r = self._embedder_factory(spec).readiness()
            except Exception as exc:  # unknown or broken embedder: say so
                return Readiness.no(f"embedder '{spec}' cannot be loaded: {exc}")
            if not r.ready:
                return Readiness.no(f"embedder '{spec}' is not ready: {r.reason}")
        return Readiness.yes()

    def prepare(self) -> None:
        """Load what a search embeds its query with, before the first search's deadline starts
        (the guard calls it once, see :meth:`indexplug.guard.Guard.prepare`): the configured
        embedder's per-token query encoder.  With the embedder's torch-free encoder this is a
        fraction of a second; without it, torch and the model load (seconds, and a search
        that paid it inside its deadline answered ``INDEX_TIMEOUT``).  On a terminal a line on
        stderr says so.  Without an ``embedder`` setting the index names its own, unknown
        until an op names the index: nothing is loaded here."""
        spec = self.settings.embedder
        if not spec or self._embedder_factory is None:
            return
        try:
            engine, _ = self._serving()
        except _Unavailable:
            return
        if engine.name != "native":
            return  # the RAGatouille engine encodes with its checkpoint, per index
        emb = self._embedder_factory(spec)
        if not emb.readiness().ready or Granularity.TOKEN not in emb.granularities:
            return
        announce = sys.stderr.isatty()
        if announce:
            print(f"loading {emb.name} ...", file=sys.stderr, end="", flush=True)
        try:
            emb.embed_query("warm up", Granularity.TOKEN)
        finally:
            if announce:
                print(" done", file=sys.stderr, flush=True)

    # -- resolving an index --------------------------------------------------------------
    def folder(self, index: str) -> Path:
        return self.home / validate_index_name(index)

    def _target(self, index: str) -> _Target:
        engine, degraded = self._serving()
        folder = self.folder(index)
        try:
            facts = IndexFacts.read(folder)
        except ValueError as exc:
            raise IncompatibleIndex(str(exc)) from exc
        if facts is not None and facts.engine != engine.name:
            if degraded:
                raise _Unavailable(
                    f"index '{index}' was built by the {facts.engine} engine, which is "
                    f"unavailable ({degraded[0].reason.split(';')[0]}); the {engine.name} "
                    "fallback cannot serve an index another engine built"
                )
            raise IncompatibleIndex(
                f"index '{index}' was built by the {facts.engine} engine; this backend is "
                f"configured for the {engine.name} engine, and an index is only ever served by "
                f"the engine that built it (set engine={facts.engine}, or drop and re-index)"
            )
        spec = self.settings.embedder or (facts.embedder if facts else engine.default_embedder)
        key = (str(folder), engine.name, spec)
        with self._lock:
            opened = self._open.get(key)
        if opened is None:
            opened = engine.open(folder / engine.name, spec)
            with self._lock:
                opened = self._open.setdefault(key, opened)
        if facts is not None and (opened.embedder_name, opened.dim) != (facts.embedder, facts.dim):
            raise IncompatibleIndex(
                f"index '{index}' was built with embedder '{facts.embedder}' ({facts.dim} dims); "
                f"this backend is configured with '{opened.embedder_name}' ({opened.dim} dims). "
                "Vectors of different embedders cannot be compared: search it with "
                f"--embedder {facts.embedder}, or build another index"
            )
        return _Target(index, folder, facts, engine, opened, degraded)

    def _run(
        self, index: str, deadline: Deadline, body: Callable[[_Target], T]
    ) -> T | IndexTimeout | IndexUnavailable | IndexFailed:
        """Resolve the index and run ``body``, turning every expected failure into its outcome.
        Unexpected exceptions propagate: the guard reports them as ``IndexFailed``."""
        try:
            check_deadline(deadline, "starting")
            return body(self._target(index))
        except DeadlineExceeded as exc:
            return IndexTimeout(
                index=index, backend=self.name, deadline_s=deadline.seconds, reason=str(exc)
            )
        except _Unavailable as exc:
            return IndexUnavailable(index=index, backend=self.name, reason=str(exc))
        except EmbedderUnavailable as exc:
            return IndexUnavailable(index=index, backend=self.name, reason=str(exc))
        except IncompatibleIndex as exc:
            return IndexFailed(
                index=index, backend=self.name, reason=str(exc), error_type="IncompatibleIndex"
            )
        except RecordLost as exc:
            return IndexFailed(
                index=index, backend=self.name, reason=str(exc), error_type="Inconsistent"
            )
        except OSError as exc:
            return IndexFailed(
                index=index,
                backend=self.name,
                reason=f"storage error: {type(exc).__name__}: {exc}",
                error_type=type(exc).__name__,
            )

    def _write_lock(self, index: str, deadline: Deadline) -> Any:
        return write_lock(self.home / LOCKS / f"{index}.lock", deadline)

    # -- ops -----------------------------------------------------------------------------
    def add(
        self, index: str, passages: Sequence[Passage], *, max_bytes: int | None, deadline: Deadline
    ) -> AddOutcome:
        return self._run(index, deadline, lambda t: self._add(t, passages, max_bytes, deadline))

    def _add(
        self, t: _Target, passages: Sequence[Passage], requested: int | None, deadline: Deadline
    ) -> AddOutcome:
        ids = [p.id for p in passages]
        keys = {p.key for p in passages if p.key is not None}
        # Embed outside the lock (the slow part), skipping what is already stored.
        before = t.index.known(ids) if t.facts is not None else set()
        todo = [p for p in passages if p.id not in before]
        # a keyed batch is staged even when nothing in it is new: it may replace passages
        prepared = t.index.prepare(todo, deadline) if todo or keys else None
        check_deadline(deadline, "waiting for the write lock")
        with self._write_lock(t.name, deadline):
            t = self._target(t.name)  # another writer may have created or changed it
            facts = t.facts
            budget = effective_max_bytes(facts.max_bytes if facts else None, requested)
            added: list[str] = []
            replaced: list[str] = []
            size = t.index.size_bytes() + _facts_size(t.folder)
            if prepared is not None:
                new_facts = self._facts_after(t, requested)
                extra = len(new_facts.to_bytes()) if new_facts else _facts_size(t.folder)
                projected = t.index.size_bytes() + prepared.projected_bytes + extra
                refused = over_budget(
                    t.name, self.name, needed=projected, max_bytes=budget, check="projected"
                )
                if refused is not None:
                    return refused
                check_deadline(deadline, "staging the write")
                staged = t.index.stage_add(prepared, deadline, keys=keys, keep=ids)
                added, replaced, pending = staged.added, staged.replaced, staged.pending
                try:
                    if added or replaced:
                        size = pending.bytes_after(extra)
                        refused = over_budget(
                            t.name, self.name, needed=size, max_bytes=budget, check="measured"
                        )
                        if refused is not None:
                            pending.abort()
                            return refused
                        check_deadline(deadline, "committing the write")
                        if new_facts is not None:
                            new_facts.write(t.folder)
                        pending.commit()
                    else:
                        pending.abort()
                except BaseException:
                    pending.abort()
                    raise
        out = Indexed.of_batch(
            index=t.name,
            backend=self.name,
            ids=ids,
            added_ids=added,
            bytes_used=size,
            max_bytes=budget,
        )
        return out.model_copy(update={"replaced": len(replaced)}) if replaced else out

    def _facts_after(self, t: _Target, requested: int | None) -> IndexFacts | None:
        """``index.json`` to write with this add: the first write's facts, or the budget of a
        later write to an index that had none (as every backend does); ``None``: unchanged."""
        if t.facts is None:
            return IndexFacts(
                engine=t.engine.name,
                embedder=t.index.embedder_name,
                dim=t.index.dim,
                max_bytes=requested,
                configured_engine=self.settings.engine if t.degraded else None,
            )
        if t.facts.max_bytes is None and requested is not None:
            return IndexFacts(**{**t.facts.__dict__, "max_bytes": requested})
        return None

    def search(
        self,
        index: str,
        query: str,
        *,
        top_k: int,
        deadline: Deadline,
        filters: Filter | Mapping[str, Any] | None = None,
    ) -> SearchOutcome:
        """The ``top_k`` best passages among those that pass ``filters`` (a parsed filter,
        or its JSON when called without the guard): filtered before ranking."""
        parsed = parse_filter(filters)  # as given by the guard; a bad one raises InvalidRequest

        def body(t: _Target) -> SearchOutcome:
            if t.facts is None:
                return IndexEmpty(index=index, backend=self.name)
            ranked = t.index.search(query, top_k, deadline, parsed)
            return self._ranked(t, ranked)

        return self._run(index, deadline, body)

    def _ranked(self, t: _Target, ranked: Ranked) -> SearchOutcome:
        if ranked.searched == 0:
            return IndexEmpty(index=t.name, backend=self.name)
        if not ranked.hits:
            return NoMatch(
                index=t.name, backend=self.name, searched=ranked.searched, degraded=t.degraded
            )
        # built without validation: the guard checks every hit (ranks, scores, id, digest)
        hits = [
            Hit.from_stored(rank=i, score=score, score_scale=SCALE.name, passage=p)
            for i, (p, score) in enumerate(ranked.hits, start=1)
        ]
        out = Searched.from_stored(
            index=t.name, backend=self.name, hits=hits, searched=ranked.searched, scale=SCALE
        )
        if t.degraded:
            out = out.model_copy(update={"degraded": list(t.degraded)})
        return out

    def remove(self, index: str, ids: Sequence[str], *, deadline: Deadline) -> RemoveOutcome:
        def body(t: _Target) -> RemoveOutcome:
            removed: list[str] = []
            if t.facts is not None:
                with self._write_lock(index, deadline):
                    t = self._target(index)
                    removed, pending = t.index.stage_remove(ids, deadline)
                    if pending is not None:
                        try:
                            check_deadline(deadline, "committing the removal")
                            pending.commit()
                        except BaseException:
                            pending.abort()
                            raise
            return Removed.of_batch(index=index, backend=self.name, ids=ids, removed_ids=removed)

        return self._run(index, deadline, body)

    def get(
        self, index: str, ids: Sequence[str], *, keys: Sequence[str] = (), deadline: Deadline
    ) -> GetOutcome:
        """The live passages with these ids and those of these caller keys, in the order
        asked (each once); what is not there is listed as missing, never an error."""
        if not self._exists(index) and not deadline.expired():
            return Got(
                index=index, backend=self.name, missing_ids=list(ids), missing_keys=list(keys)
            )

        def body(t: _Target) -> Got:
            check_deadline(deadline, "reading the passages")
            found = t.index.stored(ids)
            by_key = t.index.of_keys(keys) if keys else {}
            out: dict[str, Passage] = {i: found[i] for i in ids if i in found}
            for key in keys:
                for p in by_key.get(key, ()):
                    out.setdefault(p.id, p)
            return Got(
                index=index,
                backend=self.name,
                passages=list(out.values()),
                missing_ids=[i for i in ids if i not in out],
                missing_keys=[k for k in keys if k not in by_key],
            )

        return self._run(index, deadline, body)

    def scan(
        self,
        index: str,
        *,
        filters: Filter | Mapping[str, Any] | None = None,
        after: str | None = None,
        limit: int,
        deadline: Deadline,
    ) -> ScanOutcome:
        """Up to ``limit`` live passages with an id above ``after`` that pass ``filters``, in
        ascending id order; ``next_after`` is the page's last id when more may follow."""
        parsed = parse_filter(filters)  # as given by the guard; a bad one raises InvalidRequest
        if not self._exists(index) and not deadline.expired():
            return Scanned(index=index, backend=self.name)

        def body(t: _Target) -> Scanned:
            page, more = t.index.scan(after, limit, parsed, deadline)
            cursor = page[-1].id if more and page else None
            return Scanned(index=index, backend=self.name, passages=page, next_after=cursor)

        return self._run(index, deadline, body)

    def indexes(self, *, deadline: Deadline) -> IndexesOutcome:
        """Every index under the backend's home (a folder with an ``index.json``), with its
        live passages counted from the engine's own commit record (no embedder loaded)."""
        found: list[IndexInfo] = []
        try:
            check_deadline(deadline, "listing the indexes")
            entries = sorted(self.home.iterdir()) if self.home.is_dir() else []
            for entry in entries:
                check_deadline(deadline, "listing the indexes")
                try:
                    name = validate_index_name(entry.name)
                except InvalidRequest:
                    continue  # the locks folder, or something not ours
                facts = IndexFacts.read(entry)
                if facts is None:
                    continue
                if facts.engine not in ENGINES:
                    raise IncompatibleIndex(
                        f"index '{name}' was built by an unknown engine {facts.engine!r}"
                    )
                found.append(IndexInfo(name=name, passages=live_count(facts.engine, entry)))
        except DeadlineExceeded as exc:
            return IndexTimeout(
                index="", backend=self.name, deadline_s=deadline.seconds, reason=str(exc)
            )
        except (IncompatibleIndex, ValueError) as exc:
            return IndexFailed(
                index="", backend=self.name, reason=str(exc), error_type="IncompatibleIndex"
            )
        except OSError as exc:
            return IndexFailed(
                index="",
                backend=self.name,
                reason=f"storage error: {type(exc).__name__}: {exc}",
                error_type=type(exc).__name__,
            )
        return IndexList(index="", backend=self.name, indexes=found)

    def _exists(self, index: str) -> bool:
        return (self.folder(index) / SETTINGS_FILE).is_file()

    def status(self, index: str, *, deadline: Deadline) -> StatusOutcome:
        return self._run(index, deadline, self._status)

    def _status(self, t: _Target) -> IndexStatus:
        if t.facts is None:
            return IndexStatus(index=t.name, backend=self.name, exists=False, passages=0)
        details: dict[str, Any] = {
            "engine": t.facts.engine,
            "path": str(t.folder),
            **t.index.details(),
        }
        if t.facts.configured_engine:
            details["built_by_fallback_for"] = t.facts.configured_engine
        if t.degraded:
            details["degraded"] = [d.model_dump() for d in t.degraded]
        return IndexStatus(
            index=t.name,
            backend=self.name,
            exists=True,
            passages=t.index.live_count(),
            bytes_used=t.index.size_bytes() + _facts_size(t.folder),
            max_bytes=t.facts.max_bytes,
            embedder=t.facts.embedder,
            details=details,
        )

    def close(self) -> None:
        with self._lock:
            opened = list(self._open.values())
            self._open.clear()
        for idx in opened:
            idx.close()
        for engine in self._engines.values():
            engine.close()

    # -- extra ops (Guard.call_extra) ----------------------------------------------------
    def op_rerank(
        self, index: str, *, deadline: Deadline, query: str, passages: Sequence[Passage]
    ) -> Searched | NoMatch | IndexFailed | IndexTimeout | IndexUnavailable | BadRequest:
        """Score the caller's ``passages`` by exact MaxSim for ``query``, without indexing
        them, with the index's embedder (or the configured one if the index does not exist).
        Answers ``Searched`` (every passage, best first) or ``NoMatch`` (no passages, or a
        query with no token)."""
        problem = _rerank_problem(query, passages)
        if problem is not None:
            return BadRequest(index=index, backend=self.name, field=problem[0], reason=problem[1])

        def body(t: _Target) -> Searched | NoMatch:
            if not passages:
                return NoMatch(index=index, backend=self.name, searched=0, degraded=t.degraded)
            out = self._ranked(t, t.index.rerank(query, list(passages), deadline))
            assert isinstance(out, Searched | NoMatch)  # rerank always "searched" its passages
            return out

        return self._run(index, deadline, body)

    def op_explain(
        self, index: str, *, deadline: Deadline, query: str, passage_id: str
    ) -> Explanation | IndexEmpty | BadRequest | IndexFailed | IndexTimeout | IndexUnavailable:
        """For a stored passage: which passage token each query token matched, and how much it
        added to the MaxSim score."""
        if not isinstance(query, str) or not query.strip():
            return BadRequest(index=index, backend=self.name, field="query", reason="empty query")

        def body(t: _Target) -> Explanation | IndexEmpty | BadRequest:
            if t.facts is None or t.index.live_count() == 0:
                return IndexEmpty(index=index, backend=self.name)
            ex = t.index.explain(query, passage_id, deadline)
            if ex is None:
                return BadRequest(
                    index=index,
                    backend=self.name,
                    field="passage_id",
                    reason=f"no passage {str(passage_id)[:64]!r} is stored in index '{index}'",
                )
            total = ex.score

            def text(tokens: list[str] | None, i: int) -> str | None:
                return tokens[i] if tokens is not None and 0 <= i < len(tokens) else None

            # built without validation, as hits are: validating would reject a passage
            # altered on disk as a pydantic error; the guard checks the passage (id and
            # digest) and refuses it with the reason
            return Explanation.model_construct(
                index=index,
                backend=self.name,
                query=query,
                passage=ex.passage,
                score=float(total),
                scale=SCALE,
                matches=[
                    TokenMatch(
                        query_token=m.query_token,
                        query_text=text(ex.query_tokens, m.query_token),
                        passage_token=m.passage_token,
                        passage_text=text(ex.passage_tokens, m.passage_token),
                        similarity=m.similarity,
                        share=m.similarity / total if total > 0 else 0.0,
                    )
                    for m in ex.matches
                ],
                degraded=list(t.degraded),
            )

        return self._run(index, deadline, body)

    def op_rebuild(
        self, index: str, *, deadline: Deadline
    ) -> IndexStatus | OverBudget | IndexFailed | IndexTimeout | IndexUnavailable:
        """Compact: one segment of the live passages (tombstoned ones dropped), codebook
        retrained.  Held to the index's budget like any write."""

        def body(t: _Target) -> IndexStatus | OverBudget:
            if t.facts is None:
                return self._status(t)
            with self._write_lock(index, deadline):
                t = self._target(index)
                pending = t.index.stage_rebuild(deadline)
                if pending is not None:
                    try:
                        size = pending.bytes_after(_facts_size(t.folder))
                        assert t.facts is not None
                        refused = over_budget(
                            index,
                            self.name,
                            needed=size,
                            max_bytes=t.facts.max_bytes,
                            check="measured",
                        )
                        if refused is not None:
                            pending.abort()
                            return refused
                        check_deadline(deadline, "committing the rebuild")
                        pending.commit()
                    except BaseException:
                        pending.abort()
                        raise
                return self._status(t)

        return self._run(index, deadline, body)

    def op_drop(
        self, index: str, *, deadline: Deadline
    ) -> IndexStatus | IndexTimeout | IndexFailed:
        """Delete the index folder entirely (a sensitive op: the CLI and invoke gate it).
        Dropping an index that does not exist answers the same: it does not exist."""
        folder = self.folder(index)
        try:
            check_deadline(deadline, "dropping the index")
            with self._write_lock(index, deadline):
                with self._lock:
                    stale = [k for k in self._open if k[0] == str(folder)]
                    closing = [self._open.pop(k) for k in stale]
                for idx in closing:
                    idx.close()
                # index.json first: a drop cut short leaves no half index that still reads
                # as one (the rest is swept by the rmtree, or by the next drop)
                (folder / SETTINGS_FILE).unlink(missing_ok=True)
                shutil.rmtree(folder, ignore_errors=True)
        except DeadlineExceeded as exc:
            return IndexTimeout(
                index=index, backend=self.name, deadline_s=deadline.seconds, reason=str(exc)
            )
        except OSError as exc:
            return IndexFailed(
                index=index,
                backend=self.name,
                reason=f"storage error: {type(exc).__name__}: {exc}",
                error_type=type(exc).__name__,
            )
        if self._exists(index):
            return IndexFailed(index=index, backend=self.name, reason="the index survived its drop")
        return IndexStatus(index=index, backend=self.name, exists=False, passages=0)

    # -- conformance-kit hooks -----------------------------------------------------------
    def tamper(self, index: str, passage_id: str, new_text: str) -> None:
        """Alter a stored passage's text behind the backend's back (its id is kept)."""
        self._target(index).index.tamper(passage_id, new_text)

    def tamper_record(self, index: str, passage_id: str, changes: Mapping[str, Any]) -> None:
        """Alter fields of a stored passage's record behind the backend's back (``text``,
        ``metadata``, ``licence``, ``provenance``, ``start``, ``end``), its id and digest
        kept and its vectors untouched."""
        self._target(index).index.tamper_record(passage_id, changes)

    def delete_rows(self, index: str, ids: Sequence[str]) -> None:
        """Delete passages' records behind the engine's vectors (which still name them)."""
        self._target(index).index.delete_rows(ids)


def _facts_size(folder: Path) -> int:
    try:
        return (folder / SETTINGS_FILE).stat().st_size
    except FileNotFoundError:
        return 0


def _rerank_problem(query: object, passages: object) -> tuple[str, str] | None:
    if not isinstance(query, str) or not query.strip():
        return "query", "the query is empty"
    if isinstance(passages, str | bytes) or not isinstance(passages, Sequence):
        return "passages", "passages must be a list of Passage"
    if len(passages) > MAX_RERANK:
        return "passages", f"at most {MAX_RERANK} passages per rerank"
    if not all(isinstance(p, Passage) for p in passages):
        return "passages", "passages must be Passage objects"
    return None
