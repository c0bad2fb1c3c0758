"""A stored passage as one JSON line: what both engines keep next to their vectors.

Hits are rebuilt from these records, not from an engine's own collection, so a passage comes
back exactly as added (text, span, provenance, metadata, digest: ``model_dump_json`` writes
every field, the digest included).  Rebuilt *without* the id and digest checks
(:meth:`~indexplug.passages.Passage.from_stored`): a record altered on disk still comes out,
and the guard refuses to serve it with a clear reason.  A record that is gone while the
engine's vectors still name it raises :class:`RecordLost` (``INDEX_FAILED``), never a hit
silently left out.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from indexplug.passages import Passage, Source


class RecordLost(Exception):
    """The engine's vectors name a passage whose record is gone (deleted behind them): the
    index can no longer say what it holds (-> ``IndexFailed``, ``Inconsistent``)."""

    def __init__(self, passage_id: str | None = None) -> None:
        which = f"passage {passage_id[:12]}..." if passage_id else "a passage"
        super().__init__(
            f"the index's vectors hold {which} whose record is gone (deleted behind them); "
            "the index cannot be trusted: rebuild it from its sources"
        )


def to_record(passage: Passage) -> bytes:
    return passage.model_dump_json(exclude_none=True).encode("utf-8")


def from_record(raw: bytes | None, passage_id: str | None = None) -> Passage:
    if raw is None or not raw.strip():
        raise RecordLost(passage_id)
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
        key=data.get("key"),
    )


@dataclass(frozen=True)
class Facets:
    """What filters and caller keys read of a segment's or generation's records: each
    passage's key and metadata, in storage order, and the passages of each key."""

    keys: list[str | None]
    metadata: list[Mapping[str, Any]]
    by_key: dict[str, list[int]]


def facets(raws: Iterable[tuple[str, bytes]]) -> Facets:
    """The :class:`Facets` of ``(id, record)`` pairs; :class:`RecordLost` for a record that
    is gone (an empty line), as a hit would be."""
    keys: list[str | None] = []
    metadata: list[Mapping[str, Any]] = []
    by_key: dict[str, list[int]] = {}
    for n, (pid, raw) in enumerate(raws):
        if not raw.strip():
            raise RecordLost(pid)
        data = json.loads(raw)
        key = data.get("key")
        keys.append(key)
        metadata.append(data.get("metadata") or {})
        if key is not None:
            by_key.setdefault(key, []).append(n)
    return Facets(keys, metadata, by_key)


def altered(raw: bytes, changes: Mapping[str, Any]) -> bytes:
    """A record with ``changes`` made to it (``text``, ``metadata``, ``licence``,
    ``provenance``, ``start``, ``end``; ``digest``: ``None`` removes it), its id and digest
    kept unless named: what an edit of the file behind the engine's back leaves (the
    conformance kit's ``tamper_record`` hook)."""
    data = json.loads(raw)
    for key in ("text", "metadata", "start", "end", "digest"):
        if key in changes:
            data[key] = changes[key]
    for key in ("licence", "provenance"):
        if key in changes:
            data["source"][key] = changes[key]
    return json.dumps(data, ensure_ascii=False).encode("utf-8")
