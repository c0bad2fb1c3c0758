"""The invoker's admin ops: ``status``, ``drop``, ``backends``, ``ops``, ``stats`` and
``similarity``, and the readiness of the configured indexes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from indexplug.fusion import FUSION_BACKEND
from indexplug.invoke_render import (
    _failure,
)
from indexplug.ops import (
    OPS,
    Answer,
    BackendsData,
    DropArgs,
    IndexEvidence,
    IndexReadiness,
    OpInfo,
    OpsData,
    ProblemRow,
    StatusArgs,
    StatusData,
)
from indexplug.outcomes import (
    IndexStatus,
)
from indexplug.plugins import get_registry
from indexplug.targets import Target

if TYPE_CHECKING:
    pass
from indexplug.invocation.base import (
    InvokerBase,
    _not_fused,
    _offers_drop,
)


class Admin(InvokerBase):
    """Status, drop, backends, ops, stats and similarity."""

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
