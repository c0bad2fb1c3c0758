"""The mapping of an indexplug index, and the facts kept with it in ``_meta``.

Why ``_meta``: everything that must hold for the life of an index -- that indexplug made it,
how its text was analysed, which embedder made its vectors, its storage budget -- is kept *in*
the index, so any process, on any machine, with any configuration, reads the same facts.  An
index whose mapping lacks the mark is someone else's: it is never searched, written or dropped.

Fields (``dynamic: strict``, so nothing else can creep in):

* ``text``: the passage text, exactly as added.  Analysed by the server analyzer when the
  server analyses; otherwise stored only (``index: false``) and ``terms`` is searched.
* ``terms``: client-side analysed terms (``whitespace`` analyzer); left out of ``_source``.
* ``prov``: the rest of the passage (source, span, document hash, metadata and its digest) as
  one JSON string, stored but not indexed (no postings, no doc values: nothing searches it).  A
  string comes back byte for byte, so a passage is returned exactly as added (floats such as
  ``5e-324`` included) and the guard can verify its id and digest.
* ``filter_terms``: one keyword per metadata entry, ``key NUL type:value``, for equality
  filters that respect types (``1``, ``1.0``, ``True`` and ``"1"`` are four different values);
  left out of ``_source``.
* ``pid``: the passage id as a keyword with doc values: ``scan`` sorts on it and pages with
  ``search_after`` (sorting on ``_id`` needs fielddata, which Elasticsearch 8 refuses);
* ``mv`` and ``mo``: the metadata as typed keyword terms, for equality and for order
  (:mod:`indexplug_elastic.filtering`), so operator filters are exactly
  :func:`indexplug.filters.matches`; left out of ``_source``.
  It replaces ``filter_terms``, which new documents no longer get;
* ``vector``: the passage embedding (``dense_vector``, cosine, float HNSW) when the index has an
  embedder; left out of ``_source`` (it lives in the vector index; JSON floats would triple the
  stored size).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

MARK = "indexplug"
SCHEMA = 1
LAYOUT = 2
"""Fields of the documents: 1, the first (no ``pid``, ``mv``); 2, with them.  An index of
layout 1 is upgraded in place when first written, scanned or filtered
(:mod:`indexplug_elastic.upgrade`); its schema stays 1, so an older plugin still reads it."""
BACKEND = "elastic"

TEXT = "text"
TERMS = "terms"
PROV = "prov"
FILTERS = "filter_terms"
VECTOR = "vector"
PID = "pid"
MV = "mv"
MO = "mo"
NEW_FIELDS: dict[str, Any] = {
    PID: {"type": "keyword"},
    # Only ever matched with term and range queries: no doc values (those serve sorting).
    MV: {"type": "keyword", "doc_values": False},
    MO: {"type": "keyword", "doc_values": False},
}


class ForeignIndex(Exception):
    """The Elasticsearch index exists but its mapping does not carry indexplug's mark."""


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

    def upgraded(self) -> IndexMeta:
        return replace(self, layout=LAYOUT)

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
        complete = all(f in props for f in NEW_FIELDS)
        if not (isinstance(layout, int) and layout >= LAYOUT and complete):
            layout = 1
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
        text: dict[str, Any] = {"type": "text", "index": False}
    else:
        text = {"type": "text", "analyzer": meta.analyzer, "index_options": "freqs"}
    props: dict[str, Any] = {
        TEXT: text,
        PROV: {"type": "keyword", "index": False, "doc_values": False},
        # Only ever matched with ``term`` filters: no doc values (those serve sorting).
        FILTERS: {"type": "keyword", "doc_values": False},
        **NEW_FIELDS,
    }
    excludes = [FILTERS, *NEW_FIELDS]
    if meta.analysis == "client":
        props[TERMS] = {"type": "text", "analyzer": "whitespace", "index_options": "freqs"}
        excludes.append(TERMS)
    if meta.embedder is not None:
        props[VECTOR] = {
            "type": "dense_vector",
            "dims": meta.dim,
            "index": True,
            "similarity": "cosine",
            # Full-precision HNSW: scores are true cosines (int8, the 8.x default, rounds them).
            "index_options": {"type": "hnsw"},
        }
        excludes.append(VECTOR)
    return {
        "dynamic": "strict",
        "_meta": meta.to_meta(),
        "_source": {"excludes": excludes},
        "properties": props,
    }


def settings(*, shards: int, replicas: int | None) -> dict[str, Any]:
    """Index settings.  Without an explicit replica count, replicas auto-expand from 0 to 1:
    green on a single node, one extra copy as soon as the cluster has a second node."""
    out: dict[str, Any] = {
        "number_of_shards": shards,
        # Store size is cached for 10 s by default; the budget's measured check must see the
        # segments the write just made, so it is read from the directory on every request.
        "store.stats_refresh_interval": "0ms",
    }
    if replicas is None:
        out["auto_expand_replicas"] = "0-1"
    else:
        out["number_of_replicas"] = replicas
    return out
