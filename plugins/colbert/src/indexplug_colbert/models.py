"""What the extra ops answer beyond the core outcomes: ``explain``'s per-token account.

``rerank`` answers a core :class:`~indexplug.outcomes.Searched` (or ``NoMatch``), so anything
that consumes search results consumes it unchanged.  ``explain`` has no core equivalent: it says,
for one passage, which passage token each query token matched and how much that added to the
MaxSim score, which is the reason late interaction is inspectable at all.
"""

from __future__ import annotations

from typing import Literal

from indexplug.outcomes import Degradation, ScoreScale
from indexplug.passages import Passage
from pydantic import BaseModel, ConfigDict, Field


class TokenMatch(BaseModel):
    """One query token's best match in the passage: its whole contribution to the score."""

    model_config = ConfigDict(frozen=True, extra="forbid")

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


class Explanation(BaseModel):
    """Why one passage scores what it does for one query (answer of ``op_explain``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    code: Literal["EXPLAINED"] = "EXPLAINED"
    index: str
    backend: str = ""
    query: str
    passage: Passage
    score: float = Field(description="MaxSim: the sum of the matches' similarities")
    scale: ScoreScale
    matches: list[TokenMatch]
    degraded: list[Degradation] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        return True

    @property
    def message(self) -> str:
        return (
            f"Passage {self.passage.id[:12]}... scores {self.score:.4f} in '{self.index}' "
            f"from {len(self.matches)} query token(s)."
        )
