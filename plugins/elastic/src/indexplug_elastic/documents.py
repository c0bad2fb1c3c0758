"""A passage as an Elasticsearch document, and back.

The document id is the passage id (its content address), so adding a passage twice is
recognised by the server itself (``op_type=create`` answers 409 for a known id) and removal is
by id.  Serialisation uses orjson: on a bulk add it is most of the client's own CPU time.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import orjson
from indexplug.outcomes import Hit, hits_from_provenance
from indexplug.passages import MetadataValue, Passage, provenance_json

from indexplug_elastic.analysis import EnglishAnalysis
from indexplug_elastic.mapping import FILTERS, PROV, TERMS, TEXT, VECTOR

LONG_VALUE = 256
"""Metadata values longer than this are filtered on by their SHA-256 (a keyword term is limited
to 32 KiB, and nobody types a long value into a filter by hand anyway)."""


def filter_term(key: str, value: MetadataValue) -> str:
    """One metadata entry as one keyword: ``key NUL type:value``.

    The type tag keeps equality strict (``True``, ``1``, ``1.0`` and ``"1"`` differ, as they do
    for the kit's filter check); ``repr`` of a float round-trips exactly.
    """
    if isinstance(value, bool):
        typed = f"b:{'true' if value else 'false'}"
    elif isinstance(value, int):
        typed = f"i:{value}"
    elif isinstance(value, float):
        typed = f"f:{value!r}"
    else:
        typed = f"s:{value}"
    if len(typed) > LONG_VALUE:
        digest = hashlib.sha256(typed[2:].encode("utf-8", "surrogatepass")).hexdigest()
        typed = f"{typed[:2]}sha256:{digest}"
    return f"{key}\x00{typed}"


def document(
    p: Passage, *, analysis: EnglishAnalysis | None, vector: np.ndarray | None = None
) -> dict[str, Any]:
    """The ``_source`` sent for ``p`` (``terms`` only with client analysis)."""
    doc: dict[str, Any] = {
        TEXT: p.text,
        PROV: provenance_json(p),
        FILTERS: [filter_term(k, v) for k, v in p.metadata.items()],
    }
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


def hits_from_sources(
    ranked: Iterable[tuple[str, float, Mapping[str, Any]]], scale: str
) -> list[Hit]:
    """Hits ranked 1, 2, ... from ``(id, score, _source)`` best first, each passage rebuilt
    without checking its id: the guard compares id and content, so a document altered behind
    our back is reported, not served.  A ``_source`` without the text or the provenance
    (not written by this plugin) raises ``KeyError``, which the backend reports as a failure."""
    return hits_from_provenance(
        ((doc_id, score, source[TEXT], source[PROV]) for doc_id, score, source in ranked), scale
    )


def hits_from_response(
    es_hits: Iterable[Mapping[str, Any]], scale: str, *, cosine: bool
) -> list[Hit]:
    """Hits ranked 1, 2, ... from one search's ``hits.hits``, best first, read straight from
    the answer (no ranked tuples in between: a search with one leg needs no fusion), with
    kNN's ``(1 + cosine) / 2`` turned back into the cosine.  As :func:`hits_from_sources`
    otherwise: passages are not checked here, the guard checks them."""
    if cosine:
        rows = (
            (h["_id"], cosine_of(h["_score"]), h["_source"][TEXT], h["_source"][PROV])
            for h in es_hits
        )
    else:
        rows = (
            (h["_id"], float(h["_score"]), h["_source"][TEXT], h["_source"][PROV]) for h in es_hits
        )
    return hits_from_provenance(rows, scale)
