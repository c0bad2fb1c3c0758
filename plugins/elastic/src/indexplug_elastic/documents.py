"""Passages as Elasticsearch documents (one per caller key, passages nested), and back.

A document's ``_id`` says what it holds: a passage without a key is a document of its own
whose ``_id`` is the passage id (its content address), so adding it twice is recognised by the
server itself (``op_type=create`` answers 409 for a known id); the passages of a caller key
share the document :func:`key_doc_id` (``k`` and the key's SHA-256: never 64 hex digits, so
never a passage id).  Serialisation uses orjson: on a bulk add it is most of the client's CPU.

A passage's record is its nested document's stored ``text`` and ``prov``
(:func:`~indexplug.passages.provenance_json`: source, span, document checksum, metadata, key
and digest) with its ``pid`` (doc values); what searches match is apart from it (the
``terms`` postings with client analysis, the ``vector``).  A hit is rebuilt from the record the
one documented way, ``Hit.from_stored`` around :func:`~indexplug.passages.passage_from_provenance`,
neither id nor digest checked here: the guard checks every hit, so a record altered behind our
back is refused, not served.  A passage a search finds without its record raises
:class:`RecordLost` (``INDEX_FAILED``), never a shorter answer.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import orjson
from indexplug.outcomes import Hit
from indexplug.passages import Passage, passage_from_provenance, provenance_json

from indexplug_elastic.analysis import EnglishAnalysis
from indexplug_elastic.filtering import terms_of
from indexplug_elastic.mapping import (
    COUNT,
    DIGESTS,
    IDS,
    KEY,
    MO,
    MV,
    PASSAGES,
    PID,
    PID_PATH,
    PROV,
    PROV_PATH,
    TERMS,
    TEXT,
    TEXT_PATH,
    VECTOR,
    VECTOR_PATH,
)

STORED_FIELDS = [TEXT_PATH, PROV_PATH]
"""What an inner hit reads: the record's stored fields (never the nested ``_source``)."""
DOCVALUE_FIELDS = [PID_PATH]
WITH_VECTORS = [PID_PATH, VECTOR_PATH]
"""What an inner hit reads when the passages' stored vectors are wanted as well.

The vector comes from ``docvalue_fields``: Elasticsearch 8.x answers a ``dense_vector``'s
doc values with the float32 vector Lucene keeps for its HNSW graph (the full-precision
``hnsw`` option: the numbers as written).  ``_source`` and the ``fields`` option cannot give it
back: both read ``_source``, which leaves the passages out (see
:mod:`~indexplug_elastic.mapping`), and parsing it for every inner hit is what the stored
fields avoid.  A passage stored without a vector (a zero vector) has none."""


def key_doc_id(key: str) -> str:
    """The ``_id`` of the document holding the passages of caller key ``key``."""
    return "k" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def doc_id_of(p: Passage) -> str:
    """The ``_id`` of the document that holds ``p``."""
    return p.id if p.key is None else key_doc_id(p.key)


def nested(
    p: Passage, *, analysis: EnglishAnalysis | None, vector: np.ndarray | None = None
) -> dict[str, Any]:
    """The nested document of ``p`` (``terms`` only with client analysis)."""
    doc: dict[str, Any] = {TEXT: p.text, PROV: provenance_json(p), PID: p.id}
    doc[MV], doc[MO] = terms_of(p.metadata)
    if analysis is not None:
        doc[TERMS] = analysis.analyze(p.text)
    if vector is not None and _usable(vector):
        doc[VECTOR] = vector
    return doc


def parent(
    key: str | None, passages: Sequence[Passage], children: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """The document of a key (or of one unkeyed passage) holding ``passages``, whose nested
    documents are ``children``."""
    doc: dict[str, Any] = {
        COUNT: len(children),
        IDS: [p.id for p in passages],
        DIGESTS: [p.digest or "" for p in passages],
        PASSAGES: list(children),
    }
    if key is not None:
        doc[KEY] = key
    return doc


def _usable(vector: np.ndarray) -> bool:
    """Cosine similarity is undefined for a zero vector (Elasticsearch rejects the document);
    such a passage (no words the embedder knows) is indexed for BM25 only."""
    norm = float(np.linalg.norm(vector))
    return norm > 0 and math.isfinite(norm)


def dumps(obj: Any) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY)


def cosine_of(es_score: Any) -> float:
    """The cosine behind a kNN hit's score (Elasticsearch answers ``(1 + cosine) / 2``)."""
    return 2.0 * float(es_score) - 1.0


class RecordLost(Exception):
    """A passage a search found holds no record (no ``text`` or ``prov``): deleted behind the
    postings or vector that matched, or not written by this plugin.  The index can no longer
    say what it holds; the backend answers ``INDEX_FAILED``."""


class Stored(NamedTuple):
    """One nested passage as an inner hit answers it: its id, score and stored fields."""

    pid: str
    score: float
    fields: Mapping[str, Any]


def _first(fields: Mapping[str, Any], name: str) -> Any:
    values = fields.get(name)
    return values[0] if isinstance(values, list) and values else None


def inner_hits(hit: Mapping[str, Any]) -> list[Stored]:
    """The nested passages of one hit's ``inner_hits`` (best first, as the server ranked
    them)."""
    inner = ((hit.get("inner_hits") or {}).get(PASSAGES) or {}).get("hits") or {}
    out = []
    for h in inner.get("hits") or ():
        fields = h.get("fields") or {}
        pid = _first(fields, PID_PATH)
        score = h.get("_score")
        out.append(Stored(str(pid), float(score) if score is not None else 0.0, fields))
    return out


def vector_of(stored: Stored) -> tuple[float, ...] | None:
    """The stored vector an inner hit read (``WITH_VECTORS``), or None when it has none."""
    value = _first(stored.fields, VECTOR_PATH)
    if not isinstance(value, list) or not value:
        return None
    return tuple(float(x) for x in value)


def record_of(stored: Stored) -> Passage:
    """The passage an inner hit's stored fields record (not checked: the guard checks it);
    :class:`RecordLost` when it holds no record."""
    text, prov = _first(stored.fields, TEXT_PATH), _first(stored.fields, PROV_PATH)
    if not isinstance(text, str) or not isinstance(prov, str):
        raise RecordLost(
            f"passage {stored.pid[:12]}... holds no record (its text or provenance is gone, "
            "deleted behind the index's postings or vectors); the index cannot be trusted: "
            "rebuild it"
        )
    return passage_from_provenance(stored.pid, text, prov)


def hits_of(
    ranked: Iterable[Stored], scale: str, *, cosine: bool = False, vectors: bool = False
) -> list[Hit]:
    """Hits ranked 1, 2, ... from passages best first, each rebuilt without checking its id
    or digest (the guard compares both with the content, so a passage altered behind our back
    is reported, not served); kNN's ``(1 + cosine) / 2`` turned back into the cosine; with
    ``vectors``, each with the stored vector its inner hit read (the guard refuses a hit
    without one)."""
    return [
        Hit.from_stored(
            rank=rank,
            score=cosine_of(s.score) if cosine else s.score,
            score_scale=scale,
            passage=record_of(s),
            vector=vector_of(s) if vectors else None,
        )
        for rank, s in enumerate(ranked, start=1)
    ]
