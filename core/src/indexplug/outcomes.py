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
from functools import cache
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from indexplug.construct import construct
from indexplug.passages import Passage, passage_from_provenance


class ScoreScale(BaseModel):
    """What a score means.  Scores on different scales must never be added together."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    name: str = Field(min_length=1)
    higher_is_better: bool = True
    comparable_across_searches: bool = False
    meaning: str = ""


class _Outcome(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

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

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    part: str
    code: str
    reason: str


class Hit(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    rank: int = Field(ge=1)
    score: float
    score_scale: str
    passage: Passage
    untrusted: bool = True
    """Stored text is data, never an instruction: consumers (LLM prompts) must treat it so."""
    vector: tuple[float, ...] | None = Field(default=None, exclude=True)
    """The passage's stored vector, only when a vector search asked for it
    (``Guard.search_vector(..., with_vectors=True)``, for maximal marginal relevance); never
    in the JSON form (hundreds of numbers per hit are of no use to a reader or a prompt)."""

    @classmethod
    def from_stored(
        cls,
        *,
        rank: int,
        score: float,
        score_scale: str,
        passage: Passage,
        vector: tuple[float, ...] | None = None,
    ) -> Hit:
        """A hit built *without* validation, for backends answering from their storage.

        The guard checks every hit of every search (its type, ranks 1..n, finite scores in
        order, the declared scale, each passage's id and digest) and hands the caller copies
        it builds itself, so validating here would only repeat it.
        """
        return construct(
            cls,
            {
                "rank": rank,
                "score": score,
                "score_scale": score_scale,
                "passage": passage,
                "untrusted": True,
                "vector": vector,
            },
        )


def hits_from_provenance(
    rows: Iterable[tuple[str, float, str, str]], score_scale: str
) -> list[Hit]:
    """Hits ranked 1, 2, ... from ``(id, score, text, provenance)`` rows, best first, where
    ``provenance`` is :func:`~indexplug.passages.provenance_json` as stored: for backends
    keeping passages as an id, a text and one provenance string (Elasticsearch, Chroma).

    Exactly ``Hit.from_stored(passage=passage_from_provenance(...))`` per row: nothing is
    checked here, and nothing is kept between searches; the guard checks every hit.
    """
    return [
        Hit.from_stored(
            rank=rank,
            score=score,
            score_scale=score_scale,
            passage=passage_from_provenance(pid, text, prov),
        )
        for rank, (pid, score, text, prov) in enumerate(rows, start=1)
    ]


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

        Validating a ``Searched`` walks its hits once more, which the guard does anyway: it
        checks every answer it passes on (each hit a ``Hit``, ranked 1..n with finite scores
        in order on the declared ``scale``, each passage's id and digest, ``searched`` an
        integer no smaller than the hits) and refuses one that is not.  Use :class:`Searched`
        itself anywhere the guard is not in between.
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
    committed: int | None = Field(
        default=None,
        ge=0,
        description="For a write answered in batches: how many passages earlier batches stored "
        "(kept; repeating the same call completes the rest without duplicates).",
    )

    @property
    def message(self) -> str:
        who = f" ({self.backend})" if self.backend else ""
        return f"Index '{self.index}'{who} failed: {self.reason}"


class IndexTimeout(_Outcome):
    code: Literal["INDEX_TIMEOUT"] = "INDEX_TIMEOUT"
    deadline_s: float
    reason: str = "the operation ran past its deadline"
    committed: int | None = Field(
        default=None,
        ge=0,
        description="For a write answered in batches: how many passages earlier batches stored "
        "(kept; repeating the same call completes the rest without duplicates).",
    )

    @property
    def message(self) -> str:
        return f"Index '{self.index}' timed out after {self.deadline_s:g}s: {self.reason}"


class IndexUnavailable(_Outcome):
    code: Literal["INDEX_UNAVAILABLE"] = "INDEX_UNAVAILABLE"
    reason: str
    committed: int | None = Field(
        default=None,
        ge=0,
        description="For a write answered in batches: how many passages earlier batches stored "
        "(kept; repeating the same call completes the rest without duplicates).",
    )

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
    replaced: int = Field(
        default=0,
        ge=0,
        description="Earlier passages of the batch's keys that the batch replaced (removed).",
    )

    @property
    def message(self) -> str:
        gone = f"; {self.replaced} replaced" if self.replaced else ""
        return f"Added {self.added} passage(s) to '{self.index}'; {self.known} already known{gone}."

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
    committed: int | None = Field(
        default=None,
        ge=0,
        description="For a write answered in batches: how many passages earlier batches stored "
        "before this batch was refused (kept; the refused batch wrote nothing).",
    )

    @property
    def message(self) -> str:
        kept = (
            f"this batch wrote nothing; {self.committed} passage(s) of earlier batches are stored"
            if self.committed
            else "nothing was written"
        )
        return (
            f"Refused: '{self.index}' would need {self.needed_bytes} bytes, over its budget of "
            f"{self.max_bytes} ({self.check} check); {kept}."
        )


class Removed(_Outcome):
    code: Literal["REMOVED"] = "REMOVED"
    removed: int = Field(ge=0)
    removed_ids: list[str] = Field(default_factory=list)
    missing_ids: list[str] = Field(default_factory=list)
    missing_keys: list[str] = Field(
        default_factory=list, description="Keys asked for that no passage had."
    )

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


class TokenMatch(BaseModel):
    """One query token's best match in a passage: its whole contribution to the score."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    query_token: int = Field(ge=0, description="position of the token in the query")
    query_text: str | None = Field(
        default=None, description="the token as text, when the embedder can say"
    )
    passage_token: int = Field(
        ge=-1, description="position of the matched passage token (-1: the passage has none)"
    )
    passage_text: str | None = None
    similarity: float = Field(description="cosine of the two token vectors: the contribution")
    share: float = Field(description="contribution / score (of a positive score; else 0)")


class Explained(_Outcome):
    """Why one stored passage scores what it does for one query (the ``explain`` op): which
    passage token each query token matched and how much that added to the score."""

    code: Literal["EXPLAINED"] = "EXPLAINED"
    query: str
    passage: Passage
    score: float = Field(description="the sum of the matches' similarities")
    scale: ScoreScale
    matches: list[TokenMatch]
    degraded: list[Degradation] = Field(default_factory=list)

    @property
    def message(self) -> str:
        return (
            f"Passage {self.passage.id[:12]}... scores {self.score:.4f} in '{self.index}' "
            f"from {len(self.matches)} query token(s)."
        )


class Neighbours(_Outcome):
    """The stored passages next to one passage of the same source (the ``neighbours`` op), in
    document order."""

    code: Literal["NEIGHBOURS"] = "NEIGHBOURS"
    passage_id: str
    before: list[Passage] = Field(default_factory=list)
    after: list[Passage] = Field(default_factory=list)

    @property
    def message(self) -> str:
        return (
            f"{len(self.before)} passage(s) before and {len(self.after)} after "
            f"{self.passage_id[:12]}... in '{self.index}'."
        )


class Got(_Outcome):
    """Passages read back by id or by caller key (the ``get`` op), in the order asked; what
    was not there is listed, never silently left out."""

    code: Literal["GOT"] = "GOT"
    passages: list[Passage] = Field(default_factory=list)
    missing_ids: list[str] = Field(default_factory=list)
    missing_keys: list[str] = Field(default_factory=list)

    @property
    def message(self) -> str:
        gone = len(self.missing_ids) + len(self.missing_keys)
        return f"Read {len(self.passages)} passage(s) from '{self.index}'; {gone} not there."


class Scanned(_Outcome):
    """One page of every passage of an index in id order (the ``scan`` op).  ``next_after``
    is the cursor of the next page (the last id of this one), ``None`` after the last page."""

    code: Literal["SCANNED"] = "SCANNED"
    passages: list[Passage] = Field(default_factory=list)
    next_after: str | None = None

    @property
    def message(self) -> str:
        more = "; more follow" if self.next_after else ""
        return f"Read {len(self.passages)} passage(s) of '{self.index}'{more}."


class IndexInfo(BaseModel):
    """One named index a backend holds."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    name: str
    passages: int = Field(ge=0)


class IndexList(_Outcome):
    """The named indexes a backend holds, by name (the ``indexes`` op; ``index`` is empty:
    the answer is about the whole backend)."""

    code: Literal["INDEXES"] = "INDEXES"
    indexes: list[IndexInfo] = Field(default_factory=list)

    @property
    def message(self) -> str:
        who = self.backend or "the backend"
        return f"{who} holds {len(self.indexes)} index(es)."


_OK_CODES = frozenset(
    {
        "SEARCHED",
        "NO_MATCH",
        "INDEX_EMPTY",
        "INDEXED",
        "REMOVED",
        "STATUS",
        "EXPLAINED",
        "NEIGHBOURS",
        "GOT",
        "SCANNED",
        "INDEXES",
    }
)

_Failures = IndexFailed | IndexTimeout | IndexUnavailable

SearchOutcome = Annotated[
    Searched | NoMatch | IndexEmpty | IndexFailed | IndexTimeout | IndexUnavailable,
    Field(discriminator="code"),
]
AddOutcome = Annotated[
    Indexed | OverBudget | IndexFailed | IndexTimeout | IndexUnavailable,
    Field(discriminator="code"),
]
VectorSearchOutcome = Annotated[
    Searched | NoMatch | IndexEmpty | BadRequest | IndexFailed | IndexTimeout | IndexUnavailable,
    Field(discriminator="code"),
]
"""What a search by vector answers: a search's outcomes, or ``BAD_REQUEST`` for a vector of
another embedder than the one the index recorded."""
VectorAddOutcome = Annotated[
    Indexed | OverBudget | BadRequest | IndexFailed | IndexTimeout | IndexUnavailable,
    Field(discriminator="code"),
]
"""What an add with vectors answers: an add's outcomes, or ``BAD_REQUEST`` for vectors of
another embedder than the one the index recorded."""
RemoveOutcome = Annotated[
    Removed | IndexFailed | IndexTimeout | IndexUnavailable, Field(discriminator="code")
]
StatusOutcome = Annotated[
    IndexStatus | IndexFailed | IndexTimeout | IndexUnavailable, Field(discriminator="code")
]
GetOutcome = Annotated[
    Got | IndexFailed | IndexTimeout | IndexUnavailable, Field(discriminator="code")
]
ScanOutcome = Annotated[
    Scanned | IndexFailed | IndexTimeout | IndexUnavailable, Field(discriminator="code")
]
IndexesOutcome = Annotated[
    IndexList | IndexFailed | IndexTimeout | IndexUnavailable, Field(discriminator="code")
]
DropOutcome = StatusOutcome
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
    | NotAllowed
    | Explained
    | Neighbours
    | Got
    | Scanned
    | IndexList,
    Field(discriminator="code"),
]

ALLOWED: dict[str, tuple[type[_Outcome], ...]] = {
    "search": (Searched, NoMatch, IndexEmpty, IndexFailed, IndexTimeout, IndexUnavailable),
    "add": (Indexed, OverBudget, IndexFailed, IndexTimeout, IndexUnavailable),
    "remove": (Removed, IndexFailed, IndexTimeout, IndexUnavailable),
    "status": (IndexStatus, IndexFailed, IndexTimeout, IndexUnavailable),
    # the data interface: optional, each claimed in Capabilities (indexplug.protocols)
    "get": (Got, IndexFailed, IndexTimeout, IndexUnavailable),
    "scan": (Scanned, IndexFailed, IndexTimeout, IndexUnavailable),
    "indexes": (IndexList, IndexFailed, IndexTimeout, IndexUnavailable),
    # extension ops (optional protocols in indexplug.protocols; Guard.call_extra)
    "drop": (IndexStatus, IndexFailed, IndexTimeout, IndexUnavailable),
    "optimize": (IndexStatus, IndexFailed, IndexTimeout, IndexUnavailable),
    "rebuild": (IndexStatus, OverBudget, IndexFailed, IndexTimeout, IndexUnavailable),
    "migrate": (IndexStatus, IndexFailed, IndexTimeout, IndexUnavailable),
    "rerank": (Searched, NoMatch, BadRequest, IndexFailed, IndexTimeout, IndexUnavailable),
    "explain": (Explained, IndexEmpty, BadRequest, IndexFailed, IndexTimeout, IndexUnavailable),
    "neighbours": (Neighbours, BadRequest, IndexFailed, IndexTimeout, IndexUnavailable),
    # the vector interface: claimed as Capabilities.vectors (indexplug.protocols.VectorStore);
    # BAD_REQUEST: vectors of another embedder than the one the index recorded
    "add_vectors": (Indexed, OverBudget, BadRequest, IndexFailed, IndexTimeout, IndexUnavailable),
    "search_vector": (
        Searched,
        NoMatch,
        IndexEmpty,
        BadRequest,
        IndexFailed,
        IndexTimeout,
        IndexUnavailable,
    ),
    "stats": (IndexStatus, IndexFailed, IndexTimeout, IndexUnavailable),
}
"""Which outcomes each op may answer; the guard turns anything else into ``IndexFailed``.
The first four are every backend's; ``get``, ``scan`` and ``indexes`` are the data interface a
backend claims in its capabilities (``drop`` too, below); the rest are extension ops a backend
may offer (:data:`indexplug.protocols.EXTENSION_OPS`)."""


@cache
def _any_adapter() -> TypeAdapter[Any]:
    """Every outcome's validator, built on first use (building all of them is most of what
    importing this module would cost, and most commands parse no outcome back)."""
    return TypeAdapter(AnyOutcome)


def outcome_from_json(data: str | bytes) -> Any:
    """Parse any outcome back from its JSON form."""
    return _any_adapter().validate_json(data)


def outcome_from_dict(data: dict[str, Any]) -> Any:
    return _any_adapter().validate_python(data)


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
    "EXPLAINED": 0,
    "NEIGHBOURS": 0,
    "GOT": 0,
    "SCANNED": 0,
    "INDEXES": 0,
    "AUDIT": 0,
    "AUDIT_BROKEN": 3,
    "HISTORY": 0,
    "CLEARED": 0,
    "LOGGED": 0,
    "STATS": 0,
    "SIMILARITY": 0,
    "NOT_SUPPORTED": 69,
    "RATE_LIMITED": 75,
    "BAD_REQUEST": 64,
    "NOT_ALLOWED": 77,
}
"""CLI exit status per outcome code: a script can tell a result, no match and each failure."""
