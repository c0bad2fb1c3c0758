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
import threading
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from indexplug.audit import AuditError, AuditLog
from indexplug.config import Config, Defaults, find_config_file, load_config
from indexplug.errors import (
    ConfigError,
    InvalidRequest,
    UnknownBackend,
    UnknownEmbedder,
)
from indexplug.invoke_parse import MAX_ARGS_DEPTH as MAX_ARGS_DEPTH
from indexplug.invoke_parse import _validation_reason
from indexplug.invoke_parse import nesting_depth as nesting_depth
from indexplug.invoke_parse import parse_args as parse_args
from indexplug.invoke_records import AUDITED as AUDITED
from indexplug.invoke_records import CALLERS as CALLERS
from indexplug.invoke_records import change_record as change_record
from indexplug.invoke_render import _failure
from indexplug.invoke_render import bad_request as bad_request
from indexplug.invoke_render import exit_code as exit_code
from indexplug.invoke_render import folder_code as folder_code
from indexplug.invoke_render import refusal as refusal
from indexplug.ops import (
    OPS,
    Answer,
)
from indexplug.outcomes import (
    IndexFailed,
    IndexUnavailable,
    NotAllowed,
)
from indexplug.targets import Target

if TYPE_CHECKING:
    from indexplug.history import HistoryStore
    from indexplug.transfer import Progress
from indexplug.invocation.admin import Admin
from indexplug.invocation.base import (
    BATCH_WORKERS,
    BLOCKING,
    CALLER,
    DEFAULT_FOLDER_DEADLINE_S,
    PROGRESS,
    end_id,
    refuse_same_index,
)
from indexplug.invocation.reading import Reading
from indexplug.invocation.records import Records
from indexplug.invocation.searching import Searching
from indexplug.invocation.transfers import Transfers
from indexplug.invocation.writing import Writing

__all__ = [
    "AUDITED",
    "BATCH_WORKERS",
    "BLOCKING",
    "CALLER",
    "CALLERS",
    "DEFAULT_FOLDER_DEADLINE_S",
    "MAX_ARGS_DEPTH",
    "PROGRESS",
    "Invoker",
    "bad_request",
    "change_record",
    "end_id",
    "exit_code",
    "folder_code",
    "invoke",
    "nesting_depth",
    "parse_args",
    "refusal",
    "refuse_same_index",
]


class Invoker(Searching, Writing, Reading, Admin, Transfers, Records):
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
