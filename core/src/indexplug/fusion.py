"""Fusion across indexes: one search over several indexes, combined honestly.

A fused search runs every leg (member index) concurrently under one shared deadline and combines
the rankings by reciprocal rank fusion (``score = sum over legs of 1 / (k + rank)``, k = 60 by
default).  Adding raw scores (``fusion = "sum"``) is allowed only when every leg declares the same
score scale: BM25 plus cosine is not a number.

Each leg's outcome is kept.  A leg that is unavailable, failed or ran past the deadline is named
in the fused answer's ``degraded`` list with its code and reason, and the answer still carries
what the other legs found; an answer built from fewer legs than asked for is never silent.  When
every leg fails, the answer is a failure outcome naming each leg.

A fused index is an ordinary :class:`~indexplug.targets.Target`: its guard wraps a
:class:`FusionBackend`, so the fused answer passes the same contract checks as any backend's, and
``add``, ``remove``, ``status`` and ``drop`` reach every member (eval and ``index`` work on a
fusion index unchanged).  Writes are not atomic across members; since passage ids are content
addresses, repeating a write that partly failed is safe (what a member already holds is *known*).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, wait
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from indexplug.deadlines import Deadline
from indexplug.errors import ConfigError, InvalidRequest
from indexplug.filters import Filter
from indexplug.guard import MAX_TOP_K, SETTLE_S, Guard
from indexplug.names import MAX_NAME_LENGTH, validate_index_name
from indexplug.outcomes import (
    AddOutcome,
    Degradation,
    Hit,
    Indexed,
    IndexEmpty,
    IndexFailed,
    IndexStatus,
    IndexTimeout,
    IndexUnavailable,
    NoMatch,
    OverBudget,
    Removed,
    RemoveOutcome,
    ScoreScale,
    Searched,
    SearchOutcome,
    StatusOutcome,
)
from indexplug.passages import MetadataValue, Passage
from indexplug.pools import LazyPool, discard
from indexplug.protocols import Capabilities, Readiness

if TYPE_CHECKING:
    from indexplug.targets import Target

FusionMethod = Literal["rrf", "sum"]
DEFAULT_RRF_K = 60
LEG_DEPTH = 100
"""Each leg is asked for at least this many hits: fusion needs more than the final top_k."""
FUSION_BACKEND = "fusion"
LEG_MARGIN_SHARE = 0.1
"""The share of a fused op's deadline kept back from its legs (between twice the guards'
settling time and :data:`LEG_MARGIN_MAX_S`, at most a quarter): the fusion's own time to
fuse the legs that answered and hand them over, so a loaded machine still gets them rather
than one ``INDEX_TIMEOUT`` for the whole answer."""
LEG_MARGIN_MAX_S = 1.0

T = TypeVar("T")

# Legs wait on their own guards (which use the guard's pool), so they get a pool of their own:
# a fused search can never starve the pool its legs need.
_POOL = LazyPool(32, "indexplug-fusion")


def rrf_scale(k: int = DEFAULT_RRF_K) -> ScoreScale:
    return ScoreScale(
        name="rrf",
        higher_is_better=True,
        comparable_across_searches=False,
        meaning=f"reciprocal rank fusion: sum over legs of 1/({k} + rank); ranks, not scores",
    )


def sum_scale(leg_scale: ScoreScale) -> ScoreScale:
    return ScoreScale(
        name=f"sum:{leg_scale.name}",
        higher_is_better=leg_scale.higher_is_better,
        comparable_across_searches=False,
        meaning=f"sum over legs of '{leg_scale.name}' scores (every leg has that scale)",
    )


@dataclass(frozen=True)
class Leg:
    """One member of a fusion: its name (as reported in ``degraded``) and its target."""

    name: str
    target: Target


def fuse_rankings(
    rankings: Sequence[Sequence[Hit]],
    *,
    top_k: int,
    method: FusionMethod = "rrf",
    rrf_k: int = DEFAULT_RRF_K,
    higher_is_better: bool = True,
) -> list[tuple[float, Passage]]:
    """Combine ranked hit lists into one ``(score, passage)`` list, best first.

    Passages are matched by their content-addressed id, so the same passage found by two
    backends counts once with both contributions.  Ties go to the better best rank, then to
    the earlier leg, then to the id (fully deterministic).
    """
    score: dict[str, float] = {}
    best: dict[str, tuple[int, int]] = {}
    passage: dict[str, Passage] = {}
    for leg_no, hits in enumerate(rankings):
        for hit in hits:
            pid = hit.passage.id
            gain = 1.0 / (rrf_k + hit.rank) if method == "rrf" else float(hit.score)
            score[pid] = score.get(pid, 0.0) + gain
            passage.setdefault(pid, hit.passage)
            best[pid] = min(best.get(pid, (hit.rank, leg_no)), (hit.rank, leg_no))
    sign = -1.0 if (method == "rrf" or higher_is_better) else 1.0
    order = sorted(score, key=lambda pid: (sign * score[pid], best[pid], pid))
    return [(score[pid], passage[pid]) for pid in order[:top_k]]


def _reason(out: Any) -> str:
    return str(getattr(out, "reason", None) or out.message)


class FusionBackend:
    """A backend whose index is a set of legs; wrapped in a :class:`Guard` like any backend."""

    name = FUSION_BACKEND
    description = "Reciprocal rank fusion over member indexes (a configured kind = 'fusion')."

    def __init__(
        self,
        legs: Sequence[Leg],
        *,
        method: FusionMethod = "rrf",
        rrf_k: int = DEFAULT_RRF_K,
        depth: int = LEG_DEPTH,
        owns_legs: bool = False,
    ) -> None:
        if len(legs) < 2:
            raise ConfigError("a fusion needs at least two legs")
        if rrf_k <= 0:
            raise ConfigError(f"rrf_k must be positive, got {rrf_k}")
        self.legs = list(legs)
        self.method: FusionMethod = method
        self.rrf_k = rrf_k
        self.depth = depth
        self.owns_legs = owns_legs
        scales = [leg.target.guard.score_scale for leg in self.legs]
        if method == "sum":
            names = {s.name for s in scales}
            if len(names) != 1:
                pairs = zip(legs, scales, strict=True)
                shown = ", ".join(f"{leg.name}: {s.name}" for leg, s in pairs)
                raise ConfigError(
                    "fusion = 'sum' adds scores, which needs every leg on the same scale; "
                    f"these differ ({shown}); use fusion = 'rrf'"
                )
            self.score_scale = sum_scale(scales[0])
        else:
            self.score_scale = rrf_scale(rrf_k)
        caps = [leg.target.guard.capabilities for leg in self.legs]
        self.capabilities = Capabilities(
            filters=all(c.filters for c in caps),
            # a filter goes to every leg as it is, so only what every leg serves
            filter_operators=frozenset.intersection(*(c.filter_operators for c in caps)),
            deletion=all(c.deletion for c in caps),
            persistence=all(c.persistence for c in caps),
            server=any(c.server for c in caps),
            dense=any(c.dense for c in caps),
        )

    # -- machinery -----------------------------------------------------------------------
    def _run(self, deadline: Deadline, fn: Callable[[Leg, float], T]) -> list[tuple[Leg, T | None]]:
        """Run ``fn(leg, seconds)`` for every leg at once; ``None`` for a leg still busy when
        its time is up.  Each leg gets the shared deadline less a margin (a tenth of what is
        left, at least twice the guards' settling time, at most a second and a quarter of what
        is left), so that a leg's answer, its guard's checks and this fusion's own work all
        land before the fusion's guard calls it late, on a loaded machine too."""
        left = deadline.remaining()
        margin = min(max(2 * SETTLE_S, left * LEG_MARGIN_SHARE), LEG_MARGIN_MAX_S, left / 4)
        seconds = max(left - margin, 0.001)
        futures: list[Future[T]] = [_POOL.get().submit(fn, leg, seconds) for leg in self.legs]
        wait(futures, timeout=seconds + margin / 2)
        results: list[tuple[Leg, T | None]] = []
        for leg, fut in zip(self.legs, futures, strict=True):
            if fut.done():
                exc = fut.exception()
                if exc is not None:
                    raise exc
                results.append((leg, fut.result()))
            else:
                fut.add_done_callback(discard)
                results.append((leg, None))
        return results

    @staticmethod
    def _late(leg: Leg, deadline: Deadline, op: str = "search") -> IndexTimeout:
        return IndexTimeout(
            index=leg.target.index,
            backend=leg.target.backend_name,
            deadline_s=deadline.seconds,
            reason=f"leg '{leg.name}' did not answer {op} within the shared deadline",
        )

    def _guarded(self, leg: Leg, call: Callable[[], T]) -> T | IndexFailed:
        try:
            return call()
        except Exception as exc:  # an InvalidRequest only one leg raises, for instance
            return IndexFailed(
                index=leg.target.index,
                backend=leg.target.backend_name,
                reason=f"leg '{leg.name}' refused the request: {exc}",
                error_type=type(exc).__name__,
            )

    def _all_failed(
        self,
        index: str,
        deadline: Deadline,
        failed: Sequence[tuple[Leg, Any]],
        empty: Sequence[Leg],
    ) -> IndexFailed | IndexTimeout | IndexUnavailable:
        parts = [f"leg '{leg.name}' {out.code}: {_reason(out)}" for leg, out in failed]
        parts += [f"leg '{leg.name}' is empty" for leg in empty]
        detail = "; ".join(parts)
        codes = {out.code for _, out in failed}
        if not empty and codes == {"INDEX_UNAVAILABLE"}:
            return IndexUnavailable(
                index=index, backend=self.name, reason=f"every leg is unavailable: {detail}"
            )
        if not empty and codes == {"INDEX_TIMEOUT"}:
            return IndexTimeout(
                index=index,
                backend=self.name,
                deadline_s=deadline.seconds,
                reason=f"every leg timed out: {detail}",
            )
        lead = "every leg failed" if not empty else "no leg that answered holds anything"
        return IndexFailed(
            index=index, backend=self.name, reason=f"{lead}: {detail}", error_type="FusionFailed"
        )

    # -- the backend protocol ------------------------------------------------------------
    def readiness(self) -> Readiness:
        reasons: list[str] = []
        for leg in self.legs:
            r = leg.target.guard.readiness()
            if r.ready:
                return Readiness.yes()
            reasons.append(f"leg '{leg.name}': {r.reason}")
        return Readiness.no("every leg is unavailable: " + "; ".join(reasons))

    def search(
        self,
        index: str,
        query: str,
        *,
        top_k: int,
        deadline: Deadline,
        filters: Mapping[str, MetadataValue] | Filter | None = None,
    ) -> SearchOutcome:
        depth = min(MAX_TOP_K, max(top_k, self.depth))

        def one(leg: Leg, seconds: float) -> Any:
            t = leg.target
            return self._guarded(
                leg,
                lambda: t.guard.search(
                    t.index, query, top_k=depth, deadline_s=seconds, filters=filters
                ),
            )

        answered: list[tuple[Leg, Any]] = []
        failed: list[tuple[Leg, Any]] = []
        for leg, out in self._run(deadline, one):
            out = self._late(leg, deadline) if out is None else out
            (answered if out.ok else failed).append((leg, out))
        degraded = [Degradation(part=leg.name, code=o.code, reason=_reason(o)) for leg, o in failed]
        rankings = [o.hits for _, o in answered if isinstance(o, Searched)]
        searched = sum(o.searched for _, o in answered if isinstance(o, Searched | NoMatch))
        if rankings:
            fused = fuse_rankings(
                rankings,
                top_k=top_k,
                method=self.method,
                rrf_k=self.rrf_k,
                higher_is_better=self.score_scale.higher_is_better,
            )
            hits = [
                Hit(rank=i, score=s, score_scale=self.score_scale.name, passage=p)
                for i, (s, p) in enumerate(fused, start=1)
            ]
            return Searched(
                index=index,
                backend=self.name,
                hits=hits,
                searched=max(searched, len(hits)),
                scale=self.score_scale,
                degraded=degraded,
            )
        if any(isinstance(o, NoMatch) for _, o in answered):
            return NoMatch(index=index, backend=self.name, searched=searched, degraded=degraded)
        if not failed:
            return IndexEmpty(index=index, backend=self.name)
        # Nothing matched anywhere that answered, and some legs failed: "empty" would hide the
        # failures, so the answer is a failure naming every leg.
        return self._all_failed(index, deadline, failed, [leg for leg, _ in answered])

    def add(
        self, index: str, passages: Sequence[Passage], *, max_bytes: int | None, deadline: Deadline
    ) -> AddOutcome:
        def one(leg: Leg, seconds: float) -> Any:
            t = leg.target
            cap = _smaller(max_bytes, t.max_bytes)
            return self._guarded(
                leg, lambda: t.guard.add(t.index, passages, max_bytes=cap, deadline_s=seconds)
            )

        results = [
            (leg, out if out is not None else self._late(leg, deadline, "add"))
            for leg, out in self._run(deadline, one)
        ]
        done = [leg.name for leg, out in results if isinstance(out, Indexed)]
        for leg, out in results:
            if isinstance(out, Indexed):
                continue
            took = (
                f"member(s) {', '.join(done)} took the batch; adding it again is safe"
                if done
                else "no member took the batch"
            )
            who = f"{leg.target.backend_name} (member '{leg.name}')"
            if isinstance(out, OverBudget):
                return out.model_copy(update={"index": index, "backend": who})
            return out.model_copy(  # type: ignore[no-any-return]
                update={"index": index, "backend": who, "reason": f"{_reason(out)}; {took}"}
            )
        took_all = [out for _, out in results if isinstance(out, Indexed)]
        added = max(out.added for out in took_all)
        used = [out.bytes_used for out in took_all]
        caps = [out.max_bytes for out in took_all]
        return Indexed(
            index=index,
            backend=self.name,
            added=added,
            known=len(passages) - added,
            bytes_used=sum(u for u in used if u is not None) if None not in used else None,
            max_bytes=sum(c for c in caps if c is not None) if None not in caps else None,
            estimate=any(out.estimate for out in took_all),
        )

    def remove(self, index: str, ids: Sequence[str], *, deadline: Deadline) -> RemoveOutcome:
        def one(leg: Leg, seconds: float) -> Any:
            t = leg.target
            return self._guarded(leg, lambda: t.guard.remove(t.index, ids, deadline_s=seconds))

        results = [
            (leg, out if out is not None else self._late(leg, deadline, "remove"))
            for leg, out in self._run(deadline, one)
        ]
        for leg, out in results:
            if not isinstance(out, Removed):
                return out.model_copy(  # type: ignore[no-any-return]
                    update={
                        "index": index,
                        "backend": f"{leg.target.backend_name} (member '{leg.name}')",
                        "reason": f"{_reason(out)}; other members may have removed the ids "
                        "(removing again is safe)",
                    }
                )
        gone: set[str] = set()
        for _, out in results:
            gone.update(out.removed_ids)  # type: ignore[union-attr]
        return Removed.of_batch(index=index, backend=self.name, ids=ids, removed_ids=list(gone))

    def status(self, index: str, *, deadline: Deadline) -> StatusOutcome:
        def one(leg: Leg, seconds: float) -> Any:
            t = leg.target
            return self._guarded(leg, lambda: t.guard.status(t.index, deadline_s=seconds))

        results = [
            (leg, out if out is not None else self._late(leg, deadline, "status"))
            for leg, out in self._run(deadline, one)
        ]
        for leg, out in results:
            if not isinstance(out, IndexStatus):
                return out.model_copy(  # type: ignore[no-any-return]
                    update={
                        "index": index,
                        "backend": f"{leg.target.backend_name} (member '{leg.name}')",
                        "reason": f"member '{leg.name}': {_reason(out)}",
                    }
                )
        stats = [(leg, out) for leg, out in results if isinstance(out, IndexStatus)]
        used = [s.bytes_used for _, s in stats]
        return IndexStatus(
            index=index,
            backend=self.name,
            exists=any(s.exists for _, s in stats),
            passages=max(s.passages for _, s in stats),
            bytes_used=sum(u for u in used if u is not None) if None not in used else None,
            details={
                "fusion": self.method,
                "passages": "the most any member holds",
                "members": {
                    leg.name: {
                        "backend": leg.target.backend_name,
                        "exists": s.exists,
                        "passages": s.passages,
                        "bytes_used": s.bytes_used,
                        "max_bytes": s.max_bytes,
                    }
                    for leg, s in stats
                },
            },
        )

    def op_drop(self, index: str, *, deadline: Deadline) -> IndexStatus:
        """Drop every member that can be dropped (a sensitive op)."""
        dropped = [leg.name for leg in self.legs if leg.target.drop()]
        return IndexStatus(
            index=index,
            backend=self.name,
            exists=len(dropped) < len(self.legs),
            passages=0,
            details={"dropped": dropped},
        )

    def close(self) -> None:
        if self.owns_legs:
            for leg in self.legs:
                leg.target.guard.close()


def _smaller(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


def fuse_targets(
    targets: Sequence[Target],
    *,
    name: str | None = None,
    method: FusionMethod = "rrf",
    rrf_k: int = DEFAULT_RRF_K,
    depth: int = LEG_DEPTH,
    owns_legs: bool = False,
) -> Target:
    """A target that searches ``targets`` as legs of one fused index.

    ``name`` defaults to ``fused-A-B...`` (or a short hash when that is too long).  Raises
    :class:`~indexplug.errors.InvalidRequest` (field ``fusion``) when ``method`` is ``"sum"``
    and the legs' scales differ.
    """
    from indexplug.targets import Target

    name = name or adhoc_name([t.index for t in targets])
    validate_index_name(name)
    try:
        backend = FusionBackend(
            [Leg(t.index, t) for t in targets],
            method=method,
            rrf_k=rrf_k,
            depth=depth,
            owns_legs=owns_legs,
        )
    except ConfigError as exc:
        raise InvalidRequest(str(exc), field="fusion") from None
    return Target(
        index=name,
        backend_name=FUSION_BACKEND,
        guard=Guard(backend, plugin=FUSION_BACKEND),
        options={"members": [t.index for t in targets], "fusion": method, "rrf_k": rrf_k},
    )


def fuse_open(
    members: Sequence[tuple[Guard, str]], *, name: str | None = None, rrf_k: int = DEFAULT_RRF_K
) -> Target:
    """:func:`fuse_targets` over indexes a caller has open, each a guard and an index name
    (what an adapter's stores hold): two or more, fused by reciprocal rank fusion.  The
    members stay the caller's (closing the fusion leaves them open)."""
    from indexplug.targets import Target

    if len(members) < 2:
        raise InvalidRequest("a fusion takes two or more indexes", field="stores")
    legs = [Target(index=index, backend_name=guard.name, guard=guard) for guard, index in members]
    return fuse_targets(legs, name=name, rrf_k=rrf_k)


def adhoc_name(names: Sequence[str]) -> str:
    """``fused-a-b`` for an ad hoc fusion of ``a`` and ``b`` (a hash when that is too long)."""
    plain = "fused-" + "-".join(names)
    if len(plain) <= MAX_NAME_LENGTH:
        return plain
    return "fused-" + hashlib.sha256("\x00".join(names).encode()).hexdigest()[:16]
