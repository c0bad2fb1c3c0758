"""How a passage is stored in a Chroma record, and read back exactly as it was added.

A Chroma record is an id, a document, an embedding and a flat metadata map.  We use:

* id: the passage id (content-addressed, so "adding a known id" means "adding this passage");
* document: the passage text;
* metadata, in two namespaces that cannot collide:

  - ``ip.prov``: the provenance and the passage's own metadata as one JSON object, in core's
    layout (:func:`indexplug.passages.provenance_json`, the one Elasticsearch's ``prov`` field
    holds too).  JSON keeps every value's exact type and digits (a bool stays a bool, ``1.0``
    stays a float), so a hit is the passage *exactly* as added.  One key, not one per field:
    Chroma keeps a record's metadata (its document too) as one row per key, and reading them
    back is most of what a top-100 query costs beyond the vector search
    (``bench/metadata_keys.py``, 5,183 SciFact-sized records, median query at k=100: 4.4 ms with
    no metadata, 5.0 ms with one key, 6.0 ms with the four keys used before); records written
    that way, ``ip.source``/``ip.start``/``ip.end``/``ip.doc``/``ip.meta``, are still read;
  - ``m.<key>``: each metadata value again, as a native Chroma value, only so that Chroma can
    filter on it (``where={"m.topic": "animals"}``).

Chroma compares ``1`` and ``1.0`` as equal; indexplug's equality filters are typed (a filter on
the int ``2001`` does not match the float ``2001.0``), so hits are checked again against the
exact JSON copy (:func:`matches`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from indexplug.passages import (
    MetadataValue,
    Passage,
    passage_from_provenance,
    provenance_json,
    source_from_json,
)

META_PREFIX = "m."
PROV = "ip.prov"
# the layout of records written before ``ip.prov`` (still read)
SOURCE = "ip.source"
START = "ip.start"
END = "ip.end"
DOC = "ip.doc"
META = "ip.meta"


def to_metadata(p: Passage) -> dict[str, Any]:
    """The Chroma metadata map of a passage (see the module docstring)."""
    meta: dict[str, Any] = {PROV: provenance_json(p)}
    for key, value in p.metadata.items():
        meta[META_PREFIX + key] = value
    return meta


def from_record(pid: str, document: str | None, metadata: Mapping[str, Any] | None) -> Passage:
    """The stored passage, rebuilt *without* the id check (the guard does that check)."""
    meta = metadata or {}
    raw = meta.get(PROV)
    if raw is not None:
        return passage_from_provenance(pid, document or "", str(raw))
    old = meta.get(META)
    return Passage.from_stored(
        id=pid,
        text=document or "",
        # parsed once per distinct source (a top-100 search reads a hundred)
        source=source_from_json(str(meta[SOURCE])),
        start=int(meta[START]),
        end=int(meta[END]),
        document_sha256=str(meta[DOC]) if meta.get(DOC) else None,
        metadata=json.loads(old) if old and old != "{}" else None,
    )


def where_clause(filters: Mapping[str, MetadataValue] | None) -> dict[str, Any] | None:
    """Chroma's ``where`` for equality on every key (``$and`` when there are several)."""
    if not filters:
        return None
    terms = [{META_PREFIX + k: {"$eq": v}} for k, v in filters.items()]
    return terms[0] if len(terms) == 1 else {"$and": terms}


def matches(p: Passage, filters: Mapping[str, MetadataValue] | None) -> bool:
    """Typed equality: the stored value equals the filter value and has its type."""
    if not filters:
        return True
    for key, want in filters.items():
        if key not in p.metadata:
            return False
        have = p.metadata[key]
        if type(have) is not type(want) or have != want:
            return False
    return True


def payload_bytes(p: Passage) -> int:
    """Bytes of a passage's text and metadata as stored (what a server's size estimate
    counts for each passage besides its embedding)."""
    meta = to_metadata(p)
    size = len(p.text.encode("utf-8"))
    for key, value in meta.items():
        size += len(key.encode("utf-8")) + len(str(value).encode("utf-8"))
    return size
