"""LlamaIndex nodes to indexplug passages and back.

One node is one passage, keyed by the node id (so adding a node again replaces it).  The
user's flat metadata (str, int, finite float, bool, None, lists of those) is stored as it is,
under its own keys (so it can be filtered on); what else LlamaIndex's ``SimpleVectorStore``
keeps (nested dicts, lists of those, dates, tuples) is kept exactly in the node record below
and comes back equal and of the same types, out of the filters' sight; anything else (a set,
bytes, an object) is refused naming the key.  The adapter's own record sits beside it under
reserved keys in the ``indexplug.`` namespace:

* ``indexplug.node_id``: the node id (what ``node_ids`` queries filter on);
* ``indexplug.ref_doc_id``: the id of the node's source document (``delete(ref_doc_id)``);
* ``indexplug.node``: the rest of the node as JSON (relationships, excluded keys, templates,
  character span), so that reading it back gives the node that was written.

A node read back from a search carries the adapter's fields for that hit (passage id, key, uri,
span, rank, score scale, untrusted flag) in one metadata entry, ``indexplug``, listed in the
node's ``excluded_llm_metadata_keys`` and ``excluded_embed_metadata_keys`` so that neither the
LLM nor an embedder sees it.  User metadata keys are never overwritten: a key ``indexplug`` or
one starting with ``indexplug.`` is refused on write.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

import indexplug
from indexplug import typed_json
from llama_index.core.schema import (
    BaseNode,
    Document,
    NodeRelationship,
    RelatedNodeInfo,
    TextNode,
)

NAMESPACE = "indexplug"
"""The metadata entry holding the adapter's own fields of a hit (a dict)."""
NODE_ID = "indexplug.node_id"
REF_DOC_ID = "indexplug.ref_doc_id"
NODE_JSON = "indexplug.node"
RESERVED = (NODE_ID, REF_DOC_ID, NODE_JSON)
_NODE_CLASSES: dict[str, type[BaseNode]] = {"TextNode": TextNode, "Document": Document}
KEPT_METADATA = "kept_metadata"
"""The node record's entry holding, as :mod:`indexplug.typed_json` text, the metadata values
passage metadata cannot hold as they are (nested dicts, lists of those, dates, tuples)."""
_LEFT_OUT = ("id_", "text", "metadata", "embedding", "text_resource", "class_name")


class MetadataRefused(indexplug.InvalidRequest):
    """Node metadata indexplug cannot store as it is, or that would take the adapter's keys
    (a ``ValueError``); the message names the key."""

    def __init__(self, message: str, key: str) -> None:
        super().__init__(message, field=f"metadata.{key}")
        self.key = key


class NodeRefused(indexplug.InvalidRequest):
    """A node the store cannot keep (no text, or a kind of node other than text)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, field="nodes")


def _is_flat(value: Any) -> bool:
    """Whether passage metadata holds ``value`` as it is (str, int, finite float, bool, None,
    a list of str/int/finite float/bool)."""
    if value is None or type(value) in (str, int, bool):
        return True
    if type(value) is float:
        return math.isfinite(value)
    if type(value) is list:
        items: list[Any] = value
        return all(
            type(v) in (str, int, bool) or (type(v) is float and math.isfinite(v)) for v in items
        )
    return False


def _kept(key: str, value: Any) -> None:
    """Refuse, naming ``key``, a value that cannot be kept exactly in the node record."""
    try:
        typed_json.dumps(value, f"metadata {key!r}")
    except typed_json.UnstorableValue as exc:
        raise MetadataRefused(
            f"{exc}: node metadata is kept when it is JSON (any nesting), a tuple, or a "
            "datetime, date or time",
            key,
        ) from exc


def node_to_passage(node: BaseNode) -> indexplug.Passage:
    """The passage keeping ``node`` (keyed by its id; see the module docstring)."""
    if type(node) not in _NODE_CLASSES.values():
        raise NodeRefused(
            f"node {node.node_id!r} is a {type(node).__name__}: the store keeps text nodes "
            "(TextNode, Document) only"
        )
    text = node.get_content()
    if not text.strip():
        raise NodeRefused(f"node {node.node_id!r} has no text (indexplug keeps text passages)")
    metadata: dict[str, indexplug.passages.MetadataValue] = {}
    kept: dict[str, Any] = {}
    for key, value in node.metadata.items():
        if not isinstance(key, str):
            raise MetadataRefused(f"metadata key {key!r} is not a string", str(key))
        if key == NAMESPACE or key.startswith(NAMESPACE + "."):
            raise MetadataRefused(
                f"metadata key {key!r} is reserved for the indexplug adapter (its own fields "
                "live there); rename it",
                key,
            )
        if _is_flat(value):
            metadata[key] = list(value) if type(value) is list else value
        else:
            _kept(key, value)
            kept[key] = value
    record = node.model_dump(mode="json")
    for name in _LEFT_OUT:
        record.pop(name, None)
    record["class_name"] = node.class_name()
    if kept:
        record[KEPT_METADATA] = typed_json.dumps(kept, "metadata")
    ref = node.ref_doc_id
    if ref is None and isinstance(node, Document):
        ref = node.node_id  # a document is its own source: delete(its id) removes it
    metadata[NODE_ID] = node.node_id
    metadata[REF_DOC_ID] = ref
    metadata[NODE_JSON] = json.dumps(record, ensure_ascii=False, sort_keys=True)
    start, end = getattr(node, "start_char_idx", None), getattr(node, "end_char_idx", None)
    if not (type(start) is int and type(end) is int and 0 <= start <= end):
        start, end = 0, None
    uri = (
        f"llamaindex://{quote(ref, safe='')}"
        if ref
        else f"llamaindex://node/{quote(node.node_id, safe='')}"
    )
    return indexplug.Passage.create(
        text, uri, metadata=metadata, key=node.node_id, start=start, end=end
    )


def is_adapter_passage(passage: indexplug.Passage) -> bool:
    """Whether ``passage`` was written by this adapter (it has the node record)."""
    return isinstance(passage.metadata.get(NODE_JSON), str)


def user_metadata(passage: indexplug.Passage) -> dict[str, Any]:
    """The passage's metadata as the user wrote it (plain lists; the adapter's keys left
    out for a passage this adapter wrote)."""
    own = is_adapter_passage(passage)
    return {
        k: list(v) if isinstance(v, list) else v
        for k, v in passage.metadata.items()
        if not (own and k in RESERVED)
    }


def passage_to_node(passage: indexplug.Passage) -> BaseNode:
    """The node a passage keeps: the node written, for a passage this adapter wrote; for any
    other passage a ``TextNode`` with the passage id as node id and its key (else its uri) as
    the source document."""
    meta = user_metadata(passage)
    if is_adapter_passage(passage):
        record = json.loads(str(passage.metadata[NODE_JSON]))
        cls = _NODE_CLASSES.get(str(record.pop("class_name", "TextNode")), TextNode)
        record.update(id_=str(passage.metadata.get(NODE_ID) or passage.key), text=passage.text)
        raw = record.pop(KEPT_METADATA, None)
        if isinstance(raw, str):
            meta.update(typed_json.loads(raw))
        record["metadata"] = meta
        return cls.model_validate(record)
    return TextNode(
        id_=passage.id,
        text=passage.text,
        metadata=meta,
        start_char_idx=passage.start,
        end_char_idx=passage.end,
        relationships={
            NodeRelationship.SOURCE: RelatedNodeInfo(node_id=passage.key or passage.source.uri)
        },
    )


def hit_fields(hit: indexplug.Hit) -> dict[str, Any]:
    """The adapter's own fields of a hit: what goes under the ``indexplug`` metadata entry."""
    p = hit.passage
    return {
        "passage_id": p.id,
        "key": p.key,
        "uri": p.source.uri,
        "start": p.start,
        "end": p.end,
        "rank": hit.rank,
        "score_scale": hit.score_scale,
        "untrusted": hit.untrusted,
    }


def hit_to_node(hit: indexplug.Hit) -> BaseNode:
    """The node of a hit, with the hit's adapter fields under ``indexplug``, which is kept out
    of the LLM's and the embedder's view of the node."""
    node = passage_to_node(hit.passage)
    if NAMESPACE in node.metadata:
        raise MetadataRefused(
            f"passage {hit.passage.id[:12]}... has a metadata key {NAMESPACE!r} of its own; the "
            "adapter keeps its fields there and will not overwrite it",
            NAMESPACE,
        )
    node.metadata[NAMESPACE] = hit_fields(hit)
    for excluded in (node.excluded_llm_metadata_keys, node.excluded_embed_metadata_keys):
        if NAMESPACE not in excluded:
            excluded.append(NAMESPACE)
    return node


def last_per_key(passages: Sequence[indexplug.Passage]) -> list[indexplug.Passage]:
    """One passage per key, the last given (adding a node twice in one call keeps the last,
    as adding it twice in two calls does)."""
    by_key: dict[str | None, indexplug.Passage] = {}
    for p in passages:
        by_key.pop(p.key, None)
        by_key[p.key] = p
    return list(by_key.values())
