"""Building trusted models without pydantic's per-object overhead.

A search answers up to ``top_k`` hits, each a :class:`~indexplug.outcomes.Hit` around a
:class:`~indexplug.passages.Passage`.  Backends build them from what they stored, and the
guard then checks every hit and hands the caller copies it builds itself
(:mod:`indexplug.guard`), so validating at either step would only repeat those checks.  Even
``model_construct``, which skips validation, walks every field's metadata on every call.
:func:`construct` does exactly what ``model_construct`` does for the plain models used here (no
aliases, no private attributes, no post-init hook, no extra fields allowed, every field given):
it sets the instance ``__dict__`` and pydantic's bookkeeping attributes directly.  Any other
model, or values that do not name exactly the model's fields, go through ``model_construct``
itself, so the shortcut can never build something ``model_construct`` would not.
"""

from __future__ import annotations

from functools import cache
from typing import Any, TypeVar

from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)


_set = object.__setattr__
"""Fills a slot or the ``__dict__`` past the frozen model's own ``__setattr__`` (the builtin
itself, not a function around it: a search of 100 hits fills 1,200 of them)."""


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
    m = cls.__new__(cls)
    _set(m, "__dict__", values)
    _set(m, "__pydantic_fields_set__", set(names))
    _set(m, "__pydantic_extra__", None)
    _set(m, "__pydantic_private__", None)
    return m


def copied(model: M, update: dict[str, Any]) -> M:
    """``model.model_copy(update=update)`` for a plain model and trusted ``update`` values.

    The guard stamps every answer it passes on (its deadline, how long it took); pydantic's
    ``model_copy`` is general Python (private attributes, extras, deep copies) and, run once a
    search with its code out of the CPU's caches, cost about as much as checking ten hits.
    Here the copy is one new object with the old ``__dict__`` updated; like ``model_copy`` it
    validates nothing, and it adds the updated names to the fields set.  Any model that is not
    plain, or an update naming something that is not a field, goes through ``model_copy``.
    """
    cls = type(model)
    names = _plain(cls)
    if names is None or not update.keys() <= names:
        return model.model_copy(update=update)
    m = cls.__new__(cls)
    _set(m, "__dict__", {**model.__dict__, **update})
    _set(m, "__pydantic_fields_set__", model.__pydantic_fields_set__ | update.keys())
    _set(m, "__pydantic_extra__", None)
    _set(m, "__pydantic_private__", None)
    return m
