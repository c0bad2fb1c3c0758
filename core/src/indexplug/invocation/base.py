"""The invoker's shared state and helpers: the per-context values, :class:`InvokerBase`
(targets, deadlines, gates, the audit log and the search history), and the helpers the ops
share (``end_id``, ``refuse_same_index``)."""

from __future__ import annotations

import contextvars
import hashlib
import json
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from indexplug.audit import AuditError, AuditLog
from indexplug.config import Config, fused_target
from indexplug.errors import (
    InvalidIndexName,
    InvalidRequest,
)
from indexplug.fusion import FUSION_BACKEND, fuse_targets
from indexplug.invoke_records import change_record
from indexplug.names import validate_index_name
from indexplug.ops import (
    OPS,
    BatchSearchArgs,
    ConfigEvidence,
    _SearchCommon,
)
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


class InvokerBase:
    """What every family of ops holds and shares: the configuration, the open targets, the
    gates, the audit log and the search history.  :class:`Invoker` sets the attributes."""

    config: Config
    caller: str
    serving_http: bool
    _audit_log: AuditLog | None
    _history: HistoryStore | None
    history_failures: int
    _targets: dict[str, Target]
    _lock: threading.RLock

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

    def _plain_target(self, name: str) -> Target:
        t = self.target(name)
        _not_fused(t)
        return t

    def _roots(self) -> list[str]:
        return [str(r) for r in self.folder_roots()]

    def _evidence(self) -> ConfigEvidence:
        return ConfigEvidence(config=str(self.config.path) if self.config.path else None)

    def folder_roots(self) -> list[Path]:
        roots = [Path(f).expanduser() for f in self.config.defaults.folders]
        if not roots:
            roots = [Path.cwd()]
        base = self.config.path.parent if self.config.path else Path.cwd()
        return [(r if r.is_absolute() else base / r).resolve() for r in roots]


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
