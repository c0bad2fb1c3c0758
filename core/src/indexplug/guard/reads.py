"""The guard's reads: ``get`` and ``scan`` (one page or every page), blocking and async."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any, cast

from indexplug.construct import construct
from indexplug.deadlines import Deadline
from indexplug.errors import InvalidRequest
from indexplug.filters import (
    Filter,
    matches,
)
from indexplug.guard.base import (
    MAX_REMOVE_IDS,
    MAX_SCAN,
    _check_count,
    _is_unicode,
    _Plan,
    _Refused,
    _strings,
)
from indexplug.guard.searches import Searching
from indexplug.names import validate_index_name
from indexplug.outcomes import (
    GetOutcome,
    Got,
    IndexFailed,
    IndexTimeout,
    IndexUnavailable,
    Scanned,
    ScanOutcome,
)


class Reading(Searching):
    """Reads under the guard: passages by id or key, and pages of a scan."""

    def get(
        self,
        index: str,
        ids: Sequence[str] = (),
        *,
        keys: Sequence[str] = (),
        deadline_s: float | None = None,
    ) -> GetOutcome:
        """The stored passages with these ids, and every passage of these caller keys (needs
        ``Capabilities.get``, and ``keys`` for keys); what is not there is listed as missing."""
        return cast(GetOutcome, self._run(self._plan_get(index, ids, keys, deadline_s)))

    async def aget(
        self,
        index: str,
        ids: Sequence[str] = (),
        *,
        keys: Sequence[str] = (),
        deadline_s: float | None = None,
    ) -> GetOutcome:
        """:meth:`get` as a coroutine."""
        return cast(GetOutcome, await self._arun(self._plan_get(index, ids, keys, deadline_s)))

    def scan(
        self,
        index: str,
        *,
        filters: Mapping[str, Any] | Filter | None = None,
        after: str | None = None,
        limit: int = 100,
        deadline_s: float | None = None,
    ) -> ScanOutcome:
        """One page (at most ``limit``) of the index's passages in id order, after the cursor
        ``after`` (``Scanned.next_after`` of the previous page); needs ``Capabilities.scan``.
        :meth:`scan_all` walks every page."""
        return cast(
            ScanOutcome, self._run(self._plan_scan(index, filters, after, limit, deadline_s))
        )

    async def ascan(
        self,
        index: str,
        *,
        filters: Mapping[str, Any] | Filter | None = None,
        after: str | None = None,
        limit: int = 100,
        deadline_s: float | None = None,
    ) -> ScanOutcome:
        """:meth:`scan` as a coroutine."""
        plan = self._plan_scan(index, filters, after, limit, deadline_s)
        return cast(ScanOutcome, await self._arun(plan))

    def scan_all(
        self,
        index: str,
        *,
        filters: Mapping[str, Any] | Filter | None = None,
        after: str | None = None,
        page: int = 500,
        deadline_s: float | None = None,
    ) -> Iterator[Scanned | IndexFailed | IndexTimeout | IndexUnavailable]:
        """Every page of :meth:`scan`, in order; a failure is yielded as the last item (so a
        caller always learns whether it saw everything).  ``deadline_s`` is per page."""
        cursor = after
        while True:
            out = self.scan(index, filters=filters, after=cursor, limit=page, deadline_s=deadline_s)
            yield out
            if not isinstance(out, Scanned) or out.next_after is None:
                return
            cursor = out.next_after

    async def ascan_all(
        self,
        index: str,
        *,
        filters: Mapping[str, Any] | Filter | None = None,
        after: str | None = None,
        page: int = 500,
        deadline_s: float | None = None,
    ) -> AsyncIterator[Scanned | IndexFailed | IndexTimeout | IndexUnavailable]:
        """:meth:`scan_all` as an async iterator: every page of :meth:`ascan`, in order, a
        failure yielded as the last item."""
        cursor = after
        while True:
            out = await self.ascan(
                index, filters=filters, after=cursor, limit=page, deadline_s=deadline_s
            )
            yield out
            if not isinstance(out, Scanned) or out.next_after is None:
                return
            cursor = out.next_after

    def _plan_get(
        self,
        index: str,
        ids: Sequence[str],
        keys: Sequence[str],
        deadline_s: float | None,
        deadline: Deadline | None = None,
    ) -> _Plan:
        validate_index_name(index)
        self._claim("get", "get")
        wanted = list(dict.fromkeys(_strings("ids", ids, MAX_REMOVE_IDS)))
        by_key = list(dict.fromkeys(_strings("keys", keys, MAX_REMOVE_IDS)))
        if by_key and not getattr(self.backend.capabilities, "keys", False):
            raise InvalidRequest(
                f"backend '{self.name}' does not support caller keys", field="keys"
            )
        if deadline is None:
            deadline = Deadline.after(deadline_s)

        def check(out: Any) -> Any:
            if type(out) is not Got:
                return out
            fields = out.__dict__
            got, missing = fields.get("passages"), fields.get("missing_ids")
            missing_keys = fields.get("missing_keys")
            if (
                type(got) is not list
                or type(missing) is not list
                or type(missing_keys) is not list
                or type(fields.get("backend")) is not str
            ):
                return self._violation(index, "answered GOT with fields of the wrong type")
            try:
                copies = [self._passage(index, i, p) for i, p in enumerate(got, 1)]
            except _Refused as refused:
                return refused.outcome
            asked, asked_keys = set(wanted), set(by_key)
            seen_ids = {p.id for p in copies}
            seen_keys = {p.key for p in copies if p.key in asked_keys}
            stray = [p.id for p in copies if p.id not in asked and p.key not in asked_keys]
            if stray:
                return self._violation(index, f"get answered {len(stray)} passage(s) not asked for")
            if set(missing) != asked - seen_ids or set(missing_keys) != asked_keys - seen_keys:
                return self._violation(
                    index, "get's missing ids or keys do not match the passages it answered"
                )
            # in the order asked: the ids asked for, then each key's passages (by id)
            order = {pid: n for n, pid in enumerate(wanted)}
            key_order = {k: n for n, k in enumerate(by_key)}
            copies.sort(
                key=lambda p: (order.get(p.id, len(order)), key_order.get(p.key or "", 0), p.id)
            )
            unique = list({p.id: p for p in copies}.values())
            return construct(
                Got,
                {
                    "index": index,
                    "backend": out.backend or self.plugin,
                    "code": "GOT",
                    "passages": unique,
                    "missing_ids": [i for i in wanted if i not in seen_ids],
                    "missing_keys": [k for k in by_key if k not in seen_keys],
                },
            )

        native = self._native("get")
        return _Plan(
            "get",
            index,
            deadline,
            lambda: self.backend.get(index, wanted, keys=by_key, deadline=deadline),  # type: ignore[attr-defined]
            check,
            (lambda: native(index, wanted, keys=by_key, deadline=deadline)) if native else None,
        )

    def _plan_scan(
        self,
        index: str,
        filters: Mapping[str, Any] | Filter | None,
        after: str | None,
        limit: int,
        deadline_s: float | None,
        deadline: Deadline | None = None,
    ) -> _Plan:
        validate_index_name(index)
        self._claim("scan", "scan")
        if after is not None and (
            type(after) is not str or not after or "\x00" in after or not _is_unicode(after)
        ):
            raise InvalidRequest(
                "after must be a cursor from a previous page (Unicode text)", field="after"
            )
        _check_count("limit", limit, 1, MAX_SCAN)
        parsed, given = self._filters(filters)
        if deadline is None:
            deadline = Deadline.after(deadline_s)

        def check(out: Any) -> Any:
            if type(out) is not Scanned:
                return out
            fields = out.__dict__
            page, cursor = fields.get("passages"), fields.get("next_after")
            if (
                type(page) is not list
                or (cursor is not None and type(cursor) is not str)
                or type(fields.get("backend")) is not str
            ):
                return self._violation(index, "answered SCANNED with fields of the wrong type")
            if len(page) > limit:
                return self._violation(
                    index, f"scan answered {len(page)} passages for limit {limit}"
                )
            try:
                copies = [self._passage(index, i, p) for i, p in enumerate(page, 1)]
            except _Refused as refused:
                return refused.outcome
            last = after
            for p in copies:
                if last is not None and not p.id > last:
                    return self._violation(index, "scan answered passages out of id order")
                if parsed is not None and not matches(parsed, p.metadata):
                    return self._violation(
                        index, f"scan answered passage {p.id[:12]}... that fails the filter"
                    )
                last = p.id
            if cursor is not None and (not copies or cursor != copies[-1].id):
                return self._violation(index, "scan's cursor is not the last id of its page")
            return construct(
                Scanned,
                {
                    "index": index,
                    "backend": out.backend or self.plugin,
                    "code": "SCANNED",
                    "passages": copies,
                    "next_after": cursor,
                },
            )

        native = self._native("scan")
        return _Plan(
            "scan",
            index,
            deadline,
            lambda: self.backend.scan(  # type: ignore[attr-defined]
                index, filters=given, after=after, limit=limit, deadline=deadline
            ),
            check,
            (lambda: native(index, filters=given, after=after, limit=limit, deadline=deadline))
            if native
            else None,
        )
