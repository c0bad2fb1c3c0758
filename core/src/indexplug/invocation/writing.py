"""The invoker's write ops: ``add``, ``remove`` and ``index_folder``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from indexplug.errors import (
    InvalidRequest,
)
from indexplug.invoke_add import _add_fresh, _all_known, _ids_of, _to_passage, _with_known
from indexplug.invoke_render import (
    _failure,
    folder_code,
)
from indexplug.neighbours import record_chunking
from indexplug.ops import (
    OPS,
    AddArgs,
    AddData,
    Answer,
    FolderEvidence,
    IndexEvidence,
    IndexFolderArgs,
    Problem,
    RemoveArgs,
    RemoveData,
    WriteEvidence,
)
from indexplug.outcomes import (
    Got,
    Indexed,
    IndexTimeout,
    NotAllowed,
    OverBudget,
    Removed,
)
from indexplug.targets import Target

if TYPE_CHECKING:
    pass
from indexplug.invocation.base import (
    DEFAULT_FOLDER_DEADLINE_S,
    PROGRESS,
    InvokerBase,
)


class Writing(InvokerBase):
    """The write ops: add, remove and index_folder."""

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
