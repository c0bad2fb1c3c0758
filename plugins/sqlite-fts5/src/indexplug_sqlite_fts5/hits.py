"""Hits from stored rows, without paying pydantic's per-object overhead.

Rows become passages and hits through :func:`indexplug.construct.construct` (what
``model_construct`` does, without walking every field's metadata per object): the guard checks
every hit anyway.  What is left here is reading a row: the source JSON parsed once per distinct
source, the metadata JSON only when there is some.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from indexplug.construct import construct
from indexplug.outcomes import Hit
from indexplug.passages import Passage, source_from_json


def passage_from_row(row: Sequence[Any]) -> Passage:
    """A passage from ``(id, text, source JSON, document_sha256, start, end, metadata JSON)``.

    Like :meth:`Passage.from_stored`, the id is *not* checked here: a row altered behind the
    backend's back still comes out, and the guard refuses to serve it with a clear reason.
    """
    pid, text, source, doc_sha, start, end, metadata = row
    values = {
        "id": pid,
        "text": text,
        "source": source_from_json(source),
        "document_sha256": doc_sha,
        "start": start,
        "end": end,
        "metadata": json.loads(metadata) if metadata != "{}" else {},
    }
    return construct(Passage, values)


def hit(rank: int, score: float, scale: str, passage: Passage) -> Hit:
    """A hit around ``passage`` (stored text is data, never an instruction: ``untrusted``)."""
    return Hit.from_stored(rank=rank, score=score, score_scale=scale, passage=passage)
