"""The invoker's data interface reads: ``get``, ``scan`` and ``indexes``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from indexplug.errors import (
    InvalidRequest,
)
from indexplug.invoke_render import (
    _failure,
)
from indexplug.ops import (
    OPS,
    UNTRUSTED_NOTICE,
    Answer,
    GetArgs,
    GetData,
    IndexesArgs,
    IndexesData,
    IndexEvidence,
    ScanArgs,
    ScanData,
)
from indexplug.outcomes import (
    Got,
    IndexList,
    Scanned,
)
from indexplug.targets import Target

if TYPE_CHECKING:
    pass
from indexplug.invocation.base import (
    InvokerBase,
    _not_fused,
)


class Reading(InvokerBase):
    """The reads of the data interface: get, scan and indexes."""

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
