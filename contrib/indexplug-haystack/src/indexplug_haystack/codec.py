"""One Haystack ``Document`` is one keyed indexplug passage, and back, exactly.

* The document id is the passage's caller key, so writing the same id again replaces it.
* ``content`` is the passage text.  A document without text a passage can hold (``None``,
  empty or only whitespace) gets the text :data:`NO_TEXT` and keeps its real content in the
  record below.
* ``meta`` values that indexplug metadata holds as they are (strings, integers up to 2**53,
  finite floats, booleans, ``None``) are real passage metadata, so filters run in the backend.
* Tuples in meta values are stored as lists, as JSON writes them (``DocumentSplitter`` with
  ``split_overlap`` puts ``(start, end)`` tuples in ``meta["_split_overlap"]``), so they come
  back as lists.  ``datetime``, ``date`` and ``time`` values (anywhere in a value) are kept
  and come back as they were, as in Haystack's in-memory store, whose filters compare
  datetimes; any other value that is not JSON is refused naming the key.
* Everything else (the embedding, the sparse embedding, the blob, meta values that are lists,
  dicts or out of range, and the write order) is one JSON record under the metadata key
  :data:`RECORD_KEY`; :data:`ENCODED_KEY` lists the meta keys kept only in that record, so that
  a backend filter can tell such a document apart from one that lacks the key.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import math
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from haystack.dataclasses import ByteStream, Document, SparseEmbedding
from indexplug import Passage, typed_json
from indexplug.passages import MAX_KEY_CHARS, MAX_PASSAGE_CHARS

RECORD_KEY = "indexplug"
"""The metadata key of the adapter's JSON record (and, in retriever results, of its fields)."""
ENCODED_KEY = "indexplug.encoded"
"""The metadata key listing the meta keys whose values live only in the record."""
RESERVED_PREFIX = "indexplug."
NO_TEXT = "\u2205"
"""The passage text of a document with no text a passage can hold (the empty-set sign: no
word for full-text search to match)."""
URI_PREFIX = "haystack:document:"
RECORD_VERSION = 1
MAX_EXACT_INT = 2**53
"""Integers beyond this are kept in the record: backends compare numbers as doubles."""


class MetadataRefused(ValueError):
    """A document that cannot be stored as it is (a reserved meta key, a value that is not
    JSON, an id no caller key can be); the message names the document and the key."""


class ForeignRecord(ValueError):
    """A stored passage whose ``indexplug`` metadata is not this adapter's record."""


_SEQ_LOCK = threading.Lock()
_LAST_SEQ = 0


def next_sequence(n: int) -> int:
    """The first of ``n`` increasing write-order numbers (nanoseconds since the epoch, never
    repeated in this process), so that ``filter_documents`` answers in the order written."""
    global _LAST_SEQ
    with _SEQ_LOCK:
        first = max(time.time_ns(), _LAST_SEQ + 1)
        _LAST_SEQ = first + max(n, 1) - 1
        return first


def _is_flat(value: Any) -> bool:
    """Whether indexplug metadata holds ``value`` as it is, with Haystack's meaning intact."""
    if value is None or type(value) is bool:
        return True
    if type(value) is int:
        return -MAX_EXACT_INT <= value <= MAX_EXACT_INT
    if type(value) is float:
        return math.isfinite(value)
    if type(value) is str:
        return "\x00" not in value and _encodable(value)
    return False


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


MAX_META_DEPTH = 100
"""The deepest nesting of lists and dicts a meta value may have."""


def plain_json(value: Any, where: str, depth: int = 0) -> Any:
    """``value`` with every tuple as a list, as JSON writes it (Haystack's ``DocumentSplitter``
    puts ``(start, end)`` tuples in ``meta["_split_overlap"][i]["range"]``); a value without
    tuples comes back as it is.  Nothing else is converted: :func:`_check_json` refuses it."""
    if depth > MAX_META_DEPTH:
        raise MetadataRefused(f"{where}: nested deeper than {MAX_META_DEPTH} levels")
    if type(value) is tuple or type(value) is list:
        items = [plain_json(v, where, depth + 1) for v in value]
        if type(value) is list and all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return items
    if type(value) is dict:
        pairs = {k: plain_json(v, where, depth + 1) for k, v in value.items()}
        if all(pairs[k] is v for k, v in value.items()):
            return value
        return pairs
    return value


def _check_json(value: Any, where: str, *, dates: bool = True) -> None:
    """Refuse a meta value that JSON cannot give back as it was (a tuple, a set, a datetime,
    a dict with keys that are not strings...): Haystack meta must be JSON."""
    stack: list[tuple[Any, str]] = [(value, where)]
    seen = 0
    while stack:
        item, path = stack.pop()
        seen += 1
        if seen > 1_000_000:
            raise MetadataRefused(f"{where}: the value is too large to store")
        if item is None or type(item) in (bool, int, float, str):
            if type(item) is str and not _encodable(item):
                raise MetadataRefused(f"{path}: text that is not Unicode (a lone surrogate)")
            continue
        if dates and isinstance(item, (dt.datetime, dt.date, dt.time)):
            continue  # kept in the record, typed (see :func:`to_passage`)
        if type(item) is list:
            stack.extend((v, f"{path}[{i}]") for i, v in enumerate(item))
            continue
        if type(item) is dict:
            for k, v in item.items():
                if type(k) is not str:
                    raise MetadataRefused(f"{path}: a dict key {k!r} is not a string")
                stack.append((v, f"{path}.{k}"))
            continue
        raise MetadataRefused(
            f"{path}: a {type(item).__name__} cannot be stored (meta values are JSON: "
            "strings, numbers, booleans, null, lists and dicts; and datetime, date and time "
            "values, which Haystack's filters compare as dates)"
        )


def check_key(doc_id: Any) -> str:
    """The caller key of a document id, or :class:`MetadataRefused` naming why it cannot be."""
    if type(doc_id) is not str or not doc_id:
        raise MetadataRefused(f"a document id must be a non-empty string, got {doc_id!r}")
    if len(doc_id) > MAX_KEY_CHARS:
        raise MetadataRefused(
            f"document id {doc_id[:40]!r}...: ids are at most {MAX_KEY_CHARS} characters"
        )
    if "\x00" in doc_id or not _encodable(doc_id):
        raise MetadataRefused(f"document id {doc_id!r} holds a NUL or a lone surrogate")
    return doc_id


def is_key(doc_id: Any) -> bool:
    """Whether ``doc_id`` could be a stored document's id (so worth asking the index for)."""
    try:
        check_key(doc_id)
    except MetadataRefused:
        return False
    return True


def to_passage(doc: Document, seq: int) -> Passage:
    """The passage that stores ``doc`` (written ``seq``-th)."""
    key = check_key(doc.id)
    meta = doc.meta if doc.meta is not None else {}
    if not isinstance(meta, dict):
        raise MetadataRefused(f"document {key!r}: meta must be a dict")
    flat: dict[str, Any] = {}
    encoded: dict[str, Any] = {}
    for name, value in meta.items():
        if type(name) is not str:
            raise MetadataRefused(f"document {key!r}: meta key {name!r} is not a string")
        if name == RECORD_KEY or name.startswith(RESERVED_PREFIX):
            raise MetadataRefused(
                f"document {key!r}: meta key {name!r} is reserved for the indexplug adapter "
                f"('{RECORD_KEY}' and keys starting with '{RESERVED_PREFIX}')"
            )
        if "\x00" in name or not _encodable(name):
            raise MetadataRefused(f"document {key!r}: meta key {name!r} holds a NUL or surrogate")
        value = plain_json(value, f"document {key!r}: meta[{name!r}]")
        _check_json(value, f"document {key!r}: meta[{name!r}]")
        if _is_flat(value):
            flat[name] = value
        else:
            encoded[name] = value
    record: dict[str, Any] = {"v": RECORD_VERSION, "seq": seq}
    content = doc.content
    if content is not None and type(content) is not str:
        raise MetadataRefused(f"document {key!r}: content must be a string or None")
    if content is not None and len(content) > MAX_PASSAGE_CHARS:
        raise MetadataRefused(
            f"document {key!r}: content is longer than {MAX_PASSAGE_CHARS:,} characters"
        )
    if content is None or not content.strip() or not _encodable(content):
        if content is not None and not _encodable(content):
            raise MetadataRefused(f"document {key!r}: content holds a lone surrogate")
        record["content"] = content
        text = NO_TEXT
    else:
        text = content
    if doc.embedding is not None:
        record["embedding"] = [float(x) for x in doc.embedding]
    if doc.sparse_embedding is not None:
        record["sparse_embedding"] = doc.sparse_embedding.to_dict()
    if doc.blob is not None:
        _check_json(doc.blob.meta, f"document {key!r}: blob.meta", dates=False)
        record["blob"] = {
            "data": base64.b64encode(doc.blob.data).decode("ascii"),
            "meta": doc.blob.meta,
            "mime_type": doc.blob.mime_type,
        }
    if encoded:
        if typed_json.is_plain(encoded):
            record["meta"] = encoded
        else:  # dates: kept as typed JSON text, so they come back as dates
            record["typed_meta"] = typed_json.dumps(
                encoded, f"document {key!r}: meta", allow_nan=True
            )
        flat[ENCODED_KEY] = sorted(encoded)
    record_json = json.dumps(record, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    flat[RECORD_KEY] = record_json
    # The uri names this version of the document, so that writing the same id with other meta
    # or another embedding is a new passage (replacing the old one), never "already known".
    version = json.dumps(
        [text, flat], ensure_ascii=False, separators=(",", ":"), sort_keys=True
    ).encode("utf-8")
    uri = URI_PREFIX + hashlib.sha256(version).hexdigest()
    return Passage.create(text, uri, metadata=flat, key=key)


def read_record(passage: Passage) -> dict[str, Any] | None:
    """The adapter's record of a stored passage; ``None`` for a passage written another way."""
    raw = passage.metadata.get(RECORD_KEY)
    if raw is None:
        return None
    try:
        record = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        record = None
    if not isinstance(record, dict) or record.get("v") != RECORD_VERSION:
        raise ForeignRecord(
            f"passage {passage.id}: its metadata key '{RECORD_KEY}' is not the Haystack "
            "adapter's record (the key is reserved for it)"
        )
    return record


def sequence(passage: Passage) -> int:
    """The write order of a stored passage (0 for one written without the adapter)."""
    record = read_record(passage)
    return int(record.get("seq", 0)) if record else 0


def to_document(passage: Passage, *, score: float | None = None) -> Document:
    """The document stored as ``passage`` (one written another way becomes a document with its
    text, its metadata and its key, or its passage id when it has none)."""
    record = read_record(passage)
    meta: dict[str, Any] = {
        k: list(v) if isinstance(v, list) else v
        for k, v in passage.metadata.items()
        if k not in (RECORD_KEY, ENCODED_KEY)
    }
    doc_id = passage.key or passage.id
    if record is None:
        return Document(id=doc_id, content=passage.text, meta=meta, score=score)
    meta.update(record.get("meta", {}))
    if isinstance(record.get("typed_meta"), str):
        meta.update(typed_json.loads(record["typed_meta"]))
    content = record.get("content", passage.text)
    blob = None
    if "blob" in record:
        b = record["blob"]
        blob = ByteStream(
            data=base64.b64decode(b["data"]), meta=b.get("meta") or {}, mime_type=b.get("mime_type")
        )
    sparse = record.get("sparse_embedding")
    return Document(
        id=doc_id,
        content=content,
        blob=blob,
        meta=meta,
        score=score,
        embedding=record.get("embedding"),
        sparse_embedding=SparseEmbedding.from_dict(sparse) if sparse is not None else None,
    )


def check_documents(documents: Any) -> Sequence[Document]:
    """``documents`` if it is a list of Documents, else the ``ValueError`` Haystack expects."""
    if isinstance(documents, (str, bytes, Mapping)) or not isinstance(documents, Sequence):
        raise ValueError("write_documents takes a list of haystack Documents")
    for d in documents:
        if not isinstance(d, Document):
            raise ValueError(
                f"write_documents takes a list of haystack Documents, got a {type(d).__name__}"
            )
    return documents
