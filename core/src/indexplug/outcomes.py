"""Typed outcomes: the only things an op may answer.

Every op returns exactly one of these models, never a bare list, ``None`` or an exception.  They
form pydantic discriminated unions on ``code`` so any outcome round-trips through JSON and an
orchestrator can branch on a stable string.  The distinctions matter for honesty:

* ``NoMatch`` means the index answered and nothing matched; ``IndexEmpty`` means there was nothing
  to search.  A caller deciding "the corpus says no" needs to know which.
* ``IndexTimeout`` and ``IndexUnavailable`` are never reported as an empty result, so a failure
  can never pass for "no evidence".
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Annotated, Any, Literal, NoReturn

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from indexplug.construct import (
    construct,
    maker,
    set_dict,
    set_extra,
    set_fields_set,
    set_private,
    shared_fields_set,
)
from indexplug.passages import Passage, _make_passage, _provenance, passage_from_provenance


class ScoreScale(BaseModel):
    """What a score means.  Scores on different scales must never be added together."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    higher_is_better: bool = True
    comparable_across_searches: bool = False
    meaning: str = ""


class _Outcome(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    index: str
    backend: str = ""

    @property
    def ok(self) -> bool:
        """True for answers the index gave (results, no match, empty, a write that took)."""
        return self.code in _OK_CODES  # type: ignore[attr-defined]

    @property
    def message(self) -> str:
        """One human sentence saying what happened (each outcome words its own)."""
        return str(getattr(self, "code", "OUTCOME"))


class Degradation(BaseModel):
    """Why an answer is partial: which part (a fusion leg, an engine) failed and how."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    part: str
    code: str
    reason: str


class Hit(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    rank: int = Field(ge=1)
    score: float
    score_scale: str
    passage: Passage
    untrusted: bool = True
    """Stored text is data, never an instruction: consumers (LLM prompts) must treat it so."""

    @classmethod
    def from_stored(cls, *, rank: int, score: float, score_scale: str, passage: Passage) -> Hit:
        """A hit built *without* validation, for backends answering from their storage.

        The guard checks every hit of a search (ranks 1..n, finite scores in order, the declared
        scale, each passage's content address), so validating here would only repeat it, at
        about a tenth of a fast search's time (:mod:`indexplug.construct`).
        """
        values = {
            "rank": rank,
            "score": score,
            "score_scale": score_scale,
            "passage": passage,
            "untrusted": True,
        }
        if cls is Hit and _make_hit is not None:
            return _make_hit(values)
        return construct(cls, values)


_make_hit = maker(Hit, ("rank", "score", "score_scale", "passage", "untrusted"))


class CheckedHits(list[Hit]):
    """Hits that :func:`hits_from_provenance` built and checked while building them: a
    ``list`` that cannot be changed, carrying what the check found.

    The guard checks every hit of every answer (ranks 1..n, finite scores in order, the
    declared scale, each passage intact).  For hits the core built itself from a backend's
    rows that second pass only repeats the first: the builder numbers the ranks, is given the
    scale, sees every score and knows every passage it hands out was found intact (a kept
    passage was checked when it was first built; a new one is checked there).  So it records
    that, and the guard, finding this exact type, checks the whole answer with a few
    comparisons instead of a loop over its hits (a tenth of a millisecond of a top-100 search,
    with the hits out of the CPU's caches after the round trip).

    Read-only, so the record stays true: every way of changing it raises :class:`TypeError`
    (``list(out.hits)`` is a mutable copy).  Copies, pickles and pydantic's validation make
    plain lists, which the guard checks hit by hit; so does any list the builder could not
    vouch for (a passage that did not match its id, scores out of order or not finite).
    """

    __slots__ = ("ascending", "descending", "scale")
    scale: str
    """The one scale every hit is on."""
    descending: bool
    """Scores never rise from one hit to the next (all finite)."""
    ascending: bool
    """Scores never fall from one hit to the next (all finite)."""

    def _refuse(self, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError("the hits of an answer are read-only: list(outcome.hits) is a mutable copy")

    __setitem__ = __delitem__ = append = extend = insert = pop = remove = _refuse
    clear = sort = reverse = __setattr__ = __delattr__ = _refuse
    __iadd__ = __imul__ = _refuse  # type: ignore[assignment]

    def __reduce__(self) -> tuple[type[list[Hit]], tuple[list[Hit]]]:
        # what it records about its hits holds in this process only: elsewhere it is a list
        # (pickle, copy.copy and copy.deepcopy all go through here)
        return (list, (list(self),))


_INF = float("inf")
_set_scale, _set_descending, _set_ascending = (
    CheckedHits.__dict__[name].__set__ for name in ("scale", "descending", "ascending")
)


def checked_hits(
    hits: Iterable[Hit], *, scale: str, descending: bool, ascending: bool
) -> CheckedHits:
    """``hits`` as :class:`CheckedHits`, recording what whoever checked them found: for the
    core's own use (the builder below and the guard), never to vouch for unchecked hits."""
    out = CheckedHits(hits)
    _set_scale(out, scale)
    _set_descending(out, descending)
    _set_ascending(out, ascending)
    return out


REBUILT_PASSAGES = 8192
"""How many passages :func:`hits_from_provenance` keeps to hand out again (then it starts
over): enough for the passages a workload keeps finding (SciFact's 5,183 abstracts fit)."""
REBUILT_CHARS = 16_000_000
"""And at most this many characters of their texts and provenance (then it starts over), so
that long passages (up to a million characters each) cannot make the kept ones a memory hog:
16 to 64 MB at most, with the objects, however long the passages."""

_rebuilt: dict[str, tuple[str, str, Passage]] = {}
"""Passage id -> (the provenance string it was rebuilt from, its text, the passage), for every
backend in the process: a passage is handed out again only for exactly the same id, text and
provenance, so whichever index or backend stored it, it is the passage that would be built.
Only passages found intact are kept.  The text is held beside the passage so that comparing a
row's text with it does not go through the passage's fields."""
_rebuilt_chars = [0]
"""Characters of text and provenance held by :data:`_rebuilt` (one cell, updated in place)."""


def hits_from_provenance(
    rows: Iterable[tuple[str, float, str, str]], score_scale: str
) -> list[Hit]:
    """Hits ranked 1, 2, ... from ``(id, score, text, provenance)`` rows, best first, where
    ``provenance`` is :func:`~indexplug.passages.provenance_json` as stored: what a backend
    keeping passages as an id, a text and one provenance string (Elasticsearch, Chroma) does
    with every hit of every search.

    The same as ``Hit.from_stored(passage=passage_from_provenance(...))`` per row, in one
    loop, with two differences that matter for speed.  The same passages come back search
    after search, so a passage rebuilt once is kept (:data:`REBUILT_PASSAGES`,
    :data:`REBUILT_CHARS`) and handed out again when a row has exactly its id, text and
    provenance; a :class:`~indexplug.passages.Passage` is frozen and its metadata read-only,
    so sharing one object between results is safe.  And the hits are checked here, as they
    are built, rather than once more by the guard: a new passage's content address is
    recomputed before it is kept, each score is compared with the one before, and the answer
    is a :class:`CheckedHits` saying what was found, which the guard takes instead of looping
    over the hits again.  A row whose text does not match its id (a record altered behind the
    backend's back) is never kept, and the hits come back as a plain list, which the guard
    checks hit by hit and refuses.  A row whose provenance differs from the kept passage's
    gets a passage of its own, built from what it holds.

    Rebuilding and checking a hundred passages were most of the framework's 1.1 ms on a
    top-100 Elasticsearch search the raw client answers in about 5 ms; sharing them (and
    elastic reading its hits straight from the answer) took the pair from 1.183x to about
    1.13x; checking them here took a same-evening pair from 1.156x to 1.129x, about 0.6 ms
    over the raw client left (docs/backends/elastic.md).  Each new object
    gets exactly what :func:`indexplug.construct.maker` gives it; any model that stopped
    being plain takes the two-step way (plain lists, checked by the guard).
    """
    if _make_hit is None or _make_passage is None:  # pragma: no cover - models not plain
        return [
            Hit.from_stored(
                rank=n,
                score=score,
                score_scale=score_scale,
                passage=passage_from_provenance(pid, text, prov),
            )
            for n, (pid, score, text, prov) in enumerate(rows, start=1)
        ]
    new_passage, new_hit, parse = Passage.__new__, Hit.__new__, _provenance
    kept, held = _rebuilt, _rebuilt_chars
    passage_fields, hit_fields = shared_fields_set(Passage), shared_fields_set(Hit)
    put_dict, put_fields, put_extra, put_private = set_dict, set_fields_set, set_extra, set_private
    hits: list[Hit] = []
    intact = finite = descending = ascending = True
    last: float | None = None
    for rank, (pid, score, text, prov) in enumerate(rows, start=1):
        if not -_INF < score < _INF:  # false for NaN too
            finite = False
        elif last is not None:
            if score > last:
                descending = False
            elif score < last:
                ascending = False
        last = score
        known = kept.get(pid)
        if known is None or known[0] != prov or known[1] != text:
            source, start, end, doc_sha, metadata = parse(prov)
            p = new_passage(Passage)
            put_dict(
                p,
                {
                    "id": pid,
                    "text": text,
                    "source": source,
                    "document_sha256": doc_sha,
                    "start": start,
                    "end": end,
                    "metadata": metadata,
                },
            )
            put_fields(p, passage_fields)
            put_extra(p, None)
            put_private(p, None)
            if p.expected_id() != pid:
                # altered behind the backend's back: never kept, and the guard, finding a
                # plain list, checks every hit and refuses this one
                intact = False
            else:
                size = len(text) + len(prov)
                if len(kept) >= REBUILT_PASSAGES or held[0] + size > REBUILT_CHARS:
                    kept.clear()
                    held[0] = 0
                kept[pid] = (prov, text, p)
                held[0] += size
        else:
            p = known[2]
        h = new_hit(Hit)
        put_dict(
            h,
            {
                "rank": rank,
                "score": score,
                "score_scale": score_scale,
                "passage": p,
                "untrusted": True,
            },
        )
        put_fields(h, hit_fields)
        put_extra(h, None)
        put_private(h, None)
        hits.append(h)
    if not intact:
        return hits
    return checked_hits(
        hits,
        scale=score_scale,
        descending=finite and descending,
        ascending=finite and ascending,
    )


class Searched(_Outcome):
    code: Literal["SEARCHED"] = "SEARCHED"
    hits: list[Hit]
    searched: int = Field(ge=0, description="how many passages the index holds")
    scale: ScoreScale
    deadline_s: float | None = None
    elapsed_ms: float | None = None
    degraded: list[Degradation] = Field(default_factory=list)

    @classmethod
    def from_stored(
        cls,
        *,
        index: str,
        backend: str,
        hits: list[Hit],
        searched: int,
        scale: ScoreScale,
    ) -> Searched:
        """An answer built *without* validation, for backends answering from their storage.

        Validating a ``Searched`` walks its hits once more, to find each one a :class:`Hit`:
        a search's last step, with the validator's code and data out of the CPU's caches
        after the round trip, and redundant, because the guard checks every answer it passes
        on (each hit a ``Hit``, ranked 1..n with finite scores in order on the declared
        ``scale``, each passage intact, ``searched`` an integer no smaller than the hits) and
        refuses one that is not.  Use :class:`Searched` itself anywhere the guard is not in
        between.
        """
        return construct(
            cls,
            {
                "index": index,
                "backend": backend,
                "code": "SEARCHED",
                "hits": hits,
                "searched": searched,
                "scale": scale,
                "deadline_s": None,
                "elapsed_ms": None,
                "degraded": [],
            },
        )

    @property
    def message(self) -> str:
        note = f" (degraded: {len(self.degraded)} part(s) failed)" if self.degraded else ""
        return f"{len(self.hits)} hit(s) from {self.searched} passage(s) in '{self.index}'{note}."


class NoMatch(_Outcome):
    code: Literal["NO_MATCH"] = "NO_MATCH"
    searched: int = Field(ge=0)
    deadline_s: float | None = None
    elapsed_ms: float | None = None
    degraded: list[Degradation] = Field(default_factory=list)

    @property
    def message(self) -> str:
        return f"Nothing matched in '{self.index}' ({self.searched} passage(s) searched)."


class IndexEmpty(_Outcome):
    code: Literal["INDEX_EMPTY"] = "INDEX_EMPTY"

    @property
    def message(self) -> str:
        return f"Index '{self.index}' holds nothing; nothing was searched."


class IndexFailed(_Outcome):
    code: Literal["INDEX_FAILED"] = "INDEX_FAILED"
    reason: str
    error_type: str | None = None

    @property
    def message(self) -> str:
        who = f" ({self.backend})" if self.backend else ""
        return f"Index '{self.index}'{who} failed: {self.reason}"


class IndexTimeout(_Outcome):
    code: Literal["INDEX_TIMEOUT"] = "INDEX_TIMEOUT"
    deadline_s: float
    reason: str = "the operation ran past its deadline"

    @property
    def message(self) -> str:
        return f"Index '{self.index}' timed out after {self.deadline_s:g}s: {self.reason}"


class IndexUnavailable(_Outcome):
    code: Literal["INDEX_UNAVAILABLE"] = "INDEX_UNAVAILABLE"
    reason: str

    @property
    def message(self) -> str:
        who = self.backend or "the backend"
        return f"Index '{self.index}' is unavailable: {who} is not ready ({self.reason})."


class Indexed(_Outcome):
    code: Literal["INDEXED"] = "INDEXED"
    added: int = Field(ge=0)
    known: int = Field(ge=0)
    added_ids: list[str] = Field(default_factory=list)
    known_ids: list[str] = Field(default_factory=list)
    bytes_used: int | None = None
    max_bytes: int | None = None
    estimate: bool = False

    @property
    def message(self) -> str:
        return f"Added {self.added} passage(s) to '{self.index}'; {self.known} already known."

    @classmethod
    def of_batch(
        cls,
        *,
        index: str,
        backend: str,
        ids: Sequence[str],
        added_ids: Sequence[str],
        bytes_used: int | None = None,
        max_bytes: int | None = None,
        estimate: bool = False,
    ) -> Indexed:
        """The answer to adding the passages ``ids``, of which ``added_ids`` were new.

        The guard hands a backend distinct passages only, so everything in ``ids`` that was not
        added was already known; one definition keeps every backend's counts and id lists
        alike (``added + known`` is the batch, ``known_ids`` in the batch's order).
        """
        fresh = set(added_ids)
        return cls(
            index=index,
            backend=backend,
            added=len(fresh),
            known=len(ids) - len(fresh),
            added_ids=list(added_ids),
            known_ids=[i for i in ids if i not in fresh],
            bytes_used=bytes_used,
            max_bytes=max_bytes,
            estimate=estimate,
        )


class OverBudget(_Outcome):
    code: Literal["OVER_BUDGET"] = "OVER_BUDGET"
    max_bytes: int
    needed_bytes: int
    check: Literal["projected", "measured", "unreadable"]
    estimate: bool = False

    @property
    def message(self) -> str:
        return (
            f"Refused: '{self.index}' would need {self.needed_bytes} bytes, over its budget of "
            f"{self.max_bytes} ({self.check} check); nothing was written."
        )


class Removed(_Outcome):
    code: Literal["REMOVED"] = "REMOVED"
    removed: int = Field(ge=0)
    removed_ids: list[str] = Field(default_factory=list)
    missing_ids: list[str] = Field(default_factory=list)

    @property
    def message(self) -> str:
        return (
            f"Removed {self.removed} passage(s) from '{self.index}'; "
            f"{len(self.missing_ids)} id(s) were not there."
        )

    @classmethod
    def of_batch(
        cls, *, index: str, backend: str, ids: Sequence[str], removed_ids: Sequence[str]
    ) -> Removed:
        """The answer to removing ``ids``, of which ``removed_ids`` were there (the guard hands
        a backend distinct ids, so the rest were missing; both lists in the batch's order)."""
        gone = set(removed_ids)
        return cls(
            index=index,
            backend=backend,
            removed=len(gone),
            removed_ids=[i for i in ids if i in gone],
            missing_ids=[i for i in ids if i not in gone],
        )


class IndexStatus(_Outcome):
    code: Literal["STATUS"] = "STATUS"
    exists: bool
    passages: int = Field(ge=0)
    bytes_used: int | None = None
    max_bytes: int | None = None
    estimate: bool = False
    embedder: str | None = None
    details: dict[str, Any] = Field(default_factory=dict)

    @property
    def message(self) -> str:
        if not self.exists:
            return f"Index '{self.index}' does not exist yet."
        size = f", {self.bytes_used} bytes" if self.bytes_used is not None else ""
        cap = f" of {self.max_bytes}" if self.max_bytes is not None else ""
        return f"Index '{self.index}' holds {self.passages} passage(s){size}{cap}."


class BadRequest(_Outcome):
    """A malformed request, refused before reaching any backend (used by ``invoke``)."""

    code: Literal["BAD_REQUEST"] = "BAD_REQUEST"
    field: str | None = None
    reason: str

    @property
    def message(self) -> str:
        where = f" (field '{self.field}')" if self.field else ""
        return f"Bad request{where}: {self.reason}"


class NotAllowed(_Outcome):
    code: Literal["NOT_ALLOWED"] = "NOT_ALLOWED"
    op: str
    reason: str = "this op is not allowed by the configuration"

    @property
    def message(self) -> str:
        return f"'{self.op}' is not allowed here: {self.reason}"


_OK_CODES = frozenset({"SEARCHED", "NO_MATCH", "INDEX_EMPTY", "INDEXED", "REMOVED", "STATUS"})

_Failures = IndexFailed | IndexTimeout | IndexUnavailable

SearchOutcome = Annotated[
    Searched | NoMatch | IndexEmpty | IndexFailed | IndexTimeout | IndexUnavailable,
    Field(discriminator="code"),
]
AddOutcome = Annotated[
    Indexed | OverBudget | IndexFailed | IndexTimeout | IndexUnavailable,
    Field(discriminator="code"),
]
RemoveOutcome = Annotated[
    Removed | IndexFailed | IndexTimeout | IndexUnavailable, Field(discriminator="code")
]
StatusOutcome = Annotated[
    IndexStatus | IndexFailed | IndexTimeout | IndexUnavailable, Field(discriminator="code")
]
AnyOutcome = Annotated[
    Searched
    | NoMatch
    | IndexEmpty
    | IndexFailed
    | IndexTimeout
    | IndexUnavailable
    | Indexed
    | OverBudget
    | Removed
    | IndexStatus
    | BadRequest
    | NotAllowed,
    Field(discriminator="code"),
]

ALLOWED: dict[str, tuple[type[_Outcome], ...]] = {
    "search": (Searched, NoMatch, IndexEmpty, IndexFailed, IndexTimeout, IndexUnavailable),
    "add": (Indexed, OverBudget, IndexFailed, IndexTimeout, IndexUnavailable),
    "remove": (Removed, IndexFailed, IndexTimeout, IndexUnavailable),
    "status": (IndexStatus, IndexFailed, IndexTimeout, IndexUnavailable),
}
"""Which outcomes each op may answer; the guard turns anything else into ``IndexFailed``."""

_any_adapter: TypeAdapter[Any] = TypeAdapter(AnyOutcome)


def outcome_from_json(data: str | bytes) -> Any:
    """Parse any outcome back from its JSON form."""
    return _any_adapter.validate_json(data)


def outcome_from_dict(data: dict[str, Any]) -> Any:
    return _any_adapter.validate_python(data)


EXIT_CODES: dict[str, int] = {
    "SEARCHED": 0,
    "INDEXED": 0,
    "REMOVED": 0,
    "STATUS": 0,
    "NO_MATCH": 1,
    "INDEX_EMPTY": 2,
    "INDEX_FAILED": 3,
    "INDEX_TIMEOUT": 4,
    "INDEX_UNAVAILABLE": 5,
    "OVER_BUDGET": 6,
    "BAD_REQUEST": 64,
    "NOT_ALLOWED": 77,
}
"""CLI exit status per outcome code: a script can tell a result, no match and each failure."""
