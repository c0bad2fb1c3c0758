"""The mapping of an indexplug index, and the facts kept with it in ``_meta``.

Why ``_meta``: everything that must hold for the life of an index -- that indexplug made it,
how its text was analysed, which embedder made its vectors, its storage budget -- is kept *in*
the index, so any process, on any machine, with any configuration, reads the same facts.  An
index whose mapping lacks the mark is someone else's: it is never searched, written or dropped.

The layout (``dynamic: strict``, so nothing else can creep in): one Elasticsearch document per
caller key (its ``_id`` :func:`~indexplug_elastic.documents.key_doc_id`, ``k`` and the SHA-256
of the key, which no passage id can be), the key's passages as **nested** documents; a passage
without a key is a document of its own (``_id`` its passage id) with one nested passage.  So
there is one query path, and replacing a key's passages is one index request of its document:
Lucene adds a document and its nested documents as one block, atomically, so no reader sees
both versions of a key or neither.

Fields of the document: ``key`` (the caller key, a keyword), ``n`` (how many passages it holds:
the index's passage count is their sum), and ``pids`` and ``digests`` (its passages' ids and
digests, kept in ``_source`` only: a writer reads them with a realtime get). Fields of each
nested passage (``passages.*``):

* ``text``: the passage text, exactly as added, **stored** (searches read hits from stored
  fields: reading a nested document's part of ``_source`` is what makes inner hits slow).
  Analysed by the server analyzer when the server analyses; otherwise not indexed, and
  ``terms`` is searched.
* ``terms``: client-side analysed terms (``whitespace`` analyzer).
* ``prov``: the rest of the passage (source, span, document hash, metadata, key and digest) as
  one JSON string, stored but not indexed.  A string comes back byte for byte, so a passage is
  returned exactly as added and the guard can verify its id and digest.
* ``pid``: the passage id as a keyword with doc values: hits name their passage with it,
  ``get`` finds passages by it, ``scan`` sorts on it.
* ``mv`` and ``mo``: the metadata as typed keyword terms, for equality and for order
  (:mod:`indexplug_elastic.filtering`).
* ``vector``: the passage embedding (``dense_vector``, cosine, float HNSW) when the index has an
  embedder.

``_source`` keeps the document's own fields only: a passage's record lives in its stored
fields, once.

Indexes written by earlier versions hold one document per passage (the *flat* layout: no
``passages`` field).  They are recognised when opened and answer :class:`FlatLayout`, naming
the command that moves them to this layout.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

MARK = "indexplug"
SCHEMA = 1
LAYOUT = 3
"""The layout of the documents: 1 and 2, flat (one document per passage; 2 added ``pid`` and
``mv``); 3, one document per key with nested passages."""
BACKEND = "elastic"
MIGRATE_COMMAND = "indexplug migrate"
MIGRATED_SUFFIX = ".nested"
"""A migrated index is the Elasticsearch index ``<index>.nested`` (no indexplug index name has
a dot) behind the alias ``<index>``."""

PASSAGES = "passages"
KEY = "key"
COUNT = "n"
IDS = "pids"
DIGESTS = "digests"

TEXT = "text"
TERMS = "terms"
PROV = "prov"
FILTERS = "filter_terms"
VECTOR = "vector"
PID = "pid"
MV = "mv"
MO = "mo"


def path(field: str) -> str:
    """The full name of a nested passage's field (``passages.text``)."""
    return f"{PASSAGES}.{field}"


MV_PATH = path(MV)
MO_PATH = path(MO)
PID_PATH = path(PID)
TEXT_PATH = path(TEXT)
PROV_PATH = path(PROV)
VECTOR_PATH = path(VECTOR)


class ForeignIndex(Exception):
    """The Elasticsearch index exists but its mapping does not carry indexplug's mark."""


class FlatLayout(Exception):
    """The index was written by an earlier version of this plugin, one document per passage;
    it must be migrated (``indexplug migrate``) before this version reads or writes it."""

    def __init__(self, index: str, es_index: str) -> None:
        super().__init__(
            f"Elasticsearch index '{es_index}' has the flat layout of earlier versions of the "
            f"elastic backend (one document per passage); move it to the current layout with "
            f"'{MIGRATE_COMMAND} --index {index} --backend elastic' (with the options that reach "
            "this cluster; it reindexes behind an alias: readers keep the old index until the "
            "new one is complete)"
        )
        self.es_index = es_index


@dataclass(frozen=True)
class IndexMeta:
    """What an index's ``_meta`` records (see the module docstring)."""

    analysis: Literal["client", "server"]
    analyzer: str
    embedder: str | None = None
    dim: int | None = None
    max_bytes: int | None = None
    schema: int = SCHEMA
    layout: int = LAYOUT

    @property
    def search_field(self) -> str:
        return TERMS if self.analysis == "client" else TEXT

    def with_budget(self, max_bytes: int) -> IndexMeta:
        return replace(self, max_bytes=max_bytes)

    @property
    def flat(self) -> bool:
        """Whether the index has the flat layout of earlier versions."""
        return self.layout < LAYOUT

    def to_meta(self) -> dict[str, Any]:
        return {
            MARK: {
                "schema": self.schema,
                "backend": BACKEND,
                "analysis": self.analysis,
                "analyzer": self.analyzer,
                "embedder": (
                    {"name": self.embedder, "dim": self.dim} if self.embedder is not None else None
                ),
                "max_bytes": self.max_bytes,
                "layout": self.layout,
            }
        }

    @classmethod
    def from_mapping(cls, es_index: str, mapping: dict[str, Any]) -> IndexMeta:
        """Read the facts from ``GET /<index>/_mapping``'s entry; :class:`ForeignIndex` if the
        mapping is not ours or not a schema this version understands."""
        meta = (mapping.get("mappings") or {}).get("_meta") or {}
        mark = meta.get(MARK)
        if not isinstance(mark, dict) or mark.get("backend") != BACKEND:
            raise ForeignIndex(
                f"Elasticsearch index '{es_index}' exists but its mapping is not an indexplug "
                f"mapping (no _meta.{MARK} mark); it is left untouched"
            )
        if mark.get("schema") != SCHEMA:
            raise ForeignIndex(
                f"Elasticsearch index '{es_index}' has indexplug schema {mark.get('schema')!r}; "
                f"this version reads schema {SCHEMA}"
            )
        emb = mark.get("embedder")
        analysis = mark.get("analysis")
        if analysis not in ("client", "server"):
            raise ForeignIndex(f"Elasticsearch index '{es_index}' has an unknown analysis mode")
        budget = mark.get("max_bytes")
        props = (mapping.get("mappings") or {}).get("properties") or {}
        layout = mark.get("layout")
        nested = (props.get(PASSAGES) or {}).get("type") == "nested"
        if not (isinstance(layout, int) and layout >= LAYOUT and nested):
            layout = 2 if PID in props else 1
        return cls(
            analysis=analysis,
            analyzer=str(mark.get("analyzer") or "standard"),
            embedder=str(emb["name"]) if isinstance(emb, dict) else None,
            dim=int(emb["dim"]) if isinstance(emb, dict) else None,
            max_bytes=int(budget) if isinstance(budget, int) else None,
            schema=SCHEMA,
            layout=layout,
        )


def mappings(meta: IndexMeta) -> dict[str, Any]:
    """The mapping of a new index with ``meta``."""
    # BM25 needs term frequencies and norms, never positions (no phrase queries are made):
    # ``index_options: freqs`` skips them, which makes indexing cheaper and the index smaller.
    if meta.analysis == "client":
        text: dict[str, Any] = {"type": "text", "index": False, "store": True}
    else:
        text = {
            "type": "text",
            "analyzer": meta.analyzer,
            "index_options": "freqs",
            "store": True,
        }
    nested: dict[str, Any] = {
        TEXT: text,
        PROV: {"type": "keyword", "index": False, "doc_values": False, "store": True},
        PID: {"type": "keyword"},
        # Only ever matched with term and range queries: no doc values (those serve sorting).
        MV: {"type": "keyword", "doc_values": False},
        MO: {"type": "keyword", "doc_values": False},
    }
    if meta.analysis == "client":
        nested[TERMS] = {"type": "text", "analyzer": "whitespace", "index_options": "freqs"}
    if meta.embedder is not None:
        nested[VECTOR] = {
            "type": "dense_vector",
            "dims": meta.dim,
            "index": True,
            "similarity": "cosine",
            # Full-precision HNSW: scores are true cosines (int8, the 8.x default, rounds them).
            "index_options": {"type": "hnsw"},
        }
    return {
        "dynamic": "strict",
        "_meta": meta.to_meta(),
        "_source": {"excludes": [PASSAGES]},
        "properties": {
            KEY: {"type": "keyword"},
            COUNT: {"type": "integer"},
            # What the document holds, in its _source only (read back with a realtime get
            # when its key is written again: which passages are known, which replaced).
            IDS: {"type": "keyword", "index": False, "doc_values": False},
            DIGESTS: {"type": "keyword", "index": False, "doc_values": False},
            PASSAGES: {"type": "nested", "properties": nested},
        },
    }


MAX_INNER_HITS = 10_001
"""``index.max_inner_result_window``: inner hits per document a search may ask for (a search's
``top_k`` and a scan's page, plus one)."""


def settings(*, shards: int, replicas: int | None) -> dict[str, Any]:
    """Index settings.  Without an explicit replica count, replicas auto-expand from 0 to 1:
    green on a single node, one extra copy as soon as the cluster has a second node."""
    out: dict[str, Any] = {
        "number_of_shards": shards,
        # Store size is cached for 10 s by default; the budget's measured check must see the
        # segments the write just made, so it is read from the directory on every request.
        "store.stats_refresh_interval": "0ms",
        "max_inner_result_window": MAX_INNER_HITS,
    }
    if replicas is None:
        out["auto_expand_replicas"] = "0-1"
    else:
        out["number_of_replicas"] = replicas
    return out
