"""The invoker's ops that move an index: ``export``, ``import`` and ``copy``."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from indexplug.errors import (
    InvalidRequest,
)
from indexplug.invoke_render import (
    _failure,
)
from indexplug.ops import (
    OPS,
    Answer,
    CopyArgs,
    CopyData,
    CopyEvidence,
    ExportArgs,
    ExportData,
    ImportArgs,
    ImportData,
    IndexEvidence,
    Problem,
    VerificationOut,
    WriteEvidence,
)
from indexplug.outcomes import (
    OverBudget,
)

if TYPE_CHECKING:
    pass
from indexplug.invocation.base import (
    PROGRESS,
    InvokerBase,
    end_id,
    refuse_same_index,
)


class Transfers(InvokerBase):
    """Moving an index: export, import and copy."""

    # -- moving an index: export, import, copy -----------------------------------------------

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
