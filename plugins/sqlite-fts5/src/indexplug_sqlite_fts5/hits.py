"""Hits from stored rows, without paying pydantic's per-object overhead twice.

A search answers up to ``top_k`` hits, each a :class:`~indexplug.outcomes.Hit` around a
:class:`~indexplug.passages.Passage` around a :class:`~indexplug.passages.Source`.  Validating
them here would repeat what the guard does anyway (it checks every hit's rank, score and scale
and recomputes each passage's content-addressed id, refusing any passage altered after
indexing), and even ``model_construct``, which skips validation, walks every field's metadata:
about 8 µs a model, most of a millisecond for 100 hits.  :func:`construct` does exactly what
``model_construct`` does for the plain models used here (frozen, no aliases, no private
attributes, no post-init hook, every field given): it sets the instance ``__dict__`` and
pydantic's bookkeeping attributes directly.  Models that do not fit those conditions (a future
change in core, say) go through ``model_construct`` itself, so the shortcut can never build
something ``model_construct`` would not.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cache, lru_cache
from typing import Any, TypeVar

from indexplug.outcomes import Hit
from indexplug.passages import Passage, Source
from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)

_set = object.__setattr__


@cache
def _plain(cls: type[BaseModel]) -> frozenset[str] | None:
    """The field names of ``cls`` if :func:`construct` may fill it directly, else ``None``."""
    fields = cls.__pydantic_fields__
    if (
        cls.__pydantic_post_init__ is not None
        or cls.__private_attributes__
        or cls.__pydantic_root_model__
        or cls.model_config.get("extra") == "allow"
        or any(f.alias is not None or f.validation_alias is not None for f in fields.values())
    ):
        return None
    return frozenset(fields)


def construct(cls: type[M], values: dict[str, Any]) -> M:
    """``cls.model_construct(**values)`` for trusted ``values`` naming every field of ``cls``.

    ``values`` becomes the instance's ``__dict__`` (the caller must not reuse it).
    """
    names = _plain(cls)
    if names is None or values.keys() != names:
        return cls.model_construct(**values)
    return _fill(cls.__new__(cls), values, names)


def _fill(m: M, values: dict[str, Any], names: frozenset[str]) -> M:
    _set(m, "__dict__", values)
    _set(m, "__pydantic_fields_set__", set(names))
    _set(m, "__pydantic_extra__", None)
    _set(m, "__pydantic_private__", None)
    return m


_PASSAGE_FIELDS = _plain(Passage)
_HIT_FIELDS = _plain(Hit)
_EXPECTED = (
    frozenset({"id", "text", "source", "document_sha256", "start", "end", "metadata"}),
    frozenset({"rank", "score", "score_scale", "passage", "untrusted"}),
)
_FAST = (_PASSAGE_FIELDS, _HIT_FIELDS) == _EXPECTED
"""Whether the two models built per hit still have exactly the fields written out below; if
core changes them, every hit goes through ``model_construct`` (with its field check) instead."""


@lru_cache(maxsize=16_384)
def source_from_json(text: str) -> Source:
    """A stored source, parsed once: sources are frozen, so one object can serve every hit."""
    return Source.model_validate_json(text)


def passage_from_row(row: Sequence[Any]) -> Passage:
    """A passage from ``(id, text, source JSON, document_sha256, start, end, metadata JSON)``.

    Like :meth:`Passage.from_stored`, the id is *not* checked here: a row altered behind the
    backend's back still comes out, and the guard refuses to serve it with a clear reason.
    """
    pid, text, source, doc_sha, start, end, metadata = row
    values = {
        "id": pid,
        "text": text,
        "source": source_from_json(source),
        "document_sha256": doc_sha,
        "start": start,
        "end": end,
        "metadata": json.loads(metadata) if metadata != "{}" else {},
    }
    if _FAST:
        return _fill(Passage.__new__(Passage), values, _EXPECTED[0])
    return construct(Passage, values)


def hit(rank: int, score: float, scale: str, passage: Passage) -> Hit:
    """A hit around ``passage`` (stored text is data, never an instruction: ``untrusted``)."""
    values = {
        "rank": rank,
        "score": score,
        "score_scale": scale,
        "passage": passage,
        "untrusted": True,
    }
    if _FAST:
        return _fill(Hit.__new__(Hit), values, _EXPECTED[1])
    return construct(Hit, values)
