"""A passage as an Elasticsearch document, and back.

The document id is the passage id (its content address), so adding a passage twice is
recognised by the server itself (``op_type=create`` answers 409 for a known id) and removal is
by id.  Serialisation uses orjson: on a bulk add it is most of the client's own CPU time.

The passage's record is ``text`` and ``prov`` (:func:`~indexplug.passages.provenance_json`:
source, span, document checksum, metadata and the passage's digest) in ``_source``; what
searches match is apart from it (the ``terms`` postings with client analysis, the ``vector``,
both left out of ``_source``).  A hit is rebuilt from the record the one documented way,
``Hit.from_stored`` around :func:`~indexplug.passages.passage_from_provenance`, neither id nor
digest checked here: the guard checks every hit, so a record altered behind our back is
refused, not served.  A document a search finds without its record raises
:class:`RecordLost` (``INDEX_FAILED``), never a shorter answer.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import orjson
from indexplug.outcomes import Hit
from indexplug.passages import Passage, passage_from_provenance, provenance_json

from indexplug_elastic.analysis import EnglishAnalysis
from indexplug_elastic.filtering import terms_of
from indexplug_elastic.mapping import MO, MV, PID, PROV, TERMS, TEXT, VECTOR


def document(
    p: Passage, *, analysis: EnglishAnalysis | None, vector: np.ndarray | None = None
) -> dict[str, Any]:
    """The ``_source`` sent for ``p`` (``terms`` only with client analysis; ``pid`` and ``mv``
    are indexed but left out of what is stored, see :mod:`~indexplug_elastic.mapping`)."""
    doc: dict[str, Any] = {
        TEXT: p.text,
        PROV: provenance_json(p),
        PID: p.id,
    }
    doc[MV], doc[MO] = terms_of(p.metadata)
    if analysis is not None:
        doc[TERMS] = analysis.analyze(p.text)
    if vector is not None and _usable(vector):
        doc[VECTOR] = vector
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
    """A document a search found holds no passage record (no ``text`` or ``prov`` in its
    ``_source``): deleted behind the postings or vector that matched, or not written by this
    plugin.  The index can no longer say what it holds; the backend answers ``INDEX_FAILED``."""


def record_of(doc_id: str, source: Any) -> Passage:
    """The passage a document's ``_source`` records (not checked: the guard checks it);
    :class:`RecordLost` when it holds no record."""
    try:
        text, prov = source[TEXT], source[PROV]
    except (KeyError, TypeError):
        raise RecordLost(
            f"document {str(doc_id)[:12]}... holds no passage record (its text or provenance "
            "is gone, deleted behind the index's postings or vectors); the index cannot be "
            "trusted: rebuild it"
        ) from None
    return passage_from_provenance(doc_id, text, prov)


def _hit(rank: int, doc_id: str, score: float, source: Any, scale: str) -> Hit:
    """One hit from a document's ``_source`` (anything but a mapping holding ``text`` and
    ``prov``: :class:`RecordLost`)."""
    try:
        text, prov = source[TEXT], source[PROV]
    except (KeyError, TypeError):
        raise RecordLost(
            f"document {str(doc_id)[:12]}... matches the search but holds no passage record "
            "(its text or provenance is gone, deleted behind the index's postings or vectors); "
            "the index cannot be trusted: rebuild it"
        ) from None
    return Hit.from_stored(
        rank=rank,
        score=score,
        score_scale=scale,
        passage=passage_from_provenance(doc_id, text, prov),
    )


def hits_from_sources(
    ranked: Iterable[tuple[str, float, Mapping[str, Any]]], scale: str
) -> list[Hit]:
    """Hits ranked 1, 2, ... from ``(id, score, _source)`` best first, each passage rebuilt
    without checking its id or digest: the guard compares both with the content, so a
    document altered behind our back is reported, not served.  A ``_source`` without the text
    or the provenance raises :class:`RecordLost`, which the backend reports as a failure."""
    return [
        _hit(rank, doc_id, score, source, scale)
        for rank, (doc_id, score, source) in enumerate(ranked, start=1)
    ]


def hits_from_response(
    es_hits: Iterable[Mapping[str, Any]], scale: str, *, cosine: bool
) -> list[Hit]:
    """Hits ranked 1, 2, ... from one search's ``hits.hits``, best first, read straight from
    the answer (no ranked tuples in between: a search with one leg needs no fusion), with
    kNN's ``(1 + cosine) / 2`` turned back into the cosine.  As :func:`hits_from_sources`
    otherwise: passages are not checked here, the guard checks them."""
    if cosine:
        return [
            _hit(rank, h["_id"], cosine_of(h["_score"]), h.get("_source"), scale)
            for rank, h in enumerate(es_hits, start=1)
        ]
    return [
        _hit(rank, h["_id"], float(h["_score"]), h.get("_source"), scale)
        for rank, h in enumerate(es_hits, start=1)
    ]
