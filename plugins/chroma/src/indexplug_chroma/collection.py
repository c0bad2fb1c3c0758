"""What indexplug records in a Chroma collection's metadata, and how much one call handles.

The keys fix, when a collection is created, its embedder, its budget and the layout of its
records (where the provenance lives, whether the typed filter fields are there); every op reads
them back before it trusts a record.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from indexplug.passages import Passage

from indexplug_chroma import fields

EMBEDDER_KEY = "indexplug:embedder"
DIM_KEY = "indexplug:dim"
BUDGET_KEY = "indexplug:max_bytes"
PAYLOAD_KEY = "indexplug:payload_bytes"
SCHEMA_KEY = "indexplug:schema"
SCHEMA_VERSION = 1
RECORDS_KEY = "indexplug:records"
"""Where the collection's records keep their provenance, fixed when it is created:
:data:`IN_DOCUMENT` (after the text, :mod:`indexplug_chroma.records`) or ``"metadata"`` (the
``ip.prov`` key, ``plain_documents``).  A collection without the key predates it and holds
metadata-layout records; it keeps being written that way."""
IN_DOCUMENT = "document"
FIELDS_KEY = "indexplug:fields"
"""``typed`` for a collection whose records hold typed filter fields, the digest and the
caller key (:mod:`indexplug_chroma.fields`); a collection without it predates them (its
records hold ``m.<key>`` copies): it is filtered by reading the exact metadata back, and
takes no passages with keys."""
TYPED_FIELDS = "typed"


def _provenance_in_document(collection_meta: Mapping[str, Any]) -> bool:
    """Whether a collection (by its metadata) keeps each record's provenance in the document."""
    return collection_meta.get(RECORDS_KEY) == IN_DOCUMENT


def _typed(collection_meta: Mapping[str, Any]) -> bool:
    """Whether a collection's records hold the typed filter fields (see :data:`FIELDS_KEY`)."""
    return collection_meta.get(FIELDS_KEY) == TYPED_FIELDS


def _known(p: Passage, stored: Mapping[str, Mapping[str, Any]], typed: bool) -> bool:
    """Whether ``p`` is stored already: its id (in a typed collection: alive, same digest)."""
    md = stored.get(p.id)
    if md is None:
        return False
    if not typed:
        return True
    return md.get(fields.DEAD_FIELD) is not True and md.get(fields.DIGEST_FIELD) == p.digest


EMBED_CHUNK = 256
"""Passages embedded between deadline checks (and written to the embedding cache)."""
ID_CHUNK = 1000
SEARCH_ATTEMPTS = 3
"""Tries of a search that met a collection gone or a vector without its record (see
:meth:`ChromaBackend.search`)."""
"""Ids per ``get``/``delete`` call."""
