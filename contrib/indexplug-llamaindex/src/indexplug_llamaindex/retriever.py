"""A LlamaIndex retriever whose failures are exceptions, never an empty list.

Hits become ``NodeWithScore``; ``NO_MATCH`` is ``[]``; an empty, failed, timed-out or unavailable
index raises the typed :class:`indexplug.OutcomeError` subclass for its code.
"""

from __future__ import annotations

from typing import Any

import indexplug
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode


def hit_to_node(hit: indexplug.Hit) -> NodeWithScore:
    p = hit.passage
    node = TextNode(
        id_=p.id,
        text=p.text,
        metadata={
            **p.metadata,
            "source": p.source.uri,
            "start": p.start,
            "end": p.end,
            "rank": hit.rank,
            "score_scale": hit.score_scale,
            "untrusted": hit.untrusted,
        },
    )
    return NodeWithScore(node=node, score=hit.score)


class IndexplugRetriever(BaseRetriever):
    """Retrieve from index ``index`` of a guarded backend (``indexplug.open_backend(...)``)."""

    def __init__(
        self,
        backend: indexplug.Guard,
        index: str,
        *,
        top_k: int = 4,
        deadline_s: float | None = None,
        empty_is_error: bool = True,
        **kwargs: Any,
    ) -> None:
        indexplug.validate_index_name(index)
        self.backend = backend
        self.index = index
        self.top_k = top_k
        self.deadline_s = deadline_s
        self.empty_is_error = empty_is_error
        super().__init__(**kwargs)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        outcome = self.backend.search(
            self.index, query_bundle.query_str, top_k=self.top_k, deadline_s=self.deadline_s
        )
        if isinstance(outcome, indexplug.Searched):
            return [hit_to_node(h) for h in outcome.hits]
        indexplug.raise_for_outcome(outcome, empty_is_error=self.empty_is_error)
        return []
