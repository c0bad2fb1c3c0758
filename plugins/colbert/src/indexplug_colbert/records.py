"""A stored passage as one JSON line: what both engines keep next to their vectors.

Hits are rebuilt from these records, not from an engine's own collection, so a passage comes
back exactly as added (text, span, provenance, metadata).  Rebuilt *without* the id check
(:meth:`~indexplug.passages.Passage.from_stored`): a record altered on disk still comes out,
and the guard refuses to serve it with a clear reason.
"""

from __future__ import annotations

import json

from indexplug.passages import Passage, Source


def to_record(passage: Passage) -> bytes:
    return passage.model_dump_json(exclude_none=True).encode("utf-8")


def from_record(raw: bytes) -> Passage:
    data = json.loads(raw)
    return Passage.from_stored(
        id=data["id"],
        text=data["text"],
        source=Source.model_validate(data["source"]),
        start=data["start"],
        end=data["end"],
        document_sha256=data.get("document_sha256"),
        metadata=data.get("metadata") or None,
        digest=data.get("digest"),
    )
