"""Ops by name, JSON in and out: ``indexplug.invoke(op, args, config=...)``.

``invoke("search", {"index": "docs", "query": "otters"})`` validates the arguments with the op's
model, runs the op against the configured index and answers one JSON object (see
:class:`indexplug.ops.Answer`).  It never raises for a bad request: malformed arguments answer
``BAD_REQUEST`` naming the field, a sensitive op the configuration does not allow answers
``NOT_ALLOWED``, and anything unexpected answers ``INDEX_FAILED`` with the error's type.
Arguments are JSON and strictly typed: text that is not JSON, ``NaN``, nesting deeper than
:data:`MAX_ARGS_DEPTH`, ``"top_k": "3"`` or ``true`` are all ``BAD_REQUEST``, never converted.

:class:`Invoker` is the long-lived form (the MCP server holds one): it keeps each index's backend
open between calls.  ``invoke()`` makes one for a single call and closes it.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import os
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from indexplug.audit import AuditError, AuditLog
from indexplug.audit import page as audit_page
from indexplug.config import Config, Defaults, find_config_file, fused_target, load_config
from indexplug.errors import (
    ConfigError,
    InvalidIndexName,
    InvalidRequest,
    UnknownBackend,
    UnknownEmbedder,
)
from indexplug.fusion import FUSION_BACKEND, fuse_targets
from indexplug.invoke_add import _add_fresh, _all_known, _ids_of, _to_passage, _with_known
from indexplug.invoke_parse import MAX_ARGS_DEPTH as MAX_ARGS_DEPTH
from indexplug.invoke_parse import _validation_reason
from indexplug.invoke_parse import nesting_depth as nesting_depth
from indexplug.invoke_parse import parse_args as parse_args
from indexplug.invoke_records import AUDITED as AUDITED
from indexplug.invoke_records import CALLERS as CALLERS
from indexplug.invoke_records import change_record as change_record
from indexplug.invoke_render import _batch_item, _failure, _refused_item
from indexplug.invoke_render import bad_request as bad_request
from indexplug.invoke_render import exit_code as exit_code
from indexplug.invoke_render import folder_code as folder_code
from indexplug.invoke_render import refusal as refusal
from indexplug.names import validate_index_name
from indexplug.neighbours import chunkings, expand, record_chunking
from indexplug.ops import (
    BATCH_ANSWERED,
    OPS,
    UNTRUSTED_NOTICE,
    AddArgs,
    AddData,
    Answer,
    AuditArgs,
    AuditData,
    BackendsData,
    BatchData,
    BatchEvidence,
    BatchItem,
    BatchSearchArgs,
    ClearHistoryArgs,
    ClearHistoryData,
    ConfigEvidence,
    CopyArgs,
    CopyData,
    CopyEvidence,
    DropArgs,
    ExportArgs,
    ExportData,
    ExportHistoryArgs,
    ExportHistoryData,
    FolderEvidence,
    GetArgs,
    GetData,
    HistoryArgs,
    HistoryData,
    HitOut,
    ImportArgs,
    ImportData,
    IndexesArgs,
    IndexesData,
    IndexEvidence,
    IndexFolderArgs,
    IndexReadiness,
    LogSearchArgs,
    LogSearchData,
    OpInfo,
    OpsData,
    PackArgs,
    Problem,
    ProblemRow,
    RemoveArgs,
    RemoveData,
    ScanArgs,
    ScanData,
    SearchArgs,
    SearchData,
    SearchEvidence,
    StatusArgs,
    StatusData,
    VerificationOut,
    WriteEvidence,
    _SearchCommon,
    batch_code,
)
from indexplug.outcomes import (
    Got,
    Indexed,
    IndexFailed,
    IndexList,
    IndexStatus,
    IndexTimeout,
    IndexUnavailable,
    NoMatch,
    NotAllowed,
    OverBudget,
    Removed,
    Scanned,
    Searched,
)
from indexplug.packing import pack
from indexplug.plugins import get_registry
from indexplug.pools import LazyPool
from indexplug.targets import Target

if TYPE_CHECKING:
    from indexplug.history import HistoryStore
    from indexplug.transfer import Progress

BATCH_WORKERS = 8
DEFAULT_FOLDER_DEADLINE_S = 120.0
BLOCKING = LazyPool(32, "indexplug-invoke")
""":meth:`Invoker.ainvoke`'s threads for the ops that have no coroutine form (index_folder,
export, import, copy, backends, ops) and for context expansion: never the event loop's."""
PROGRESS: contextvars.ContextVar[Progress | None] = contextvars.ContextVar(
    "indexplug_progress", default=None
)
"""The progress callback of the op running in this context (``invoke(..., progress=)``)."""
CALLER: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "indexplug_caller", default=None
)
"""Who makes the calls in this context, where it is not the invoker's own caller: the HTTP
server sets it to the name of each request's token."""


class Invoker:
    """Runs ops against one configuration, keeping backends open between calls."""

    def __init__(self, config: Config | None = None, *, caller: str = "python") -> None:
        self.config = (
            config if config is not None else Config(defaults=Defaults(backend="sqlite-fts5"))
        )
        self.caller = caller
        """Who the audit log and search history record as making the calls."""
        self.serving_http = False
        """Set by the HTTP server: the audit log is on by default there."""
        self._audit_log: AuditLog | None = None
        self._history: HistoryStore | None = None
        self.history_failures = 0
        """Searches not recorded because the history could not be opened or written."""
        self._targets: dict[str, Target] = {}
        self._lock = threading.RLock()
        self._runners: dict[str, Callable[[Any], Answer[Any, Any]]] = {
            "add": self._add,
            "search": self._search,
            "batch_search": self._batch_search,
            "pack": self._pack,
            "remove": self._remove,
            "status": self._status,
            "backends": self._backends,
            "index_folder": self._index_folder,
            "ops": self._ops,
            "get": self._get,
            "scan": self._scan,
            "indexes": self._indexes,
            "drop": self._drop,
            "export": self._export,
            "import": self._import,
            "copy": self._copy,
            "audit": self._audit,
            "history": self._history_op,
            "export_history": self._export_history,
            "log_search": self._log_search,
            "clear_history": self._clear_history,
            "stats": self._stats,
            "similarity": self._similarity,
        }
        self._arunners: dict[str, Callable[[Any], Awaitable[Answer[Any, Any]]]] = {
            "add": self._aadd,
            "search": self._asearch,
            "batch_search": self._abatch_search,
            "pack": self._apack,
            "remove": self._aremove,
            "status": self._astatus,
            "get": self._aget,
            "scan": self._ascan,
            "indexes": self._aindexes,
            "drop": self._adrop,
        }

    @classmethod
    def from_source(cls, config: Config | Path | str | None = None) -> Invoker:
        """An invoker for a :class:`Config`, a file, or the discovered file (or none)."""
        if isinstance(config, Config):
            return cls(config)
        path = find_config_file(Path(config) if config is not None else None)
        return cls(load_config(path) if path is not None else None)

    # -- lifecycle -----------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            targets, self._targets = list(self._targets.values()), {}
        for t in targets:
            t.guard.close()

    def __enter__(self) -> Invoker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- targets -------------------------------------------------------------------------
    def target(self, name: str) -> Target:
        """The (cached) target of a configured or default-backend index."""
        validate_index_name(name)
        with self._lock:
            if name in self._targets:
                return self._targets[name]
            ic = self.config.index(name)
            if ic.kind == "fusion":
                t = fuse_targets(
                    [self.target(m) for m in ic.members],
                    name=name,
                    method=ic.fusion,
                    rrf_k=ic.rrf_k,
                )
            else:
                t = self.config.target(name)
            self._targets[name] = t
            return t

    def _search_target(self, a: _SearchCommon) -> Target:
        if (a.index is None) == (a.indexes is None):
            raise InvalidRequest("give exactly one of 'index' or 'indexes'", field="index")
        if a.index is not None:
            return self.target(a.index)
        names = list(a.indexes or [])
        for i, n in enumerate(names):
            try:
                validate_index_name(n)
            except InvalidIndexName as exc:
                raise InvalidRequest(str(exc), field=f"indexes.{i}") from None
        key = f"\x00fused:{a.fusion}:{a.rrf_k}:{','.join(names)}"
        with self._lock:
            if key not in self._targets:
                self._targets[key] = fused_target(
                    self.config, names, method=a.fusion, rrf_k=a.rrf_k, member=self.target
                )
            return self._targets[key]

    def deadline_for(self, name: str, asked: float | None) -> float | None:
        if asked is not None:
            return asked
        ic = self.config.indexes.get(name)
        if ic is not None and ic.deadline_s is not None:
            return ic.deadline_s
        return self.config.defaults.deadline_s

    def allows_remove(self, name: str) -> bool:
        ic = self.config.indexes.get(name)
        if not self.config.allows_remove(name):
            return False
        if ic is not None and ic.kind == "fusion":
            return all(self.config.allows_remove(m) for m in ic.members)
        return True

    def allows_upsert(self, name: str) -> bool:
        """Whether a keyed add may run on ``name`` (for a fusion: on it and every member)."""
        ic = self.config.indexes.get(name)
        if not self.config.allows_upsert(name):
            return False
        if ic is not None and ic.kind == "fusion":
            return all(self.config.allows_upsert(m) for m in ic.members)
        return True

    def allows(self, op: str) -> bool:
        """Whether ``op`` may run for at least one index (what the MCP server lists)."""
        spec = OPS[op]
        if not spec.sensitive:
            return True
        return self.config.defaults.allow_remove or any(
            self.allows_remove(n) for n in self.config.indexes
        )

    def audits(self, index: str) -> bool:
        """Whether a change to ``index`` is recorded in the audit log: ``[audit] enabled``
        on or off, else (auto) when serving HTTP or when the index allows remove."""
        mode = self.config.audit.enabled
        if mode != "auto":
            return mode == "on"
        return self.serving_http or self.allows_remove(index)

    def current_caller(self) -> str:
        """Who the calls in this context are recorded as made by: :data:`CALLER` where set
        (a token's name over HTTP), else :attr:`caller`."""
        return CALLER.get() or self.caller

    def audit_log(self) -> AuditLog:
        if self._audit_log is None:
            self._audit_log = AuditLog(max_ids=self.config.audit.max_ids)
        return self._audit_log

    def history_store(self) -> HistoryStore:
        """The search history store (opened on first use: only where history is on)."""
        if self._history is None:
            from indexplug.history import store

            h = self.config.history
            self._history = store(
                queue_size=h.queue, max_rows=h.max_rows, max_age_s=h.max_age_days * 86400
            )
        return self._history

    def _record_search(
        self, t: Target, a: _SearchCommon, query: str, out: Any, mode: str, started: float
    ) -> None:
        """Queue the record of a search the guard answered (never blocks, never raises)."""
        latency_ms = (time.perf_counter() - started) * 1000
        hits = [(h.passage.id, h.score, h.rank) for h in getattr(out, "hits", None) or []]
        try:
            self.history_store().record(
                caller=self.current_caller(),
                op="batch_search" if isinstance(a, BatchSearchArgs) else "search",
                index=t.index,
                backend=t.backend_name,
                mode=mode,
                query=query,
                top_k=a.top_k,
                filters=a.filters,
                outcome=str(out.code),
                hits=hits,
                latency_ms=latency_ms,
            )
        except Exception:  # a history that cannot be opened never fails a search
            self.history_failures += 1

    def _record_change(
        self, op: str, parsed: Any, answer: dict[str, Any], caller: str | None = None
    ) -> dict[str, Any]:
        """Append ``op``'s record to the audit log; when that fails after the change ran,
        the answer says so (the change is not undone)."""
        who = caller or self.current_caller()
        try:
            self.audit_log().append(**change_record(op, parsed, answer, who))
        except (AuditError, OSError) as exc:
            answer = {
                **answer,
                "message": f"{answer.get('message', '')} The audit log could "
                f"not record this change: {exc}",
            }
        return answer

    # -- the entry point -----------------------------------------------------------------
    def invoke(
        self,
        op: str,
        args: Mapping[str, Any] | str | bytes | None = None,
        *,
        progress: Progress | None = None,
    ) -> dict[str, Any]:
        """Run ``op`` with ``args`` (a mapping or JSON text); answer a JSON-ready dict.
        ``progress(done, total)`` hears how a long write (add, import, copy, export,
        index_folder) goes."""
        prepared = self._prepare(op, args)
        if isinstance(prepared, dict):
            return prepared
        parsed, index = prepared
        token = PROGRESS.set(progress)
        audited = op in AUDITED and self.audits(index)
        logged = audited
        try:
            refused = self._gate(op, index, parsed)
            if refused is None and audited:
                try:  # no change is made that the audit log could not record
                    self.audit_log().check()
                except AuditError:
                    logged = False
                    raise
            answer = refused if refused is not None else self._runners[op](parsed)
        except Exception as exc:
            answer = self._error(op, index, exc)
        finally:
            PROGRESS.reset(token)
        out = answer if isinstance(answer, dict) else answer.model_dump(mode="json")
        return self._record_change(op, parsed, out) if logged else out

    async def ainvoke(
        self,
        op: str,
        args: Mapping[str, Any] | str | bytes | None = None,
        *,
        progress: Progress | None = None,
    ) -> dict[str, Any]:
        """:meth:`invoke` as a coroutine, for an event loop (the MCP server).  The ops with a
        coroutine form on the guard (search, batch_search, pack, add, remove, status, get,
        scan, indexes, drop) await it, so a slow backend holds no thread of the loop's; the
        others run on :data:`BLOCKING`'s threads.  Same answers as :meth:`invoke`."""
        import asyncio

        prepared = self._prepare(op, args)
        if isinstance(prepared, dict):
            return prepared
        parsed, index = prepared
        token = PROGRESS.set(progress)
        audited = op in AUDITED and self.audits(index)
        logged = audited
        loop = asyncio.get_running_loop()
        try:
            refused = self._gate(op, index, parsed)
            if refused is None and audited:
                try:  # no change is made that the audit log could not record
                    await loop.run_in_executor(BLOCKING.get(), self.audit_log().check)
                except AuditError:
                    logged = False
                    raise
            if refused is not None:
                answer: Answer[Any, Any] | dict[str, Any] = refused
            elif op in self._arunners:
                answer = await self._arunners[op](parsed)
            else:
                ctx = contextvars.copy_context()
                answer = await loop.run_in_executor(
                    BLOCKING.get(), ctx.run, self._runners[op], parsed
                )
        except Exception as exc:
            answer = self._error(op, index, exc)
        finally:
            PROGRESS.reset(token)
        out = answer if isinstance(answer, dict) else answer.model_dump(mode="json")
        if not logged:
            return out
        who = self.current_caller()  # the executor's thread does not see this context
        return await loop.run_in_executor(BLOCKING.get(), self._record_change, op, parsed, out, who)

    def _prepare(
        self, op: str, args: Mapping[str, Any] | str | bytes | None
    ) -> dict[str, Any] | tuple[Any, str]:
        """The op's parsed arguments and index, or the refusal of a bad request."""
        if not isinstance(op, str) or op not in OPS:
            known = ", ".join(OPS)
            return bad_request(str(op), f"no op named {op!r} (ops: {known})", field="op")
        if isinstance(args, str | bytes):
            try:
                args = parse_args(args)
            except InvalidRequest as exc:
                return bad_request(op, str(exc), field=exc.field)
        if args is None:
            args = {}
        if not isinstance(args, Mapping):
            return bad_request(op, f"args must be a JSON object, not {type(args).__name__}", "args")
        spec = OPS[op]
        try:
            if nesting_depth(args) > MAX_ARGS_DEPTH:
                return bad_request(op, f"args nest deeper than {MAX_ARGS_DEPTH} levels", "args")
            parsed = spec.args.model_validate(dict(args))
        except ValidationError as exc:
            reason, field = _validation_reason(exc)
            return bad_request(op, reason, field=field)
        except Exception as exc:  # a mapping that cannot even be read as arguments
            return bad_request(op, f"args cannot be read: {type(exc).__name__}", "args")
        return parsed, str(getattr(parsed, "index", "") or "")

    def _gate(self, op: str, index: str, parsed: Any) -> dict[str, Any] | None:
        """``NOT_ALLOWED`` for a sensitive op on an index the configuration does not allow it
        on (remove, drop, import, and copy into ``index``: as ``allow_remove`` says), and for an
        add with a caller key (an upsert, which replaces the key's passages) where neither
        ``allow_upsert`` nor ``allow_remove`` holds.  ``index_folder`` passes the same gate
        inside, only where it would drop the index (see :func:`indexplug.ingest.index_folder`)."""
        keyed = op == "add" and any(p.key is not None for p in parsed.passages)
        if keyed and not self.allows_upsert(index):
            return refusal(
                op,
                NotAllowed(
                    index=index,
                    op=op,
                    reason=f"an add with a key replaces that key's passages, and the "
                    f"configuration does not allow that on index '{index}' (set "
                    "allow_upsert = true for it)",
                ),
            )
        if OPS[op].sensitive and not self.allows_remove(index):
            return refusal(
                op,
                NotAllowed(
                    index=index,
                    op=op,
                    reason=f"the configuration does not allow '{op}' on index '{index}' "
                    "(set allow_remove = true for it)",
                ),
            )
        return None

    def _error(self, op: str, index: str, exc: Exception) -> Answer[Any, Any] | dict[str, Any]:
        """The answer for an exception an op raised: never a traceback."""
        if isinstance(exc, InvalidRequest):
            return bad_request(op, str(exc), field=exc.field, index=index)
        if isinstance(exc, ConfigError):
            return bad_request(op, str(exc), field="index", index=index)
        if isinstance(exc, FileNotFoundError | NotADirectoryError | PermissionError):
            return bad_request(op, str(exc), field="path", index=index)
        if isinstance(exc, UnknownBackend | UnknownEmbedder):
            return _failure(op, IndexUnavailable(index=index, reason=str(exc)))
        from indexplug.history import HistoryError

        if isinstance(exc, HistoryError):
            return _failure(op, IndexUnavailable(index=index, reason=f"the search history: {exc}"))
        if isinstance(exc, AuditError):
            return _failure(
                op, IndexUnavailable(index=index, reason=f"the audit log cannot be written: {exc}")
            )
        return _failure(
            op,
            IndexFailed(
                index=index,
                reason=f"{op} failed: {type(exc).__name__}: {exc}",
                error_type=type(exc).__name__,
            ),
        )

    async def _atarget(self, name: str) -> Target:
        """:meth:`target`, opening a backend not yet open on a thread (opening may block)."""
        with self._lock:
            known = self._targets.get(name)
        if known is not None:
            validate_index_name(name)
            return known
        import asyncio

        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(BLOCKING.get(), self.target, name)

    # -- ops -----------------------------------------------------------------------------
    def _add(self, a: AddArgs) -> Answer[Any, Any]:
        t = self.target(a.index)
        kw = self._add_args(t, a)
        stored: set[str] = set()
        if self._insert_only(t, a):
            got = t.guard.get(t.index, _ids_of(kw["passages"]), deadline_s=kw["deadline_s"])
            if not isinstance(got, Got):
                return _failure("add", got, WriteEvidence(index=t.index, backend=t.backend_name))
            stored = {p.id for p in got.passages}
        return self._add_answer(t, _add_fresh(t, kw, stored, t.guard.add))

    async def _aadd(self, a: AddArgs) -> Answer[Any, Any]:
        t = await self._atarget(a.index)
        kw = self._add_args(t, a)
        stored: set[str] = set()
        if self._insert_only(t, a):
            ids = _ids_of(kw["passages"])
            got = await t.guard.aget(t.index, ids, deadline_s=kw["deadline_s"])
            if not isinstance(got, Got):
                return _failure("add", got, WriteEvidence(index=t.index, backend=t.backend_name))
            stored = {p.id for p in got.passages}
        fresh = [p for p in kw["passages"] if p.id not in stored]
        if not fresh:
            return self._add_answer(t, _all_known(t, kw["passages"]))
        out = await t.guard.aadd(t.index, **{**kw, "passages": fresh})
        return self._add_answer(t, _with_known(out, kw["passages"], stored))

    def _add_args(self, t: Target, a: AddArgs) -> dict[str, Any]:
        return {
            "passages": [_to_passage(p, i) for i, p in enumerate(a.passages)],
            "max_bytes": a.max_bytes or t.max_bytes,
            "deadline_s": self.deadline_for(a.index, a.deadline_s),
            "progress": PROGRESS.get(),
        }

    def _insert_only(self, t: Target, a: AddArgs) -> bool:
        """Whether this add may only insert: no caller key (gated apart) and no upsert
        permission, on a backend that can say what it holds.  Some backends write a passage
        whose id they hold over the stored record (another digest: other metadata), which
        would replace stored metadata; such passages are left out and counted as known."""
        return not self.allows_upsert(a.index) and bool(
            getattr(t.guard.backend.capabilities, "get", False)
        )

    def _add_answer(self, t: Target, out: Any) -> Answer[Any, Any]:
        ev = WriteEvidence(index=t.index, backend=t.backend_name)
        if isinstance(out, Indexed):
            ev = ev.model_copy(
                update={
                    "bytes_used": out.bytes_used,
                    "max_bytes": out.max_bytes,
                    "estimate": out.estimate,
                }
            )
            data = AddData(
                added=out.added, known=out.known, added_ids=out.added_ids, known_ids=out.known_ids
            )
            return OPS["add"].result(
                op="add", code=out.code, ok=True, message=out.message, data=data, evidence=ev
            )  # type: ignore[return-value]
        if isinstance(out, OverBudget):
            ev = ev.model_copy(
                update={
                    "max_bytes": out.max_bytes,
                    "needed_bytes": out.needed_bytes,
                    "check": out.check,
                    "estimate": out.estimate,
                }
            )
            return OPS["add"].result(
                op="add",
                code=out.code,
                ok=False,
                message=out.message,
                evidence=ev,
                problem=Problem(reason=out.message),
            )  # type: ignore[return-value]
        if isinstance(out, IndexTimeout):
            ev = ev.model_copy(update={"deadline_s": out.deadline_s})
        return _failure("add", out, ev)

    def _run_search(self, t: Target, a: _SearchCommon, query: str, op: str) -> Answer[Any, Any]:
        deadline_s = self.deadline_for(t.index, a.deadline_s)
        mode = self.config.history_mode(t.index)
        if mode == "off":
            out = t.guard.search(
                t.index, query, top_k=a.top_k, deadline_s=deadline_s, filters=a.filters
            )
            return self._search_answer(t, a, out, op)
        started = time.perf_counter()
        out = t.guard.search(
            t.index, query, top_k=a.top_k, deadline_s=deadline_s, filters=a.filters
        )
        self._record_search(t, a, query, out, mode, started)
        return self._search_answer(t, a, out, op)

    async def _arun_search(
        self, t: Target, a: _SearchCommon, query: str, op: str
    ) -> Answer[Any, Any]:
        deadline_s = self.deadline_for(t.index, a.deadline_s)
        mode = self.config.history_mode(t.index)
        started = time.perf_counter()
        out = await t.guard.asearch(
            t.index, query, top_k=a.top_k, deadline_s=deadline_s, filters=a.filters
        )
        if mode != "off":
            self._record_search(t, a, query, out, mode, started)
        if not a.context:
            return self._search_answer(t, a, out, op)
        import asyncio

        # context expansion reads the index (and may read files): on a thread, not the loop
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(BLOCKING.get(), self._search_answer, t, a, out, op)

    def _search_answer(self, t: Target, a: _SearchCommon, out: Any, op: str) -> Answer[Any, Any]:
        deadline_s = self.deadline_for(t.index, a.deadline_s)
        legs = list(t.options.get("members", [])) if t.backend_name == FUSION_BACKEND else []
        ev = SearchEvidence(index=t.index, backend=t.backend_name, legs=legs)
        if isinstance(out, Searched | NoMatch):
            ev = ev.model_copy(
                update={
                    "searched": out.searched,
                    "deadline_s": out.deadline_s,
                    "elapsed_ms": out.elapsed_ms,
                    "degraded": out.degraded,
                    "scale": out.scale if isinstance(out, Searched) else None,
                }
            )
        elif isinstance(out, IndexTimeout):
            ev = ev.model_copy(update={"deadline_s": out.deadline_s})
        if not out.ok:
            return _failure(op, out, ev)
        hits: list[HitOut] = []
        if isinstance(out, Searched):
            known = chunkings(t.guard.name, t.index) if a.context else []
            for h in out.hits:
                ctx = None
                if a.context:
                    ctx = expand(
                        t.guard,
                        t.index,
                        h.passage,
                        a.context,
                        deadline_s=deadline_s,
                        chunking=known,
                    )
                hits.append(
                    HitOut(
                        rank=h.rank,
                        score=h.score,
                        scale=h.score_scale,
                        passage=h.passage,
                        context=ctx,
                    )
                )
        return Answer[Any, Any](
            op=op,
            code=out.code,
            ok=True,
            message=out.message,
            data=SearchData(hits=hits),
            evidence=ev,
            untrusted=bool(hits),
            notice=UNTRUSTED_NOTICE if hits else None,
        )

    def _search(self, a: SearchArgs) -> Answer[Any, Any]:
        t = self._search_target(a)
        got = self._run_search(t, a, a.query, "search")
        return OPS["search"].result.model_validate(got.model_dump())  # type: ignore[return-value]

    async def _asearch(self, a: SearchArgs) -> Answer[Any, Any]:
        t = await self._asearch_target(a)
        got = await self._arun_search(t, a, a.query, "search")
        return OPS["search"].result.model_validate(got.model_dump())  # type: ignore[return-value]

    async def _asearch_target(self, a: _SearchCommon) -> Target:
        if a.index is not None and a.indexes is None:
            return await self._atarget(a.index)
        import asyncio

        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(BLOCKING.get(), self._search_target, a)

    def _batch_search(self, a: BatchSearchArgs) -> Answer[Any, Any]:
        t = self._search_target(a)
        self._check_queries(a)

        def one(q: str) -> BatchItem:
            try:
                return _batch_item(q, self._run_search(t, a, q, "search"))
            except InvalidRequest as exc:
                return _refused_item(t, q, exc)

        with ThreadPoolExecutor(max_workers=min(BATCH_WORKERS, len(a.queries))) as pool:
            items = list(pool.map(one, a.queries))
        return self._batch_answer(t, items)

    async def _abatch_search(self, a: BatchSearchArgs) -> Answer[Any, Any]:
        import asyncio

        t = await self._asearch_target(a)
        self._check_queries(a)
        gate = asyncio.Semaphore(BATCH_WORKERS)

        async def one(q: str) -> BatchItem:
            async with gate:
                try:
                    return _batch_item(q, await self._arun_search(t, a, q, "search"))
                except InvalidRequest as exc:
                    return _refused_item(t, q, exc)

        items = list(await asyncio.gather(*(one(q) for q in a.queries)))
        return self._batch_answer(t, items)

    @staticmethod
    def _check_queries(a: BatchSearchArgs) -> None:
        for i, q in enumerate(a.queries):
            if not q.strip():
                raise InvalidRequest("the query is empty", field=f"queries.{i}")

    def _batch_answer(self, t: Target, items: list[BatchItem]) -> Answer[Any, Any]:
        counts: dict[str, int] = {}
        for it in items:
            counts[it.code] = counts.get(it.code, 0) + 1
        overall = batch_code(counts)
        ok = overall in BATCH_ANSWERED
        failed = len(items) - sum(1 for it in items if it.ok)
        legs = list(t.options.get("members", [])) if t.backend_name == FUSION_BACKEND else []
        return OPS["batch_search"].result(
            op="batch_search",
            code="BATCH",
            ok=ok,
            message=f"{len(items)} quer(y/ies) on '{t.index}': "
            + ", ".join(f"{c} {k}" for k, c in sorted(counts.items()))
            + (f"; {failed} did not get an answer from the index." if failed else "."),
            data=BatchData(results=items),
            evidence=BatchEvidence(
                index=t.index,
                backend=t.backend_name,
                queries=len(items),
                counts=counts,
                overall=overall,
                legs=legs,
            ),
            untrusted=any(it.untrusted for it in items),
            notice=UNTRUSTED_NOTICE if any(it.untrusted for it in items) else None,
        )  # type: ignore[return-value]

    def _pack(self, a: PackArgs) -> Answer[Any, Any]:
        t = self._search_target(a)
        return self._pack_answer(a, self._run_search(t, a, a.query, "pack"))

    async def _apack(self, a: PackArgs) -> Answer[Any, Any]:
        t = await self._asearch_target(a)
        return self._pack_answer(a, await self._arun_search(t, a, a.query, "pack"))

    def _pack_answer(self, a: PackArgs, got: Answer[Any, Any]) -> Answer[Any, Any]:
        data = None
        message = got.message
        if got.ok:
            hits = got.data.hits if got.data is not None else []
            data = pack(hits, a.max_tokens)
            if hits:
                message += (
                    f" Packed {data.included} of {len(hits)} into about {data.tokens} tokens "
                    f"(budget {a.max_tokens})" + (", the last one cut." if data.truncated else ".")
                )
        return OPS["pack"].result(
            **{
                **dict(got),
                "message": message,
                "data": data,
                "untrusted": bool(data and data.citations),
            }
        )  # type: ignore[return-value]

    def _remove(self, a: RemoveArgs) -> Answer[Any, Any]:
        t = self.target(a.index)
        out = t.guard.remove(
            t.index,
            a.ids,
            keys=a.keys,
            filters=a.filters,
            deadline_s=self.deadline_for(a.index, a.deadline_s),
        )
        return self._remove_answer(t, out)

    async def _aremove(self, a: RemoveArgs) -> Answer[Any, Any]:
        t = await self._atarget(a.index)
        out = await t.guard.aremove(
            t.index,
            a.ids,
            keys=a.keys,
            filters=a.filters,
            deadline_s=self.deadline_for(a.index, a.deadline_s),
        )
        return self._remove_answer(t, out)

    def _remove_answer(self, t: Target, out: Any) -> Answer[Any, Any]:
        ev = IndexEvidence(index=t.index, backend=t.backend_name)
        if isinstance(out, Removed):
            return OPS["remove"].result(
                op="remove",
                code=out.code,
                ok=True,
                message=out.message,
                data=RemoveData(
                    removed=out.removed,
                    removed_ids=out.removed_ids,
                    missing_ids=out.missing_ids,
                    missing_keys=out.missing_keys,
                ),
                evidence=ev,
            )  # type: ignore[return-value]
        return _failure("remove", out, ev)

    def _status(self, a: StatusArgs) -> Answer[Any, Any]:
        t = self.target(a.index)
        out = t.guard.status(t.index, deadline_s=self.deadline_for(a.index, a.deadline_s))
        return self._status_answer("status", t, out)

    async def _astatus(self, a: StatusArgs) -> Answer[Any, Any]:
        t = await self._atarget(a.index)
        out = await t.guard.astatus(t.index, deadline_s=self.deadline_for(a.index, a.deadline_s))
        return self._status_answer("status", t, out)

    def _status_answer(self, op: str, t: Target, out: Any) -> Answer[Any, Any]:
        ev = IndexEvidence(index=t.index, backend=t.backend_name)
        if isinstance(out, IndexStatus):
            data = StatusData.model_validate(out.model_dump(include=set(StatusData.model_fields)))
            return OPS[op].result(
                op=op, code=out.code, ok=True, message=out.message, data=data, evidence=ev
            )  # type: ignore[return-value]
        return _failure(op, out, ev)

    # -- the data interface: get, scan, indexes, drop --------------------------------------
    def _get(self, a: GetArgs) -> Answer[Any, Any]:
        t = self._plain_target(a.index)
        out = t.guard.get(
            t.index, a.ids, keys=a.keys, deadline_s=self.deadline_for(a.index, a.deadline_s)
        )
        return self._get_answer(t, out)

    async def _aget(self, a: GetArgs) -> Answer[Any, Any]:
        t = await self._atarget(a.index)
        _not_fused(t)
        out = await t.guard.aget(
            t.index, a.ids, keys=a.keys, deadline_s=self.deadline_for(a.index, a.deadline_s)
        )
        return self._get_answer(t, out)

    def _get_answer(self, t: Target, out: Any) -> Answer[Any, Any]:
        ev = IndexEvidence(index=t.index, backend=t.backend_name)
        if isinstance(out, Got):
            data = GetData(
                passages=out.passages, missing_ids=out.missing_ids, missing_keys=out.missing_keys
            )
            return OPS["get"].result(
                op="get",
                code=out.code,
                ok=True,
                message=out.message,
                data=data,
                evidence=ev,
                untrusted=bool(out.passages),
                notice=UNTRUSTED_NOTICE if out.passages else None,
            )  # type: ignore[return-value]
        return _failure("get", out, ev)

    def _scan(self, a: ScanArgs) -> Answer[Any, Any]:
        t = self._plain_target(a.index)
        out = t.guard.scan(
            t.index,
            filters=a.filters,
            after=a.after,
            limit=a.limit,
            deadline_s=self.deadline_for(a.index, a.deadline_s),
        )
        return self._scan_answer(t, out)

    async def _ascan(self, a: ScanArgs) -> Answer[Any, Any]:
        t = await self._atarget(a.index)
        _not_fused(t)
        out = await t.guard.ascan(
            t.index,
            filters=a.filters,
            after=a.after,
            limit=a.limit,
            deadline_s=self.deadline_for(a.index, a.deadline_s),
        )
        return self._scan_answer(t, out)

    def _scan_answer(self, t: Target, out: Any) -> Answer[Any, Any]:
        ev = IndexEvidence(index=t.index, backend=t.backend_name)
        if isinstance(out, Scanned):
            return OPS["scan"].result(
                op="scan",
                code=out.code,
                ok=True,
                message=out.message,
                data=ScanData(passages=out.passages, next_after=out.next_after),
                evidence=ev,
                untrusted=bool(out.passages),
                notice=UNTRUSTED_NOTICE if out.passages else None,
            )  # type: ignore[return-value]
        return _failure("scan", out, ev)

    def _lister(self, a: IndexesArgs) -> str:
        if a.index is not None:
            return a.index
        if not self.config.defaults.backend:
            raise InvalidRequest(
                "this configuration has no default backend: name a configured index whose "
                "backend to list",
                field="index",
            )
        return "default"

    def _indexes(self, a: IndexesArgs) -> Answer[Any, Any]:
        t = self._plain_target(self._lister(a))
        out = t.guard.indexes(deadline_s=self.deadline_for(t.index, a.deadline_s))
        return self._indexes_answer(t, out)

    async def _aindexes(self, a: IndexesArgs) -> Answer[Any, Any]:
        t = await self._atarget(self._lister(a))
        _not_fused(t)
        out = await t.guard.aindexes(deadline_s=self.deadline_for(t.index, a.deadline_s))
        return self._indexes_answer(t, out)

    def _indexes_answer(self, t: Target, out: Any) -> Answer[Any, Any]:
        ev = IndexEvidence(index="", backend=t.backend_name)
        if isinstance(out, IndexList):
            return OPS["indexes"].result(
                op="indexes",
                code=out.code,
                ok=True,
                message=out.message,
                data=IndexesData(indexes=out.indexes),
                evidence=ev,
            )  # type: ignore[return-value]
        return _failure("indexes", out, ev)

    def _drop(self, a: DropArgs) -> Answer[Any, Any]:
        t = self._plain_target(a.index)
        _offers_drop(t)
        out = t.guard.drop(t.index, deadline_s=self.deadline_for(a.index, a.deadline_s))
        return self._status_answer("drop", t, out)

    async def _adrop(self, a: DropArgs) -> Answer[Any, Any]:
        t = await self._atarget(a.index)
        _not_fused(t)
        _offers_drop(t)
        out = await t.guard.adrop(t.index, deadline_s=self.deadline_for(a.index, a.deadline_s))
        return self._status_answer("drop", t, out)

    def _plain_target(self, name: str) -> Target:
        t = self.target(name)
        _not_fused(t)
        return t

    # -- moving an index: export, import, copy -----------------------------------------------
    def _roots(self) -> list[str]:
        return [str(r) for r in self.folder_roots()]

    def _export(self, a: ExportArgs) -> Answer[Any, Any]:
        from indexplug.transfer import Exported, confined_output, export

        if not self.config.defaults.folders:
            raise InvalidRequest(
                "export writes files only under the configuration's defaults.folders, and none "
                "is set",
                field="path",
            )
        t = self._plain_target(a.index)
        roots = self._roots()
        path = confined_output(a.path, roots)
        if os.path.lexists(path):
            raise InvalidRequest(f"{a.path} exists; export writes new files only", field="path")
        try:
            out = export(
                t.guard,
                t.index,
                path,
                filters=a.filters,
                progress=PROGRESS.get(),
                deadline_s=self.deadline_for(a.index, a.deadline_s),
                exclusive=True,
                roots=roots,
            )
        except FileExistsError:
            raise InvalidRequest(
                f"{a.path} exists; export writes new files only", field="path"
            ) from None
        ev = IndexEvidence(index=t.index, backend=t.backend_name)
        if isinstance(out, Exported):
            return OPS["export"].result(
                op="export",
                code=out.code,
                ok=True,
                message=out.message,
                data=ExportData(path=out.path, passages=out.passages, bytes=out.bytes),
                evidence=ev,
            )  # type: ignore[return-value]
        return _failure("export", out, ev)

    def _import(self, a: ImportArgs) -> Answer[Any, Any]:
        from indexplug.transfer import Imported, import_, open_confined

        t = self._plain_target(a.index)
        with open_confined(a.path, self._roots()) as stream:
            out = import_(
                t.guard,
                t.index,
                stream,
                max_bytes=a.max_bytes or t.max_bytes,
                progress=PROGRESS.get(),
                deadline_s=a.deadline_s,
            )
        ev = WriteEvidence(index=t.index, backend=t.backend_name)
        if isinstance(out, Imported):
            data = ImportData(
                lines=out.lines, added=out.added, known=out.known, replaced=out.replaced
            )
            return OPS["import"].result(
                op="import", code=out.code, ok=True, message=out.message, data=data, evidence=ev
            )  # type: ignore[return-value]
        if isinstance(out, OverBudget):
            ev = ev.model_copy(
                update={
                    "max_bytes": out.max_bytes,
                    "needed_bytes": out.needed_bytes,
                    "check": out.check,
                }
            )
            return OPS["import"].result(
                op="import",
                code=out.code,
                ok=False,
                message=out.message,
                evidence=ev,
                problem=Problem(reason=out.message),
            )  # type: ignore[return-value]
        return _failure("import", out, ev)

    def _copy(self, a: CopyArgs) -> Answer[Any, Any]:
        from indexplug.transfer import Copied, copy

        src = self._plain_target(a.source)
        dst = self._plain_target(a.index)
        refuse_same_index(src, dst)
        out = copy(
            src.guard,
            src.index,
            dst.guard,
            dst.index,
            progress=PROGRESS.get(),
            source_id=end_id(src),
            target_id=end_id(dst),
            restart=a.restart,
            max_bytes=a.max_bytes or dst.max_bytes,
            deadline_s=a.deadline_s,
        )
        ev = CopyEvidence(
            index=dst.index,
            backend=dst.backend_name,
            source_index=src.index,
            source_backend=src.backend_name,
        )
        if isinstance(out, Copied):
            data = CopyData(
                source=f"{src.backend_name}:{src.index}",
                target=f"{dst.backend_name}:{dst.index}",
                read=out.read,
                added=out.added,
                known=out.known,
                resumed=out.resumed,
                elapsed_s=out.elapsed_s,
                verification=VerificationOut.model_validate(out.verification.model_dump()),
            )
            return OPS["copy"].result(
                op="copy",
                code=out.code,
                ok=out.ok,
                message=out.message,
                data=data,
                evidence=ev,
                problem=None if out.ok else Problem(reason=out.message),
            )  # type: ignore[return-value]
        ev = ev.model_copy(update={"committed": getattr(out, "committed", None)})
        if isinstance(out, OverBudget):
            return OPS["copy"].result(
                op="copy",
                code=out.code,
                ok=False,
                message=out.message,
                evidence=ev,
                problem=Problem(reason=out.message),
            )  # type: ignore[return-value]
        return _failure("copy", out, ev)

    def readiness(self) -> list[IndexReadiness]:
        """Each configured index with its backend's readiness."""
        rows: list[IndexReadiness] = []
        for name, ic in sorted(self.config.indexes.items()):
            allow = self.allows_remove(name)
            if ic.kind == "fusion":
                rows.append(
                    IndexReadiness(
                        name=name,
                        kind="fusion",
                        backend=FUSION_BACKEND,
                        ready=True,
                        members=list(ic.members),
                        allow_remove=allow,
                    )
                )
                continue
            backend, _ = self.config.backend_options(name)
            try:
                r = self.target(name).guard.readiness()
                ready, reason = r.ready, r.reason
            except Exception as exc:
                ready, reason = False, f"{type(exc).__name__}: {exc}"
            rows.append(
                IndexReadiness(
                    name=name,
                    kind="index",
                    backend=backend,
                    ready=ready,
                    reason=reason,
                    allow_remove=allow,
                )
            )
        by_name = {row.name: row for row in rows}
        for row in rows:
            if row.kind == "fusion":
                down = [m for m in row.members if not by_name[m].ready]
                row.ready = len(down) < len(row.members)
                if down:
                    row.reason = "not ready: " + ", ".join(
                        f"{m} ({by_name[m].reason})" for m in down
                    )
        return rows

    def _audit(self, a: AuditArgs) -> Answer[Any, Any]:
        records, more, verdict = audit_page(
            self.audit_log(),
            index=a.index,
            caller=a.caller,
            op=a.op,
            outcome=a.outcome,
            since=a.since,
            until=a.until,
            after=a.after,
            limit=a.limit,
        )
        code = "AUDIT" if verdict.ok else "AUDIT_BROKEN"
        message = f"{len(records)} audit record(s)" + (
            "; the chain verifies."
            if verdict.ok
            else f"; the chain breaks at record {verdict.first_bad}: {verdict.reason} "
            "(records from there on are not answered)."
        )
        return OPS["audit"].result(
            op="audit",
            code=code,
            ok=verdict.ok,
            message=message,
            data=AuditData(
                records=records,  # type: ignore[arg-type]
                next_after=more,
                intact=verdict.ok,
                first_bad=verdict.first_bad,
                reason=verdict.reason,
            ),
            evidence=self._evidence(),
            problem=None if verdict.ok else Problem(reason=verdict.reason),
        )  # type: ignore[return-value]

    def _history_filters(self, a: HistoryArgs) -> dict[str, Any]:
        return {
            "index": a.index,
            "caller": a.caller,
            "outcome": a.outcome,
            "since": a.since,
            "until": a.until,
        }

    def _history_op(self, a: HistoryArgs) -> Answer[Any, Any]:
        h = self.history_store()
        records, more = h.page(**self._history_filters(a), after=a.after, limit=a.limit)
        return OPS["history"].result(
            op="history",
            code="HISTORY",
            ok=True,
            message=f"{len(records)} search record(s)"
            + (
                f"; {h.dropped} dropped since start (the writer fell behind)." if h.dropped else "."
            ),
            data=HistoryData(records=records, next_after=more, dropped=h.dropped),  # type: ignore[arg-type]
            evidence=self._evidence(),
        )  # type: ignore[return-value]

    def _export_history(self, a: ExportHistoryArgs) -> Answer[Any, Any]:
        from indexplug.transfer import confined_output

        if not self.config.defaults.folders:
            raise InvalidRequest(
                "export_history writes files only under the configuration's defaults.folders, "
                "and none is set",
                field="path",
            )
        path = confined_output(a.path, self._roots())
        try:
            fd = os.open(
                path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600
            )
        except FileExistsError:
            raise InvalidRequest(
                f"{a.path} exists; exports write new files only", field="path"
            ) from None
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            n = self.history_store().export_jsonl(fh, **self._history_filters(a))
        return OPS["export_history"].result(
            op="export_history",
            code="EXPORTED",
            ok=True,
            message=f"Wrote {n} search record(s) to {path}.",
            data=ExportHistoryData(path=str(path), records=n),
            evidence=self._evidence(),
        )  # type: ignore[return-value]

    def _log_search(self, a: LogSearchArgs) -> Answer[Any, Any]:
        validate_index_name(a.index)
        mode = self.config.history_mode(a.index)
        recorded = False
        if mode != "off":
            recorded = self.history_store().record(
                caller=self.current_caller(),
                op="log_search",
                index=a.index,
                backend=a.backend,
                mode=mode,
                query=a.query,
                top_k=a.top_k,
                filters=a.filters,
                outcome=a.outcome,
                hits=[(h.id, h.score, h.rank) for h in a.hits],
                latency_ms=a.latency_ms,
            )
        message = (
            f"Recorded in the history of '{a.index}' ({mode})."
            if recorded
            else f"Not recorded: history is off for '{a.index}'."
            if mode == "off"
            else "Not recorded: the history writer is behind (the record was dropped)."
        )
        return OPS["log_search"].result(
            op="log_search",
            code="LOGGED",
            ok=True,
            message=message,
            data=LogSearchData(recorded=recorded, mode=mode),
            evidence=IndexEvidence(index=a.index, backend=a.backend),
        )  # type: ignore[return-value]

    def _clear_history(self, a: ClearHistoryArgs) -> Answer[Any, Any]:
        validate_index_name(a.index)
        n = self.history_store().clear(index=a.index, before=a.before)
        return OPS["clear_history"].result(
            op="clear_history",
            code="CLEARED",
            ok=True,
            message=f"Deleted {n} search record(s) of '{a.index}'.",
            data=ClearHistoryData(cleared=n),
            evidence=IndexEvidence(index=a.index),
        )  # type: ignore[return-value]

    def _stats(self, a: Any) -> Answer[Any, Any]:
        from indexplug.ops import StatsData
        from indexplug.stats import index_stats

        t = self._plain_target(a.index)
        out = index_stats(t.guard, t.index, deadline_s=self.deadline_for(a.index, a.deadline_s))
        ev = IndexEvidence(index=t.index, backend=t.backend_name)
        if not isinstance(out, StatsData):
            return _failure("stats", out, ev)
        counted = f"; a scan counted {out.scanned}" if out.scanned is not None else ""
        return OPS["stats"].result(
            op="stats",
            code="STATS",
            ok=True,
            message=f"Index '{t.index}' holds {out.passages} passage(s){counted}.",
            data=out,
            evidence=ev,
        )  # type: ignore[return-value]

    def _similarity(self, a: Any) -> Answer[Any, Any]:
        from indexplug.ops import Problem as _Problem
        from indexplug.ops import SimilarityData
        from indexplug.similarity import NotSupported, score

        t = self._plain_target(a.index)
        ev = IndexEvidence(index=t.index, backend=t.backend_name)
        out = score(
            t.guard,
            t.index,
            a.query,
            texts=a.texts,
            ids=a.ids,
            deadline_s=self.deadline_for(a.index, a.deadline_s),
        )
        if isinstance(out, NotSupported):
            return OPS["similarity"].result(
                op="similarity",
                code="NOT_SUPPORTED",
                ok=False,
                message=out.reason,
                evidence=ev,
                problem=_Problem(reason=out.reason),
            )  # type: ignore[return-value]
        if not isinstance(out, SimilarityData):
            return _failure("similarity", out, ev)
        n = len(out.scores)
        missing = f"; {len(out.missing_ids)} id(s) not found" if out.missing_ids else ""
        return OPS["similarity"].result(
            op="similarity",
            code="SIMILARITY",
            ok=True,
            message=f"Scored {n} text(s) against the query with {out.scorer}{missing}.",
            data=out,
            evidence=ev,
        )  # type: ignore[return-value]

    def _evidence(self) -> ConfigEvidence:
        return ConfigEvidence(config=str(self.config.path) if self.config.path else None)

    def _backends(self, a: Any) -> Answer[Any, Any]:
        reg = get_registry()
        data = BackendsData(
            backends=reg.describe_backends(),
            embedders=reg.describe_embedders(),
            problems=[ProblemRow(plugin=p.plugin, problem=p.problem) for p in reg.problems],
            indexes=self.readiness(),
        )
        ready = sum(1 for b in data.backends if b.ready)
        return OPS["backends"].result(
            op="backends",
            code="LISTED",
            ok=True,
            message=f"{len(data.backends)} backend(s) installed, {ready} ready; "
            f"{len(data.indexes)} index(es) configured.",
            data=data,
            evidence=self._evidence(),
        )  # type: ignore[return-value]

    def _ops(self, a: Any) -> Answer[Any, Any]:
        rows = [
            OpInfo(
                name=spec.name,
                description=spec.description,
                sensitive=spec.sensitive,
                allowed=self.allows(spec.name),
                codes=list(spec.codes),
                args_schema=spec.args_schema(),
                result_schema=spec.result_schema(),
            )
            for spec in OPS.values()
        ]
        return OPS["ops"].result(
            op="ops",
            code="LISTED",
            ok=True,
            message=f"{len(rows)} ops.",
            data=OpsData(ops=rows),
            evidence=self._evidence(),
        )  # type: ignore[return-value]

    def folder_roots(self) -> list[Path]:
        roots = [Path(f).expanduser() for f in self.config.defaults.folders]
        if not roots:
            roots = [Path.cwd()]
        base = self.config.path.parent if self.config.path else Path.cwd()
        return [(r if r.is_absolute() else base / r).resolve() for r in roots]

    def _index_folder(self, a: IndexFolderArgs) -> Answer[Any, Any]:
        from indexplug.ingest import RebuildNotAllowed, index_folder

        if a.overlap >= a.max_chars:
            raise InvalidRequest("overlap must be smaller than max_chars", field="overlap")
        try:
            resolved = Path(a.path).expanduser().resolve()
        except (OSError, RuntimeError, ValueError) as exc:  # a symlink loop, a name too long
            raise InvalidRequest(f"{a.path!r} cannot be resolved: {exc}", field="path") from None
        roots = self.folder_roots()
        if not any(resolved == r or resolved.is_relative_to(r) for r in roots):
            shown = ", ".join(str(r) for r in roots)
            raise InvalidRequest(
                f"{a.path} is outside the folders this configuration lets index_folder read "
                f"({shown}; set defaults.folders)",
                field="path",
            )
        try:
            found = resolved.exists()
        except OSError:  # a name too long for the file system, say
            found = False
        if not found:
            raise InvalidRequest(f"{a.path} does not exist", field="path")
        t = self.target(a.index)
        max_bytes = a.max_bytes or t.max_bytes
        try:
            report = index_folder(
                t.guard,
                resolved,
                t.index,
                progress=PROGRESS.get(),
                max_bytes=max_bytes,
                max_chars=a.max_chars,
                overlap=a.overlap,
                deadline_s=a.deadline_s
                or max(self.deadline_for(a.index, None) or 0.0, DEFAULT_FOLDER_DEADLINE_S),
                allow_drop=self.allows_remove(a.index),  # the gate drop passes
            )
        except RebuildNotAllowed as exc:
            refused = NotAllowed(index=t.index, op="index_folder", reason=str(exc))
            return OPS["index_folder"].result(
                op="index_folder",
                code=refused.code,
                ok=False,
                message=refused.message,
                problem=Problem(reason=refused.reason),
            )  # type: ignore[return-value]
        record_chunking(t.guard.name, t.index, a.max_chars, a.overlap)
        ev = FolderEvidence(
            index=t.index, backend=t.backend_name, path=str(resolved), max_bytes=max_bytes
        )
        code = folder_code(report)
        if report.ok:
            message = (
                f"Indexed {report.files_indexed} file(s) into '{t.index}' "
                f"({report.passages_added} passage(s) added, {report.passages_known} known, "
                f"{report.passages_removed} removed); {report.files_unchanged} unchanged."
            )
            problem = None
        else:
            first = report.failures[0]
            message = (
                f"Indexing '{t.index}' was incomplete: {len(report.failures)} write(s) failed "
                f"({first})"
            )
            problem = Problem(reason=first)
        return OPS["index_folder"].result(
            op="index_folder",
            code=code,
            ok=report.ok,
            message=message,
            data=report,
            evidence=ev,
            problem=problem,
        )  # type: ignore[return-value]


def end_id(t: Target) -> str:
    """How a copy's checkpoint names one end: ``BACKEND:INDEX``, and a digest of the backend's
    settings when it has any (two stores of one backend with an index of the same name are
    two ends; the settings themselves, secrets perhaps, are not written down)."""
    base = f"{t.backend_name}:{t.index}"
    settings = {k: v for k, v in t.options.items() if k != "backend"}
    if not settings:
        return base
    blob = json.dumps(settings, sort_keys=True, default=str).encode()
    return f"{base}#{hashlib.sha256(blob).hexdigest()[:16]}"


def refuse_same_index(src: Target, dst: Target) -> None:
    """Refuse a copy of an index onto itself (the same backend, settings and name): the CLI's
    ``copy`` and the ``copy`` op both ask here, so the two answer it alike."""
    if (src.describe(), src.index) == (dst.describe(), dst.index):
        raise InvalidRequest("the source and the target are the same index", field="index")


def _not_fused(t: Target) -> None:
    if t.backend_name == FUSION_BACKEND:
        raise InvalidRequest(
            f"'{t.index}' is a fusion of indexes: name one of its members", field="index"
        )


def _offers_drop(t: Target) -> None:
    if not callable(getattr(t.guard.backend, "op_drop", None)):
        raise InvalidRequest(f"backend '{t.backend_name}' does not offer 'drop'", field="index")


def invoke(
    op: str,
    args: Mapping[str, Any] | str | bytes | None = None,
    *,
    config: Config | Path | str | None = None,
    caller: str = "python",
) -> dict[str, Any]:
    """Run one op from a JSON object and answer a JSON object (see :mod:`indexplug.ops`).

    ``config`` is a :class:`~indexplug.config.Config`, a path to ``indexplug.toml``, or ``None``
    to discover one (``INDEXPLUG_CONFIG``, ``./indexplug.toml``, the user config folder); with no
    file, every index is on sqlite-fts5 and sensitive ops are not allowed.
    """
    try:
        invoker = Invoker.from_source(config)
    except (ConfigError, OSError, ValueError) as exc:  # a bad file, or a path that is none
        return bad_request(str(op), str(exc), field="config")
    invoker.caller = caller
    with invoker:
        return invoker.invoke(op, args)
