"""The invoker's record ops: the audit log (``audit``) and the search history
(``history``, ``export_history``, ``log_search``, ``clear_history``)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from indexplug.audit import page as audit_page
from indexplug.errors import (
    InvalidRequest,
)
from indexplug.names import validate_index_name
from indexplug.ops import (
    OPS,
    Answer,
    AuditArgs,
    AuditData,
    ClearHistoryArgs,
    ClearHistoryData,
    ExportHistoryArgs,
    ExportHistoryData,
    HistoryArgs,
    HistoryData,
    IndexEvidence,
    LogSearchArgs,
    LogSearchData,
    Problem,
)

if TYPE_CHECKING:
    pass
from indexplug.invocation.base import (
    InvokerBase,
)


class Records(InvokerBase):
    """The audit log and the search history ops."""

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
