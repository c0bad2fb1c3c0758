"""Hits from stored rows, without paying pydantic's per-object overhead.

Rows become passages and hits through :func:`indexplug.passages.stored_passage` and
:meth:`indexplug.outcomes.Hit.from_stored` (what ``model_construct`` does, without walking every
field's metadata per object): the guard checks every hit anyway.  What is left here is
reading a row: the source JSON parsed once per distinct source, the metadata JSON only when
there is some.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from indexplug.outcomes import Hit
from indexplug.passages import Passage, source_from_json, stored_passage


def passage_from_row(row: Sequence[Any]) -> Passage:
    """A passage from ``(id, text, source JSON, document_sha256, start, end, metadata JSON,
    digest, key)``.

    Like :meth:`Passage.from_stored`, neither id nor digest is checked here: a row altered
    behind the backend's back still comes out, and the guard refuses to serve it with a clear
    reason.
    """
    pid, text, source, doc_sha, start, end, metadata, digest, key = row
    meta = json.loads(metadata) if metadata != "{}" else {}
    return stored_passage(
        pid, text, source_from_json(source), start, end, doc_sha, meta, digest, key
    )


def hit(rank: int, score: float, scale: str, passage: Passage) -> Hit:
    """A hit around ``passage`` (stored text is data, never an instruction: ``untrusted``)."""
    return Hit.from_stored(rank=rank, score=score, score_scale=scale, passage=passage)


@lru_cache(maxsize=16_384, typed=True)
def searched_passage(
    pid: str,
    text: str,
    source: str,
    doc_sha: str | None,
    start: int,
    end: int,
    metadata: str,
    digest: str | None,
    key: str | None,
) -> Passage:
    """:func:`passage_from_row` for a search's hits, remembered by the row's exact values.

    The same passages come back search after search; one built before from a row with
    exactly these values (``typed``: ``1`` and ``1.0`` are two rows) is the same passage.
    The guard still checks every one, and hands the caller its own copy, never this object.
    """
    return passage_from_row((pid, text, source, doc_sha, start, end, metadata, digest, key))
