"""The guard's writes: ``add`` in batches and ``remove`` by ids, keys or filters."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from indexplug.deadlines import Deadline
from indexplug.errors import InvalidRequest
from indexplug.filters import (
    Filter,
    parse_filter,
)
from indexplug.guard.base import (
    MAX_REMOVE_IDS,
    MAX_SCAN,
    MAX_WRITE,
    WRITE_BATCH,
    Progress,
    _AddPlan,
    _check_remove_count,
    _chunks,
    _Plan,
    _strings,
    _with_missing_keys,
    _write_deadline,
)
from indexplug.guard.reads import Reading
from indexplug.names import validate_index_name
from indexplug.outcomes import (
    AddOutcome,
    Got,
    Indexed,
    Removed,
    RemoveOutcome,
    Scanned,
    _Outcome,
)
from indexplug.passages import (
    Passage,
)


class Writing(Reading):
    """Writes under the guard: adds in batches, removes by ids, keys or filters."""

    def add(
        self,
        index: str,
        passages: Sequence[Passage],
        *,
        max_bytes: int | None = None,
        deadline_s: float | None = None,
        progress: Progress | None = None,
    ) -> AddOutcome:
        """Store ``passages`` (a passage already stored is *known*, never duplicated).

        Writes have no deadline unless one is given (:data:`WRITE_DEADLINE_S` is only a
        backstop for a call that never returns): embedding thousands of passages on a CPU
        takes minutes.  Large writes go to the plugin in batches of :data:`WRITE_BATCH`
        (never splitting one caller key's passages); ``progress(done, total)`` is called after
        each.  A write that fails or hits its deadline keeps the batches that were stored and
        says how many (``committed``); repeating the same call completes the rest.
        """
        plan = self._plan_add(index, passages, max_bytes, deadline_s, progress)
        done: list[Any] = []
        for chunk in plan.chunks:
            out = self._run(self._add_call(index, chunk, max_bytes, plan.deadline))
            done.append(out)
            if not isinstance(out, Indexed):
                break
            if progress is not None:
                progress(sum(len(c) for c in plan.chunks[: len(done)]), plan.total)
        return cast(AddOutcome, self._merged_add(index, plan, done))

    async def aadd(
        self,
        index: str,
        passages: Sequence[Passage],
        *,
        max_bytes: int | None = None,
        deadline_s: float | None = None,
        progress: Progress | None = None,
    ) -> AddOutcome:
        """:meth:`add` as a coroutine (the write is checked and batched on a worker thread:
        up to :data:`MAX_WRITE` passages are work the event loop must not wait on)."""
        import asyncio  # here, not at the top: the CLI's start-up never needs it

        plan = await asyncio.to_thread(
            self._plan_add, index, passages, max_bytes, deadline_s, progress
        )
        done: list[Any] = []
        for chunk in plan.chunks:
            out = await self._arun(self._add_call(index, chunk, max_bytes, plan.deadline))
            done.append(out)
            if not isinstance(out, Indexed):
                break
            if progress is not None:
                progress(sum(len(c) for c in plan.chunks[: len(done)]), plan.total)
        return cast(AddOutcome, self._merged_add(index, plan, done))

    def remove(
        self,
        index: str,
        ids: Sequence[str] = (),
        *,
        keys: Sequence[str] = (),
        filters: Mapping[str, Any] | Filter | None = None,
        deadline_s: float | None = None,
    ) -> RemoveOutcome:
        """Remove passages by id, by caller key (every passage of each key) or by filter
        (every passage that passes it; needs ``scan``).  Keys and filters are resolved to ids
        first, under the same deadline; ``missing_keys`` lists keys no passage had."""
        deadline = Deadline.after(_write_deadline(deadline_s))
        targets, missing_keys = self._remove_targets(index, ids, keys, filters, deadline)
        if isinstance(targets, _Outcome):
            return cast(RemoveOutcome, targets)
        out = self._run(self._remove_call(index, targets, deadline))
        return cast(RemoveOutcome, _with_missing_keys(out, missing_keys))

    async def aremove(
        self,
        index: str,
        ids: Sequence[str] = (),
        *,
        keys: Sequence[str] = (),
        filters: Mapping[str, Any] | Filter | None = None,
        deadline_s: float | None = None,
    ) -> RemoveOutcome:
        """:meth:`remove` as a coroutine."""
        deadline = Deadline.after(_write_deadline(deadline_s))
        import asyncio  # here, not at the top: the CLI's start-up never needs it

        targets = await asyncio.to_thread(self._remove_targets, index, ids, keys, filters, deadline)
        found, missing_keys = targets
        if isinstance(found, _Outcome):
            return cast(RemoveOutcome, found)
        out = await self._arun(self._remove_call(index, found, deadline))
        return cast(RemoveOutcome, _with_missing_keys(out, missing_keys))

    def _plan_add(
        self,
        index: str,
        passages: Sequence[Passage],
        max_bytes: int | None,
        deadline_s: float | None,
        progress: Progress | None = None,
    ) -> _AddPlan:
        validate_index_name(index)
        if progress is not None and not callable(progress):
            # refused now: found out after the first batch, the write would stop half done
            raise InvalidRequest(
                "progress must be a callable progress(done, total)", field="progress"
            )
        if isinstance(passages, (str, bytes)) or not isinstance(passages, Sequence):
            raise InvalidRequest("passages must be a list of Passage", field="passages")
        if len(passages) > MAX_WRITE:
            raise InvalidRequest(
                f"a write of {len(passages)} passages is over the limit of {MAX_WRITE}; "
                "split it into smaller writes",
                field="passages",
            )
        if max_bytes is not None and (
            isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0
        ):
            raise InvalidRequest("max_bytes must be a positive integer", field="max_bytes")
        unique: dict[str, Passage] = {}
        keyed = False
        for p in passages:
            if type(p) is not Passage:
                raise InvalidRequest(
                    f"passages must be Passage objects, got {type(p).__name__}", field="passages"
                )
            keyed = keyed or p.key is not None
            unique.setdefault(p.id, p)
        if keyed and not getattr(self.backend.capabilities, "keys", False):
            raise InvalidRequest(
                f"backend '{self.name}' does not support caller keys (passages with a key)",
                field="passages",
            )
        batch = list(unique.values())
        deadline = Deadline.after(_write_deadline(deadline_s))
        return _AddPlan(
            deadline=deadline,
            chunks=_chunks(batch, WRITE_BATCH),
            total=len(batch),
            dupes=len(passages) - len(batch),
        )

    def _add_call(
        self, index: str, chunk: list[Passage], max_bytes: int | None, deadline: Deadline
    ) -> _Plan:
        def check(out: Any) -> Any:
            if isinstance(out, Indexed) and out.added + out.known != len(chunk):
                return self._violation(
                    index,
                    f"reported {out.added} added + {out.known} known for "
                    f"{len(chunk)} distinct passages",
                )
            return out

        native = self._native("add")
        return _Plan(
            "add",
            index,
            deadline,
            lambda: self.backend.add(index, chunk, max_bytes=max_bytes, deadline=deadline),
            check,
            (lambda: native(index, chunk, max_bytes=max_bytes, deadline=deadline))
            if native
            else None,
        )

    def _merged_add(self, index: str, plan: _AddPlan, outs: list[Any]) -> Any:
        """One answer for a write sent in batches: the batches' ``Indexed`` summed, or the
        first failure with how many passages the batches before it stored."""
        if not outs:  # an empty write: asked of the plugin as before, for its own answer
            return self._run(self._add_call(index, [], None, plan.deadline))
        good = [o for o in outs if isinstance(o, Indexed)]
        last = outs[-1]
        if not isinstance(last, Indexed):
            if len(plan.chunks) == 1 or not hasattr(last, "committed"):
                return last  # one batch: the backend's own answer, as it gave it
            stored = sum(o.added + o.known for o in good)
            # what the failing batch itself says it stored, when that is a count of it
            own = last.committed
            if type(own) is int and 0 <= own <= len(plan.chunks[len(outs) - 1]):
                stored += own
            return last.model_copy(update={"committed": stored})
        if len(good) == 1:
            merged = good[0]
        else:
            merged = good[-1].model_copy(
                update={
                    "added": sum(o.added for o in good),
                    "known": sum(o.known for o in good),
                    "added_ids": [i for o in good for i in o.added_ids],
                    "known_ids": [i for o in good for i in o.known_ids],
                    "replaced": sum(o.replaced for o in good),
                }
            )
        if plan.dupes:
            merged = merged.model_copy(update={"known": merged.known + plan.dupes})
        return merged

    def _remove_targets(
        self,
        index: str,
        ids: Sequence[str],
        keys: Sequence[str],
        filters: Mapping[str, Any] | Filter | None,
        deadline: Deadline,
    ) -> tuple[Any, list[str]]:
        """The distinct ids a remove is for (those given, those of ``keys``, those passing
        ``filters``) and the keys no passage had; or the failure that stopped resolving them."""
        validate_index_name(index)
        wanted = _strings("ids", ids, MAX_REMOVE_IDS)
        keys = _strings("keys", keys, MAX_REMOVE_IDS)
        missing_keys: list[str] = []
        if keys:
            if not getattr(self.backend.capabilities, "keys", False):
                raise InvalidRequest(
                    f"backend '{self.name}' does not support caller keys", field="keys"
                )
            got = self._run(self._plan_get(index, (), keys, None, deadline))
            if not isinstance(got, Got):
                return got, []
            wanted += [p.id for p in got.passages]
            missing_keys = list(got.missing_keys)
            _check_remove_count(len(wanted), "keys")
        if filters is not None:
            parsed = parse_filter(filters)
            if parsed is not None:
                cursor: str | None = None
                while True:
                    page = self._run(
                        self._plan_scan(index, parsed, cursor, MAX_SCAN, None, deadline)
                    )
                    if not isinstance(page, Scanned):
                        return page, []
                    wanted += [p.id for p in page.passages]
                    _check_remove_count(len(wanted), "filters")
                    if page.next_after is None:
                        break
                    cursor = page.next_after
        return list(dict.fromkeys(wanted)), missing_keys

    def _remove_call(self, index: str, distinct: list[str], deadline: Deadline) -> _Plan:
        def check(out: Any) -> Any:
            if isinstance(out, Removed) and out.removed + len(out.missing_ids) != len(distinct):
                return self._violation(
                    index,
                    f"reported {out.removed} removed + {len(out.missing_ids)} missing "
                    f"for {len(distinct)} ids",
                )
            return out

        native = self._native("remove")
        return _Plan(
            "remove",
            index,
            deadline,
            lambda: self.backend.remove(index, distinct, deadline=deadline),
            check,
            (lambda: native(index, distinct, deadline=deadline)) if native else None,
        )
