"""How a passage is stored in a Chroma record, and read back exactly as it was added.

A Chroma record is an id, a document, an embedding and a flat metadata map.  We use:

* id: the passage id (content-addressed, so "adding a known id" means "adding this passage");
* document: the passage text, then a record separator (``\x1e``) and the provenance: the
  source, span and the passage's own metadata as one JSON object, in core's layout
  (:func:`indexplug.passages.provenance_json`, the one Elasticsearch's ``prov`` field holds
  too).  JSON keeps every value's exact type and digits (a bool stays a bool, ``1.0`` stays a
  float), so a hit is the passage *exactly* as added.  JSON writes a control character in a
  string as an escape, so the provenance never holds the separator and the *last* one in a
  document is where the text ends, whatever the text holds.  Why in the document and not in a
  metadata key: Chroma keeps a record's document and metadata as one row per key and reads all
  of them back for every hit, and asking for metadata at all costs a query even where records
  have none; with the provenance in the document a search asks for documents and distances
  alone, as a raw Chroma user does (``bench/metadata_keys.py``, 5,183 SciFact-sized records,
  median query at k=100: 3.84 ms with no metadata, 3.86 ms with the provenance in the
  document, 4.36 ms with it in one key, 5.41 ms with the four keys used before);
* metadata: the typed fields of the passage's metadata (:mod:`indexplug_chroma.fields`), so
  that Chroma can filter on every operator exactly, and ``ip.key``, the passage's caller key;
  a passage with neither has no metadata.  Collections created before the typed fields
  (no ``indexplug:fields`` in the collection's metadata) keep ``m.<key>``, each scalar
  metadata value again as a native Chroma value, and are filtered by reading the exact
  metadata back from the provenance;
* a record replaced by its key's new passages (:func:`dead_record`) carries ``ip.dead`` and,
  in today's layout, a last separator and ``dead`` after the provenance, so that a search
  (which reads documents, not metadata) sees it is dead; it is deleted right after.

A collection created with the ``plain_documents`` option keeps the text alone as the document
and the provenance in an ``ip.prov`` metadata key (the layout before; for collections other
Chroma clients read too); the collection's metadata records which layout it has
(``indexplug:records``), and a collection without that key holds records of the earlier
layouts.  Records in either layout, and in the first one (a key per field: ``ip.source``/
``ip.start``/``ip.end``/``ip.doc``/``ip.meta``), are all read, each by its own keys.

Digests: both layouts written today hold the passage's digest inside the provenance JSON
(:func:`~indexplug.passages.provenance_json` writes it), so it round-trips with the rest.  The
first layout has no place for one and is no longer written; its records come back with no
digest, which the guard refuses to serve (``INDEX_FAILED``: "no digest ...; re-index it"):
an honest failure rather than a passage nothing vouches for.  Re-adding the passages to a new
index fixes it.

A record Chroma answers without a document (its record deleted from Chroma's record store
while its vector stayed in the vector index) raises :class:`RecordLost`, which the backend
answers as ``INDEX_FAILED``: such an index can no longer say what it holds.

Filters follow :func:`indexplug.filters.matches` (``1`` and ``1.0`` are one number, ``true``
is not ``1``): :mod:`indexplug_chroma.fields` says how.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from indexplug.passages import (
    Passage,
    passage_from_provenance,
    provenance_json,
    source_from_json,
)

from indexplug_chroma import fields
from indexplug_chroma.errors import RecordLost

META_PREFIX = "m."
SEPARATOR = "\x1e"
"""Between the text and the provenance in a record's document (ASCII's record separator)."""
# the layouts of records written before the provenance moved into the document (still read)
PROV = "ip.prov"
SOURCE = "ip.source"
START = "ip.start"
END = "ip.end"
DOC = "ip.doc"
META = "ip.meta"
DEAD = "dead"
"""After a last separator in a dead record's document (a provenance is JSON: never this)."""


def to_record(
    p: Passage, *, plain_document: bool = False, typed: bool = True
) -> tuple[str, dict[str, Any] | None]:
    """The Chroma document and metadata map of a passage (see the module docstring).

    ``plain_document``: the layout before, the text alone as the document and the provenance
    in the ``ip.prov`` key, for collections that other Chroma clients read too.  ``typed``:
    the typed filter fields and the key (``False``: ``m.<key>`` for a collection made before
    them).  The map is ``None`` rather than empty for a passage without metadata (Chroma
    refuses an empty map).
    """
    prov = provenance_json(p)
    filterable = filterable_fields(p, typed=typed)
    if plain_document:
        return p.text, {PROV: prov, **filterable}
    return f"{p.text}{SEPARATOR}{prov}", filterable or None


def filterable_fields(p: Passage, *, typed: bool = True) -> dict[str, Any]:
    """The metadata keys Chroma filters on (see :func:`to_record`)."""
    if typed:
        out = fields.fields_of(p.metadata)
        if p.digest is not None:
            out[fields.DIGEST_FIELD] = p.digest
        if p.key is not None:
            out[fields.KEY_FIELD] = p.key
        return out
    return {
        META_PREFIX + key: value
        for key, value in p.metadata.items()
        if value is not None and not isinstance(value, list)
    }


def is_filter_field(name: str) -> bool:
    """Whether a record's metadata key is one :func:`filterable_fields` writes (either way)."""
    return (
        name.startswith(META_PREFIX)
        or name in (fields.KEY_FIELD, fields.DIGEST_FIELD)
        or fields.is_typed(name)
    )


def dead_record(
    document: str | None, metadata: Mapping[str, Any] | None
) -> tuple[str | None, dict[str, Any]]:
    """A record marked dead (replaced by its key's new passages, deleted next)."""
    meta = {**(metadata or {}), fields.DEAD_FIELD: True}
    if provenance_in_document(metadata) and document is not None:
        document = f"{document}{SEPARATOR}{DEAD}"
    return document, meta


def is_dead(document: str | None, metadata: Mapping[str, Any] | None) -> bool:
    """Whether a record was marked by :func:`dead_record` (either sign is enough)."""
    if metadata and metadata.get(fields.DEAD_FIELD) is True:
        return True
    return document is not None and document.endswith(SEPARATOR + DEAD)


def provenance_in_document(metadata: Mapping[str, Any] | None) -> bool:
    """Whether a record with this metadata holds its provenance in its document (today's
    layout): no key of either earlier layout."""
    return not metadata or (PROV not in metadata and SOURCE not in metadata)


def split_document(document: str) -> tuple[str, str]:
    """A document in today's layout as ``(text, provenance)``; ``ValueError`` for one
    without the separator (not written by this plugin, or edited behind its back)."""
    text, sep, prov = document.rpartition(SEPARATOR)
    if not sep:
        raise ValueError("the document holds no provenance after a record separator")
    return text, prov


def from_record(pid: str, document: str | None, metadata: Mapping[str, Any] | None) -> Passage:
    """The stored passage, rebuilt *without* the id and digest checks (the guard does them);
    :class:`RecordLost` for a vector whose record is gone, ``ValueError`` for a record that is
    not a passage."""
    if document is None and not metadata:
        raise RecordLost(
            f"the vector index holds passage {pid[:12]}... but its record is gone (deleted "
            "behind Chroma's vector index); the index cannot be trusted: rebuild it"
        )
    if provenance_in_document(metadata):
        return passage_from_provenance(pid, *split_document(document or ""))
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
        digest=None,  # the first layout kept none: the guard refuses it ("re-index it")
    )


def altered(
    pid: str,
    document: str | None,
    metadata: Mapping[str, Any] | None,
    changes: Mapping[str, Any],
) -> tuple[str, dict[str, Any] | None]:
    """A stored record with ``changes`` made to it in place (``text``, ``metadata``,
    ``licence``, ``provenance``, ``start``, ``end``; ``digest``: ``None`` removes it), its id
    and digest kept unless named, in the layout it has: what an edit behind the backend's back
    would leave (the conformance kit's ``tamper_record`` hook).  The filterable ``m.*`` copies
    follow a metadata change."""
    p = from_record(pid, document, metadata)
    source = p.source.model_copy(
        update={k: v for k, v in changes.items() if k in ("licence", "provenance")}
    )
    q = Passage.from_stored(
        id=p.id,
        text=changes.get("text", p.text),
        source=source,
        start=changes.get("start", p.start),
        end=changes.get("end", p.end),
        document_sha256=p.document_sha256,
        metadata=changes.get("metadata", p.metadata),
        digest=changes.get("digest", p.digest),
        key=p.key,
    )
    typed = not any(k.startswith(META_PREFIX) for k in metadata or {})
    meta = {k: v for k, v in (metadata or {}).items() if not is_filter_field(k)}
    meta.update(filterable_fields(q, typed=typed))
    if provenance_in_document(metadata):
        return f"{q.text}{SEPARATOR}{provenance_json(q)}", meta or None
    if PROV in meta:
        meta[PROV] = provenance_json(q)
        return q.text, meta
    meta[SOURCE] = q.source.model_dump_json(exclude_none=True)
    meta[START], meta[END] = q.start, q.end
    meta[META] = json.dumps(dict(q.metadata), ensure_ascii=False)
    return q.text, meta


def payload_bytes(p: Passage) -> int:
    """Bytes of a passage's document and metadata as stored (what a server's size estimate
    counts for each passage besides its embedding)."""
    document, meta = to_record(p)
    size = len(document.encode("utf-8"))
    for key, value in (meta or {}).items():
        size += len(key.encode("utf-8")) + len(str(value).encode("utf-8"))
    return size
