"""What maps to what between LangChain documents and indexplug passages.

One LangChain ``Document`` is one passage: its ``id`` is the passage's caller key (so adding
again under the same id replaces it), its ``metadata`` is the passage's metadata exactly, and
its ``page_content`` is the passage text.  The adapter's own fields (passage id, rank, score,
scale, span, source uri, untrusted flag) go under the one metadata key :data:`NAMESPACE` in a
retriever's results, never over a key of the user's; a user key of that name is refused.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

import indexplug
from indexplug import typed_json
from indexplug.errors import InvalidRequest
from langchain_core.documents import Document
from pydantic import ValidationError

NAMESPACE = "indexplug"
"""The metadata key holding the adapter's own fields in a retriever's documents."""
_PASSAGE_ID = re.compile(r"^[0-9a-f]{64}$")


class ReservedMetadataKey(InvalidRequest):
    """A document's metadata uses the key the adapter keeps its own fields under."""

    def __init__(self, where: str) -> None:
        super().__init__(
            f"metadata keys {NAMESPACE!r} and '{NAMESPACE}.*' are reserved for the adapter's "
            f"own fields ({where}); rename it",
            field=f"metadata.{NAMESPACE}",
        )


class UnstorableMetadata(InvalidRequest):
    """A metadata value indexplug cannot store as it is (indexplug metadata is flat)."""


class NoRelevanceScale(InvalidRequest, NotImplementedError):
    """Relevance scores (0 to 1) asked of a backend whose scores have no such reading (BM25
    is comparable within one search only).  A ``NotImplementedError`` too, which is what
    LangChain's own stores raise for it."""


def _scalar(value: Any) -> bool:
    if type(value) is float:
        return math.isfinite(value)
    return type(value) in (str, int, bool)


RECORD_KEY = "indexplug.meta"
"""The passage metadata key holding, as JSON text (:mod:`indexplug.typed_json`), the metadata
values passage metadata cannot hold as they are (nested dicts, lists of those, dates, tuples)."""
RESERVED_PREFIX = NAMESPACE + "."


def _flat(value: Any) -> bool:
    return (
        value is None or _scalar(value) or (type(value) is list and all(_scalar(v) for v in value))
    )


def flat_metadata(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    """``metadata`` as passage metadata.  What a passage holds as it is (str, int, finite
    float, bool, None, a list of str/int/finite float/bool) is stored under its own key, so
    filters see it; every other value LangChain's in-memory store would keep (a nested dict,
    a list of those, a ``datetime``, ``date`` or ``time``, a tuple) is kept exactly in one
    JSON record under :data:`RECORD_KEY`, out of the filters' sight, and comes back equal and
    of the same type.  Anything else (a set, bytes, an object) is refused naming the key."""
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise UnstorableMetadata(
            f"metadata must be a dict, not {type(metadata).__name__}", field="metadata"
        )
    out: dict[str, Any] = {}
    kept: dict[str, Any] = {}
    for key, value in metadata.items():
        if not isinstance(key, str):
            raise UnstorableMetadata(f"metadata key {key!r} is not a string", field="metadata")
        if key == NAMESPACE or key.startswith(RESERVED_PREFIX):
            raise ReservedMetadataKey(f"{key!r} given in a document to add")
        if _flat(value):
            out[key] = list(value) if type(value) is list else value
            continue
        try:
            typed_json.dumps(value, f"metadata {key!r}")
        except typed_json.UnstorableValue as exc:
            raise UnstorableMetadata(
                f"{exc}: LangChain metadata is kept when it is JSON (any nesting), a tuple, or "
                "a datetime, date or time",
                field=f"metadata.{key}",
            ) from exc
        kept[key] = value
    if kept:
        out[RECORD_KEY] = typed_json.dumps(kept, "metadata")
    return out


def to_passage(text: str, metadata: Mapping[str, Any] | None, key: str) -> indexplug.Passage:
    """The passage for one document under caller key ``key``.  Its source uri is the
    document's ``metadata["source"]`` when that is text (LangChain's loaders set it), else
    ``langchain:<key>``; either way the metadata itself is stored unchanged."""
    meta = flat_metadata(metadata)
    if not isinstance(text, str) or not text.strip():
        raise InvalidRequest(
            "a document's page_content must be non-empty text (indexplug stores no empty passage)",
            field="page_content",
        )
    source = meta.get("source")
    uri = source if isinstance(source, str) and 0 < len(source) <= 4096 else f"langchain:{key}"
    try:
        return indexplug.Passage.create(text, uri, metadata=meta, key=key)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "document"
        raise InvalidRequest(
            f"cannot store the document {key!r}: {first['msg']}", field=where
        ) from exc


def document_id(p: indexplug.Passage) -> str:
    """A passage's LangChain id: its caller key, or its passage id when it has none (a passage
    indexed outside LangChain)."""
    return p.key if p.key is not None else p.id


def user_metadata(p: indexplug.Passage) -> dict[str, Any]:
    """The passage's metadata as a plain, mutable dict (lists as plain lists), with the values
    kept in the :data:`RECORD_KEY` record back in their places."""
    meta = {k: list(v) if isinstance(v, list) else v for k, v in p.metadata.items()}
    raw = meta.pop(RECORD_KEY, None)
    if isinstance(raw, str):
        try:
            kept = typed_json.loads(raw)
        except ValueError:
            kept = None
        if not isinstance(kept, dict):
            raise ReservedMetadataKey(f"stored with passage {p.id[:12]}... outside this adapter")
        meta.update(kept)
    elif raw is not None:
        meta[RECORD_KEY] = raw
    return meta


def passage_document(p: indexplug.Passage) -> Document:
    """The document exactly as it was stored: text, id, the user's metadata and nothing else."""
    return Document(page_content=p.text, id=document_id(p), metadata=user_metadata(p))


def hit_document(hit: indexplug.Hit) -> Document:
    """A retriever's document: the user's metadata, plus the adapter's fields under
    :data:`NAMESPACE`."""
    p = hit.passage
    meta = user_metadata(p)
    if NAMESPACE in meta:
        raise ReservedMetadataKey(f"stored with passage {p.id[:12]}... outside this adapter")
    meta[NAMESPACE] = {
        "passage_id": p.id,
        "key": p.key,
        "rank": hit.rank,
        "score": hit.score,
        "score_scale": hit.score_scale,
        "uri": p.source.uri,
        "start": p.start,
        "end": p.end,
        "untrusted": hit.untrusted,
    }
    return Document(page_content=p.text, id=document_id(p), metadata=meta)


def lookup(ids: Sequence[str]) -> tuple[list[str], list[str]]:
    """``(passage ids, keys)`` to read or remove for LangChain ids: every id as a caller key,
    and those shaped like a passage id (a passage without a key) as a passage id too."""
    if isinstance(ids, str) or not all(isinstance(i, str) for i in ids):
        raise InvalidRequest("ids must be a list of strings", field="ids")
    return [i for i in ids if _PASSAGE_ID.match(i)], list(ids)


def filter_argument(kwargs: dict[str, Any], default: Mapping[str, Any] | None) -> Any:
    """The indexplug filter of a call: ``filter=`` (LangChain's name) or ``filters=`` (indexplug's),
    popped from ``kwargs``; a dict in indexplug's operator language, passed through as it is
    (the guard parses it and refuses what a backend cannot serve)."""
    given = [kwargs.pop(name) for name in ("filter", "filters") if name in kwargs]
    if len(given) > 1:
        raise InvalidRequest("give filter= or filters=, not both", field="filters")
    value = given[0] if given else default
    if value is not None and not isinstance(value, Mapping):
        raise InvalidRequest(
            "filters must be a dict in indexplug's operator language (e.g. "
            '{"year": {"$gte": 2020}}); a callable or other filter has no exact translation',
            field="filters",
        )
    return value


def nothing_to_find(query: Any, k: Any) -> bool:
    """Whether a search has an empty answer without asking the index: ``k`` is 0, or the query
    is text with no word in it (empty, blank, only punctuation).  This is what LangChain's own
    in-memory stores answer such a search with (``[]``); a query that is not text, or a
    negative ``k``, still goes to the guard and is refused there."""
    if type(k) is int and k == 0:
        return True
    return isinstance(query, str) and not any(ch.isalnum() for ch in query)


def refuse_kwargs(kwargs: Mapping[str, Any], where: str) -> None:
    if kwargs:
        names = ", ".join(sorted(kwargs))
        raise InvalidRequest(f"{where} takes no argument(s) {names}", field=sorted(kwargs)[0])


def raise_outcome(outcome: Any) -> NoReturn:
    """Raise the typed :class:`indexplug.OutcomeError` subclass for an outcome that is not the
    answer asked for (``OutcomeError`` itself for one with no subclass)."""
    indexplug.raise_for_outcome(outcome)
    raise indexplug.OutcomeError(outcome)
