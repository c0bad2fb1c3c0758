"""A LangChain retriever whose failures are exceptions, never an empty list.

LangChain retrievers return ``list[Document]``: an empty list would hide an index that is down,
timed out or empty.  This retriever keeps indexplug's honesty in that shape: hits become
documents, ``NO_MATCH`` (the index answered, nothing matched) is ``[]``, and anything else raises
the typed :class:`indexplug.OutcomeError` subclass for its code.
"""

from __future__ import annotations

from typing import Any

import indexplug
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field


def hit_to_document(hit: indexplug.Hit) -> Document:
    p = hit.passage
    return Document(
        page_content=p.text,
        id=p.id,
        metadata={
            **p.metadata,
            "indexplug_id": p.id,
            "rank": hit.rank,
            "score": hit.score,
            "score_scale": hit.score_scale,
            "source": p.source.uri,
            "start": p.start,
            "end": p.end,
            "untrusted": hit.untrusted,
        },
    )


class IndexplugRetriever(BaseRetriever):
    """Retrieve from index ``index`` of a guarded backend (``indexplug.open_backend(...)``)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    backend: Any = Field(
        description="An indexplug.Guard, e.g. indexplug.open_backend('sqlite-fts5')."
    )
    index: str
    top_k: int = 4
    deadline_s: float | None = None
    empty_is_error: bool = True

    @classmethod
    def from_backend(
        cls, backend_name: str, index: str, options: dict[str, Any] | None = None, **kw: Any
    ) -> IndexplugRetriever:
        return cls(backend=indexplug.open_backend(backend_name, options), index=index, **kw)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        outcome = self.backend.search(
            self.index, query, top_k=self.top_k, deadline_s=self.deadline_s
        )
        if isinstance(outcome, indexplug.Searched):
            return [hit_to_document(h) for h in outcome.hits]
        indexplug.raise_for_outcome(outcome, empty_is_error=self.empty_is_error)
        return []
