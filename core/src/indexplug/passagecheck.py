"""Checking a plugin's passages: their fields of exact types, and the guard's own copies.

The guard builds every passage it returns from values checked here, so nothing a plugin keeps
or changes afterwards can reach the caller.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from indexplug.construct import construct
from indexplug.passages import (
    EMPTY_METADATA,
    Metadata,
    MetadataList,
    MetadataValue,
    Passage,
    Source,
)

_SCALARS = (str, int, float, bool)
_LISTS = (list, MetadataList)
_SOURCE_TEXT = ("uri", "sha256", "provenance", "licence")
_SOURCE_DATES = ("retrieved_at", "published_at")

_PassageFields = tuple[
    str, str, Any, str | None, int, int, dict[str, MetadataValue], str | None, str | None
]


def _passage_fields(d: dict[str, Any]) -> _PassageFields | None:
    """A passage's fields from its ``__dict__``, if each is of its exact declared type."""
    pid, text, source = d.get("id"), d.get("text"), d.get("source")
    doc_sha, start, end = d.get("document_sha256"), d.get("start"), d.get("end")
    metadata, digest, key = d.get("metadata"), d.get("digest"), d.get("key")
    if (
        type(pid) is not str
        or type(text) is not str
        or not text
        or type(source) is not Source
        or (doc_sha is not None and type(doc_sha) is not str)
        or type(start) is not int
        or type(end) is not int
        or not 0 <= start <= end
        or (type(metadata) is not Metadata and type(metadata) is not dict)
        or (digest is not None and type(digest) is not str)
        or (key is not None and type(key) is not str)
    ):
        return None
    for name, value in metadata.items():
        if type(name) is not str:
            return None
        if type(value) in _LISTS:
            if not all(type(v) in _SCALARS for v in cast(list[Any], value)):
                return None
        elif value is not None and type(value) not in _SCALARS:
            return None
    return (pid, text, source, doc_sha, start, end, metadata, digest, key)


def _metadata_copy(metadata: dict[str, MetadataValue]) -> Metadata:
    """A new read-only copy of checked ``metadata`` (its lists copied too)."""
    if not metadata:
        return EMPTY_METADATA
    return Metadata(
        {
            k: MetadataList(cast(list[Any], v)) if type(v) in _LISTS else v
            for k, v in metadata.items()
        }
    )


def _source_copy(source: Source) -> Source | None:
    """A new :class:`Source` with ``source``'s values, if each is of its exact type."""
    d = source.__dict__
    values: dict[str, Any] = {}
    for name in _SOURCE_TEXT:
        v = d.get(name)
        if v is not None and type(v) is not str:
            return None
        values[name] = v
    for name in _SOURCE_DATES:
        v = d.get(name)
        if v is not None and type(v) is not datetime:
            return None
        values[name] = v
    if not values["uri"]:
        return None
    return construct(Source, values)


def _same(known: Passage, fields: _PassageFields) -> bool:
    """Whether ``fields`` (exact types, see :func:`_passage_fields`) are those of ``known``."""
    pid, text, source, doc_sha, start, end, metadata, _, key = fields
    k = known.__dict__
    # one comparison of tuples: each value is of its exact type (str, int or None), so
    # equality is exactly equality of the fields
    if (k["id"], k["text"], k["document_sha256"], k["start"], k["end"], k["key"]) != (
        pid,
        text,
        doc_sha,
        start,
        end,
        key,
    ):
        return False
    ks, s = k["source"].__dict__, source.__dict__
    # the checked copy holds exactly the source's fields, text or dates of their exact types;
    # ``s`` has the same names and values, each of exactly one of those types (a subclass
    # is refused; a text never equals a date), only if the two dicts are equal and ...
    if ks != s:
        return False
    for v in s.values():
        # ... no value is a subclass that compares equal
        if v is not None and type(v) is not str and type(v) is not datetime:
            return False
    km = k["metadata"]
    if len(km) != len(metadata):
        return False
    if not km:
        return True
    for name, value in metadata.items():
        # exact types were checked; a bool is not an int here, nor 1 the same as 1.0
        if name not in km:
            return False
        mine = km[name]
        if type(value) in _LISTS:
            items = cast(list[Any], value)
            if type(mine) is not MetadataList or len(mine) != len(items):
                return False
            if any(type(a) is not type(b) or a != b for a, b in zip(mine, items, strict=True)):
                return False
        elif type(mine) is not type(value) or mine != value:
            return False
    return True
