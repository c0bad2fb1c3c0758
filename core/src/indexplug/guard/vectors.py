"""The guard's vector interface (``Capabilities.vectors``): adding and searching vectors,
the query vector and the vector space."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from indexplug.deadlines import Deadline
from indexplug.errors import InvalidQuery, InvalidRequest, NotSupported
from indexplug.filters import (
    Filter,
    matches,
)
from indexplug.guard.base import (
    MAX_QUERY_CHARS,
    MAX_TOP_K,
    Progress,
    _AddPlan,
    _check_count,
    _describe,
    _Plan,
    _stamped,
)
from indexplug.guard.writes import Writing
from indexplug.names import validate_index_name
from indexplug.outcomes import (
    BadRequest,
    Indexed,
    NoMatch,
    Searched,
    VectorAddOutcome,
    VectorSearchOutcome,
)
from indexplug.passages import (
    Passage,
)
from indexplug.protocols import Embedder
from indexplug.vectorcheck import (
    checked_vector,
    checked_vectors,
    space_problem,
    stated_embedder,
)


class Vectors(Writing):
    """The vector interface under the guard."""

    # -- the vector interface (Capabilities.vectors) -------------------------------------------
    def add_vectors(
        self,
        index: str,
        passages: Sequence[Passage],
        vectors: Sequence[Any],
        *,
        embedder: str | Embedder | None = None,
        max_bytes: int | None = None,
        deadline_s: float | None = None,
        progress: Progress | None = None,
    ) -> VectorAddOutcome:
        """Store ``passages`` with ``vectors[i]`` as passage ``i``'s vector (needs
        ``Capabilities.vectors``): the caller's own embeddings, used as they are (normalised),
        not embedded again.  ``embedder``: the name of the model they are of (or the embedder
        itself); left out, the index's own is assumed.  A vector that is ragged, empty, all
        zeros, NaN or infinite is refused (:class:`InvalidRequest`); one of another length or
        another embedder than the index's is ``BAD_REQUEST`` (:class:`BadRequest`).  Batched,
        deduplicated and answered as :meth:`add` (the first of two equal passages keeps its
        vector)."""
        plan, by_id, stated = self._plan_add_vectors(
            index, passages, vectors, embedder, max_bytes, deadline_s, progress
        )
        done: list[Any] = []
        for chunk in plan.chunks:
            call = self._add_vectors_call(index, chunk, by_id, stated, max_bytes, plan.deadline)
            out = self._run(call)
            done.append(out)
            if not isinstance(out, Indexed):
                break
            if progress is not None:
                progress(sum(len(c) for c in plan.chunks[: len(done)]), plan.total)
        return cast(VectorAddOutcome, self._merged_vector_add(index, plan, done, by_id, stated))

    async def aadd_vectors(
        self,
        index: str,
        passages: Sequence[Passage],
        vectors: Sequence[Any],
        *,
        embedder: str | Embedder | None = None,
        max_bytes: int | None = None,
        deadline_s: float | None = None,
        progress: Progress | None = None,
    ) -> VectorAddOutcome:
        """:meth:`add_vectors` as a coroutine."""
        import asyncio

        plan, by_id, stated = await asyncio.to_thread(
            self._plan_add_vectors,
            index,
            passages,
            vectors,
            embedder,
            max_bytes,
            deadline_s,
            progress,
        )
        done: list[Any] = []
        for chunk in plan.chunks:
            call = self._add_vectors_call(index, chunk, by_id, stated, max_bytes, plan.deadline)
            out = await self._arun(call)
            done.append(out)
            if not isinstance(out, Indexed):
                break
            if progress is not None:
                progress(sum(len(c) for c in plan.chunks[: len(done)]), plan.total)
        if not done:  # an empty write: asked of the plugin, for its own answer
            empty = self._add_vectors_call(index, [], by_id, stated, None, plan.deadline)
            return cast(VectorAddOutcome, await self._arun(empty))
        return cast(VectorAddOutcome, self._merged_add(index, plan, done))

    def search_vector(
        self,
        index: str,
        vector: Sequence[float] | Any,
        *,
        top_k: int = 10,
        embedder: str | Embedder | None = None,
        with_vectors: bool = False,
        deadline_s: float | None = None,
        filters: Mapping[str, Any] | Filter | None = None,
    ) -> VectorSearchOutcome:
        """The ``top_k`` passages nearest ``vector`` (needs ``Capabilities.vectors``), on the
        backend's score scale; ``embedder`` as for :meth:`add_vectors`.  With
        ``with_vectors``, each hit carries its stored vector (:attr:`Hit.vector`, checked: the
        index's dimension, finite), e.g. for maximal marginal relevance."""
        self.prepare()
        plan = self._plan_search_vector(
            index, vector, top_k, embedder, with_vectors, deadline_s, filters
        )
        return cast(VectorSearchOutcome, self._run(plan))

    async def asearch_vector(
        self,
        index: str,
        vector: Sequence[float] | Any,
        *,
        top_k: int = 10,
        embedder: str | Embedder | None = None,
        with_vectors: bool = False,
        deadline_s: float | None = None,
        filters: Mapping[str, Any] | Filter | None = None,
    ) -> VectorSearchOutcome:
        """:meth:`search_vector` as a coroutine."""
        if not self._prepared:
            import asyncio

            await asyncio.to_thread(self.prepare)
        plan = self._plan_search_vector(
            index, vector, top_k, embedder, with_vectors, deadline_s, filters
        )
        return cast(VectorSearchOutcome, await self._arun(plan))

    def query_vector(self, text: str) -> Any:
        """The query vector the backend would search ``text`` by (needs
        ``Capabilities.vectors``), checked and copied: the start of a search by vector that
        the caller reranks, e.g. by maximal marginal relevance.  An embedder that fails
        raises its error, one that answers no usable vector :class:`InvalidRequest`."""
        self._claim_vectors("embed a query")
        if not isinstance(text, str) or not text.strip() or "\x00" in text:
            raise InvalidQuery("a query must be non-empty text without NUL")
        if len(text) > MAX_QUERY_CHARS:
            raise InvalidQuery(f"the query is longer than {MAX_QUERY_CHARS} characters")
        raw = self.backend.query_vector(text)  # type: ignore[attr-defined]
        try:
            return checked_vector(raw, "query")
        except InvalidRequest as exc:
            raise InvalidQuery(
                f"the backend's embedder gave no usable query vector: {exc}"
            ) from None

    def vector_space(self) -> tuple[str, int]:
        """The name and dimension of the embedder whose vectors the backend stores (needs
        ``Capabilities.vectors``): what a caller's vectors must be of."""
        self._claim_vectors("report its vector space")
        try:
            space = self.backend.vector_space()  # type: ignore[attr-defined]
            space_problem(space, None, None)
        except Exception as exc:
            raise InvalidRequest(
                f"backend '{self.name}' cannot say its vector space: {_describe(exc)}",
                field="op",
            ) from None
        return str(space[0]), int(space[1])

    def _claim_vectors(self, op: str) -> None:
        if not getattr(self.backend.capabilities, "vectors", False) or not all(
            callable(getattr(self.backend, m, None))
            for m in ("vector_space", "query_vector", "add_vectors", "search_vector")
        ):
            raise NotSupported(self.name, "vectors", op)

    def _plan_add_vectors(
        self,
        index: str,
        passages: Sequence[Passage],
        vectors: Sequence[Any],
        embedder: str | Embedder | None,
        max_bytes: int | None,
        deadline_s: float | None,
        progress: Progress | None,
    ) -> tuple[_AddPlan, dict[str, Any], str | None]:
        validate_index_name(index)
        self._claim_vectors("add passages with vectors")
        stated = stated_embedder(embedder)
        plan = self._plan_add(index, passages, max_bytes, deadline_s, progress)
        checked = checked_vectors(vectors, len(passages))
        by_id: dict[str, Any] = {}
        for p, v in zip(passages, checked, strict=True):
            by_id.setdefault(p.id, v)
        return plan, by_id, stated

    def _vector_plan(
        self,
        op: str,
        index: str,
        deadline: Deadline,
        dim: int | None,
        stated: str | None,
        call: Callable[[str], Any],
        check: Callable[[Any], Any],
    ) -> _Plan:
        """A vector op's plan: on the worker thread, under the deadline, the backend's vector
        space is read and the vectors' length and stated embedder checked against it (a
        ``BadRequest`` when they differ), then ``call(embedder_name)`` asks the backend."""

        def fn() -> Any:
            field, said = space_problem(self.backend.vector_space(), dim, stated)  # type: ignore[attr-defined]
            if field is not None:
                return BadRequest(index=index, backend=self.plugin, field=field, reason=said)
            return call(said)

        return _Plan(op, index, deadline, fn, check)

    def _add_vectors_call(
        self,
        index: str,
        chunk: list[Passage],
        by_id: dict[str, Any],
        stated: str | None,
        max_bytes: int | None,
        deadline: Deadline,
    ) -> _Plan:
        check = self._add_call(index, chunk, max_bytes, deadline).check
        # the backend gets copies: nothing it does to an array reaches the next batch's
        vecs = [by_id[p.id].copy() for p in chunk]
        dim = int(vecs[0].shape[0]) if vecs else None
        return self._vector_plan(
            "add_vectors",
            index,
            deadline,
            dim,
            stated,
            lambda name: self.backend.add_vectors(  # type: ignore[attr-defined]
                index, chunk, vecs, embedder=name, max_bytes=max_bytes, deadline=deadline
            ),
            check,
        )

    def _merged_vector_add(
        self,
        index: str,
        plan: _AddPlan,
        outs: list[Any],
        by_id: dict[str, Any],
        stated: str | None,
    ) -> Any:
        if not outs:  # an empty write: asked of the plugin, for its own answer
            call = self._add_vectors_call(index, [], by_id, stated, None, plan.deadline)
            return self._run(call)
        return self._merged_add(index, plan, outs)

    def _plan_search_vector(
        self,
        index: str,
        vector: Any,
        top_k: int,
        embedder: str | Embedder | None,
        with_vectors: bool,
        deadline_s: float | None,
        filters: Mapping[str, Any] | Filter | None,
    ) -> _Plan:
        validate_index_name(index)
        self._claim_vectors("search by vector")
        if type(with_vectors) is not bool:
            raise InvalidRequest("with_vectors must be true or false", field="with_vectors")
        stated = stated_embedder(embedder)
        query = checked_vector(vector, "vector")
        dim = int(query.shape[0])
        _check_count("top_k", top_k, 1, MAX_TOP_K)
        parsed, given = self._filters(filters)
        deadline = Deadline.after(deadline_s)
        started = time.perf_counter()

        def check(out: Any) -> Any:
            elapsed = round((time.perf_counter() - started) * 1000, 3)
            if type(out) is Searched:
                answer = self._checked_search(
                    out, top_k, deadline.seconds, elapsed, dim if with_vectors else None
                )
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

        return self._vector_plan(
            "search_vector",
            index,
            deadline,
            dim,
            stated,
            lambda name: self.backend.search_vector(  # type: ignore[attr-defined]
                index,
                query.copy(),
                top_k=top_k,
                embedder=name,
                with_vectors=with_vectors,
                deadline=deadline,
                filters=given,
            ),
            check,
        )
