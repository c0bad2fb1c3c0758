"""The guard's admin ops: status, the index list, drop and the extension ops."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

from indexplug.deadlines import Deadline
from indexplug.errors import InvalidQuery, InvalidRequest
from indexplug.guard.base import (
    _WRITES,
    MAX_BATCH,
    MAX_TOP_K,
    _Plan,
    _stamped,
    _write_deadline,
)
from indexplug.guard.checks import Checking
from indexplug.names import validate_index_name
from indexplug.outcomes import (
    Explained,
    IndexesOutcome,
    IndexList,
    IndexStatus,
    Neighbours,
    Searched,
    StatusOutcome,
)
from indexplug.passages import (
    Passage,
)
from indexplug.protocols import EXTENSION_OPS


class Admin(Checking):
    """Status, the index list, drop and extension ops under the guard."""

    def status(self, index: str, *, deadline_s: float | None = None) -> StatusOutcome:
        return cast(StatusOutcome, self._run(self._plan_status(index, deadline_s)))

    async def astatus(self, index: str, *, deadline_s: float | None = None) -> StatusOutcome:
        """:meth:`status` as a coroutine."""
        return cast(StatusOutcome, await self._arun(self._plan_status(index, deadline_s)))

    def indexes(self, *, deadline_s: float | None = None) -> IndexesOutcome:
        """The named indexes the backend holds, by name, with their passage counts (needs
        ``Capabilities.indexes``)."""
        return cast(IndexesOutcome, self._run(self._plan_indexes(deadline_s)))

    async def aindexes(self, *, deadline_s: float | None = None) -> IndexesOutcome:
        """:meth:`indexes` as a coroutine."""
        return cast(IndexesOutcome, await self._arun(self._plan_indexes(deadline_s)))

    def drop(self, index: str, *, deadline_s: float | None = None) -> StatusOutcome:
        """Delete a whole index (the backend's ``op_drop``; sensitive: the CLI, invoke and MCP
        gate it as they gate remove).  Answers ``IndexStatus`` with ``exists=False``."""
        return cast(StatusOutcome, self._run(self._plan_extra("drop", index, deadline_s, {})))

    async def adrop(self, index: str, *, deadline_s: float | None = None) -> StatusOutcome:
        """:meth:`drop` as a coroutine."""
        plan = self._plan_extra("drop", index, deadline_s, {})
        return cast(StatusOutcome, await self._arun(plan))

    def call_extra(
        self, op: str, index: str, deadline_s: float | None = None, **kwargs: Any
    ) -> Any:
        """Run an extension op (``drop``, ``optimize``, ``rebuild``, ``rerank``, ``explain``,
        ``neighbours``: :data:`indexplug.protocols.EXTENSION_OPS`) under the same readiness,
        exception and deadline rules as any op.  Its arguments are checked before the plugin
        is called, and its answer like any other: one of the outcomes
        :data:`~indexplug.outcomes.ALLOWED` for it, every passage in it checked and copied
        (and a rerank's hits only passages the caller gave)."""
        return self._run(self._plan_extra(op, index, deadline_s, kwargs))

    async def acall_extra(
        self, op: str, index: str, deadline_s: float | None = None, **kwargs: Any
    ) -> Any:
        """:meth:`call_extra` as a coroutine."""
        return await self._arun(self._plan_extra(op, index, deadline_s, kwargs))

    def _plan_status(self, index: str, deadline_s: float | None) -> _Plan:
        validate_index_name(index)
        deadline = Deadline.after(deadline_s)
        native = self._native("status")
        return _Plan(
            "status",
            index,
            deadline,
            lambda: self.backend.status(index, deadline=deadline),
            lambda out: out,
            (lambda: native(index, deadline=deadline)) if native else None,
        )

    def _plan_indexes(self, deadline_s: float | None) -> _Plan:
        self._claim("indexes", "indexes")
        deadline = Deadline.after(deadline_s)

        def check(out: Any) -> Any:
            if type(out) is not IndexList:
                return out
            names = [i.name for i in out.indexes]
            if len(set(names)) != len(names):
                return self._violation("", "indexes answered a name twice")
            for name in names:
                try:
                    validate_index_name(name)
                except InvalidRequest:
                    return self._violation("", "indexes answered a name that is not valid")
            return out.model_copy(update={"indexes": sorted(out.indexes, key=lambda i: i.name)})

        native = self._native("indexes")
        return _Plan(
            "indexes",
            "",
            deadline,
            lambda: self.backend.indexes(deadline=deadline),  # type: ignore[attr-defined]
            check,
            (lambda: native(deadline=deadline)) if native else None,
        )

    def _plan_extra(
        self, op: str, index: str, deadline_s: float | None, kwargs: dict[str, Any]
    ) -> _Plan:
        validate_index_name(index)
        if op not in EXTENSION_OPS:
            known = ", ".join(sorted(EXTENSION_OPS))
            raise InvalidRequest(f"'{op}' is not an extension op (those are: {known})", field="op")
        fn = getattr(self.backend, f"op_{op}", None)
        if not callable(fn):
            raise InvalidRequest(f"backend '{self.name}' has no op '{op}'", field="op")
        check = self._extra_check(op, kwargs)
        deadline = Deadline.after(_write_deadline(deadline_s) if op in _WRITES else deadline_s)
        return _Plan(op, index, deadline, lambda: fn(index, deadline=deadline, **kwargs), check)

    def _extra_check(self, op: str, kwargs: dict[str, Any]) -> Callable[[Any], Any]:
        """Refuse malformed arguments of extension op ``op``; the check of its answer."""
        expected = {
            "drop": set(),
            "optimize": set(),
            "rebuild": set(),
            "migrate": set(),
            "rerank": {"query", "passages"},
            "explain": {"query", "passage_id"},
            "neighbours": {"passage_id", "before", "after"},
            "stats": set(),
        }[op]
        if set(kwargs) != expected:
            names = ", ".join(sorted(expected)) or "none"
            raise InvalidRequest(f"'{op}' takes these arguments: {names}", field="op")
        if "query" in kwargs and not isinstance(kwargs["query"], str):
            raise InvalidQuery("a query must be text")
        if "passage_id" in kwargs and not isinstance(kwargs["passage_id"], str):
            raise InvalidRequest("passage_id must be a string", field="passage_id")
        for side in ("before", "after"):
            n = kwargs.get(side, 0)
            if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_TOP_K:
                raise InvalidRequest(f"{side} must be an integer from 0 to {MAX_TOP_K}", field=side)
        given: dict[str, Passage] = {}
        if op == "rerank":
            ps = kwargs["passages"]
            if isinstance(ps, (str, bytes)) or not isinstance(ps, Sequence) or len(ps) > MAX_BATCH:
                raise InvalidRequest(
                    f"passages must be a list of at most {MAX_BATCH} Passage", field="passages"
                )
            if not all(isinstance(p, Passage) for p in ps):
                raise InvalidRequest("passages must be Passage objects", field="passages")
            given = {p.id: p for p in ps}

        def check(out: Any) -> Any:
            if op == "drop" and type(out) is IndexStatus and (out.exists or out.passages):
                return self._violation(
                    out.index,
                    "answered drop with an index that still exists (exists=True)"
                    if out.exists
                    else f"answered drop with {out.passages} passage(s) left",
                )
            if type(out) is Searched:
                answer = self._checked_search(out, max(len(given), 1), 0.0, 0.0)
                if isinstance(answer, Searched):
                    foreign = [h.passage.id for h in answer.hits if h.passage.id not in given]
                    if foreign:
                        return self._violation(
                            out.index, f"rerank answered {len(foreign)} passage(s) it was not given"
                        )
                    return _stamped(answer, deadline_s=None, elapsed_ms=None)
                return answer
            if type(out) in (Explained, Neighbours):
                return self._checked_passages(out)
            return out

        return check
