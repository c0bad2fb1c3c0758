"""The guard's text search: ``search`` and ``asearch``, their plan and the filters."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, cast

from indexplug.deadlines import Deadline
from indexplug.errors import InvalidQuery, InvalidRequest
from indexplug.filters import (
    Filter,
    equality_map,
    matches,
    operators,
    parse_filter,
    to_json,
)
from indexplug.guard.base import (
    FILTER_TYPES,
    MAX_QUERY_CHARS,
    MAX_TOP_K,
    _check_count,
    _Plan,
    _stamped,
)
from indexplug.guard.checks import Checking
from indexplug.names import validate_index_name
from indexplug.outcomes import (
    NoMatch,
    Searched,
    SearchOutcome,
)


class Searching(Checking):
    """Text search under the guard, and the filters every op shares."""

    # -- ops -----------------------------------------------------------------------------
    # Each op is planned once (its arguments checked, the plugin call and the check of its
    # answer bound) and run either blocking (``search``) or as a coroutine (``asearch``):
    # the two forms answer the same outcomes under the same deadline.

    def search(
        self,
        index: str,
        query: str,
        *,
        top_k: int = 10,
        deadline_s: float | None = None,
        filters: Mapping[str, Any] | Filter | None = None,
    ) -> SearchOutcome:
        """The ``top_k`` best passages for ``query`` (``filters``: :mod:`indexplug.filters`).

        The first search of a guard first lets the backend :meth:`prepare`; its deadline
        starts after that."""
        self.prepare()
        return cast(
            SearchOutcome, self._run(self._plan_search(index, query, top_k, deadline_s, filters))
        )

    async def asearch(
        self,
        index: str,
        query: str,
        *,
        top_k: int = 10,
        deadline_s: float | None = None,
        filters: Mapping[str, Any] | Filter | None = None,
    ) -> SearchOutcome:
        """:meth:`search` as a coroutine."""
        if not self._prepared:
            import asyncio

            await asyncio.to_thread(self.prepare)
        plan = self._plan_search(index, query, top_k, deadline_s, filters)
        return cast(SearchOutcome, await self._arun(plan))

    def _plan_search(
        self,
        index: str,
        query: str,
        top_k: int,
        deadline_s: float | None,
        filters: Mapping[str, Any] | Filter | None,
    ) -> _Plan:
        validate_index_name(index)
        if not isinstance(query, str):
            raise InvalidQuery(f"a query must be text, not {type(query).__name__}")
        if not query.strip():
            raise InvalidQuery("the query is empty")
        if "\x00" in query:
            raise InvalidQuery("the query contains a NUL character")
        if len(query) > MAX_QUERY_CHARS:
            raise InvalidQuery(f"the query is longer than {MAX_QUERY_CHARS} characters")
        if not any(ch.isalnum() for ch in query):  # "?!", "--": nothing any backend can search
            raise InvalidQuery("the query has no word to search (no letter or digit)")
        _check_count("top_k", top_k, 1, MAX_TOP_K)
        parsed, given = self._filters(filters)
        deadline = Deadline.after(deadline_s)
        started = time.perf_counter()

        def check(out: Any) -> Any:
            elapsed = round((time.perf_counter() - started) * 1000, 3)
            if type(out) is Searched:
                answer = self._checked_search(out, top_k, deadline.seconds, elapsed)
                if parsed is not None and type(answer) is Searched:
                    for hit in answer.hits:
                        if not matches(parsed, hit.passage.metadata):
                            return self._violation(
                                index,
                                f"hit {hit.rank} does not pass the filter it was asked for",
                            )
                return answer
            if type(out) is NoMatch:
                return _stamped(out, deadline_s=deadline.seconds, elapsed_ms=elapsed)
            return out

        native = self._native("search")
        return _Plan(
            "search",
            index,
            deadline,
            lambda: self.backend.search(
                index, query, top_k=top_k, deadline=deadline, filters=given
            ),
            check,
            (lambda: native(index, query, top_k=top_k, deadline=deadline, filters=given))
            if native
            else None,
        )

    def _filters(self, filters: Mapping[str, Any] | Filter | None) -> tuple[Filter | None, Any]:
        """``filters`` parsed, and what the plugin is given: the :data:`Filter` for a backend
        that claims the operators it uses, a ``{key: value}`` map of equalities for one that
        claims only ``filters``; anything it cannot serve is refused (BAD_REQUEST), never
        ignored."""
        if filters is not None and not isinstance(filters, (Mapping, *FILTER_TYPES)):
            raise InvalidRequest("filters must be a JSON object", field="filters")
        parsed = parse_filter(filters)
        if parsed is None:
            return None, None
        caps = self.backend.capabilities
        served = frozenset(getattr(caps, "filter_operators", frozenset()) or ())
        used = operators(parsed)
        if served:
            missing = used - served
            if missing:
                raise InvalidRequest(
                    f"backend '{self.name}' cannot serve the filter operator(s) "
                    f"{', '.join(sorted(missing))}",
                    field="filters",
                )
            # the plugin gets its own copy: the one the guard checks answers against is never
            # in a plugin's hands (frozen, but object.__setattr__ gets past that)
            return parsed, parse_filter(to_json(parsed))
        if not getattr(caps, "filters", False):
            raise InvalidRequest(
                f"backend '{self.name}' does not support metadata filters", field="filters"
            )
        equal = equality_map(parsed)
        if equal is None:
            raise InvalidRequest(
                f"backend '{self.name}' serves equality filters only (no operators, lists or null)",
                field="filters",
            )
        return parsed, equal
