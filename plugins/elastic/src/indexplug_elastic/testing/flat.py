"""An index as earlier versions of the elastic backend wrote it (the flat layout), recreated
with raw requests, byte for byte what that code sent: one document per passage, ``_id`` the
passage id, ``text`` and ``prov`` in ``_source``.  Kept here as a fixture so that reading,
refusing and migrating such an index is tested against exactly what is out there."""

from __future__ import annotations

from typing import Any

import orjson
from indexplug import Passage
from indexplug.passages import provenance_json

from indexplug_elastic.analysis import EnglishAnalysis
from indexplug_elastic.filtering import terms_of
from indexplug_elastic.testing.server import EsCluster

FLAT_MAPPING: dict[str, Any] = {
    "dynamic": "strict",
    "_meta": {
        "indexplug": {
            "schema": 1,
            "backend": "elastic",
            "analysis": "client",
            "analyzer": "english",
            "embedder": None,
            "max_bytes": None,
            "layout": 2,
        }
    },
    "_source": {"excludes": ["filter_terms", "pid", "mv", "mo", "terms"]},
    "properties": {
        "text": {"type": "text", "index": False},
        "prov": {"type": "keyword", "index": False, "doc_values": False},
        "filter_terms": {"type": "keyword", "doc_values": False},
        "pid": {"type": "keyword"},
        "mv": {"type": "keyword", "doc_values": False},
        "mo": {"type": "keyword", "doc_values": False},
        "terms": {"type": "text", "analyzer": "whitespace", "index_options": "freqs"},
    },
}
FLAT_SETTINGS: dict[str, Any] = {
    "number_of_shards": 1,
    "store.stats_refresh_interval": "0ms",
    "auto_expand_replicas": "0-1",
}


def flat_document(p: Passage, analysis: EnglishAnalysis) -> dict[str, Any]:
    """A passage's document in the flat layout (client analysis)."""
    mv, mo = terms_of(p.metadata)
    return {
        "text": p.text,
        "prov": provenance_json(p),
        "pid": p.id,
        "mv": mv,
        "mo": mo,
        "terms": analysis.analyze(p.text),
    }


def write_flat(cluster: EsCluster, es_index: str, passages: list[Passage]) -> None:
    """Create ``es_index`` in the flat layout holding ``passages`` (refreshed)."""
    status, answer = cluster.request(
        "PUT", f"/{es_index}", {"mappings": FLAT_MAPPING, "settings": FLAT_SETTINGS}
    )
    assert status == 200, answer
    analysis = EnglishAnalysis()
    lines = []
    for p in passages:
        lines.append(orjson.dumps({"create": {"_index": es_index, "_id": p.id}}))
        lines.append(orjson.dumps(flat_document(p, analysis)))
    ndjson = (b"\n".join(lines) + b"\n").decode()
    status, answer = cluster.request("POST", "/_bulk?refresh=true", ndjson)
    assert status == 200 and not answer["errors"], answer
